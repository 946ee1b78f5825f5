#include "text/hf_pretokenize.h"

#include <algorithm>
#include <array>

#include "common/error.h"
#include "text/hf_unicode.h"

namespace specrun::hf {

namespace {

constexpr const char* kSupported = "Split, ByteLevel, Metaspace, Sequence";

// The pattern of the Rust library's ByteLevel pre-tokenizer (use_regex true), GPT-2's.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevelMap {
  std::array<std::string, 256> chars;
  std::array<int, 256 + 68> bytes;  // code point -> byte; the 68 others become 256 + n
  ByteLevelMap() {
    bytes.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : 256 + extra++;
      bytes[static_cast<std::size_t>(cp)] = b;
      append_utf8(chars[static_cast<std::size_t>(b)], static_cast<char32_t>(cp));
    }
  }
};

const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap map;
  return map;
}

SplitBehavior parse_behavior(const JsonField& json) {
  const std::string name = json.string("behavior");
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  json.fail("behavior", "\"" + name +
                            "\" is not a split behavior (Removed, Isolated, MergedWithPrevious, "
                            "MergedWithNext, Contiguous)");
}

// Splits every piece at the matches of `find`, a callable (text, matches*).
template <typename Find>
void split_pieces(std::vector<PreToken>& pieces, SplitBehavior behavior, bool invert,
                  const Find& find) {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  std::vector<Match> matches;
  for (PreToken& piece : pieces) {
    matches.clear();
    find(piece.text, &matches);
    for (const auto& [start, end] : split_ranges(matches, piece.text.size(), behavior, invert))
      out.push_back({piece.text.substr(start, end - start), piece.at_text_start && start == 0});
  }
  pieces = std::move(out);
}

class Split : public PreTokenizer {
 public:
  explicit Split(const JsonField& json)
      : pattern_(json.require("pattern")),
        behavior_(parse_behavior(json)),
        invert_(json.bool_or("invert", false)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_pieces(pieces, behavior_, invert_, [this](std::string_view text, std::vector<Match>* m) {
      pattern_.find_all(text, m);
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevel : public PreTokenizer {
 public:
  explicit ByteLevel(const JsonField& json)
      : add_prefix_space_(json.bool_or("add_prefix_space", false)),
        use_regex_(json.bool_or("use_regex", true)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_)
      for (PreToken& piece : pieces)
        if (!piece.text.empty() && piece.text[0] != ' ') piece.text.insert(0, " ");
    if (use_regex_) {
      static const Regex gpt2(oniguruma_to_pcre2(kGpt2Pattern), "the ByteLevel pre-tokenizer");
      split_pieces(pieces, SplitBehavior::kIsolated, false,
                   [](std::string_view text, std::vector<Match>* m) { gpt2.find_all(text, m); });
    }
    for (PreToken& piece : pieces) piece.text = byte_level_encode(piece.text);
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };

  explicit Metaspace(const JsonField& json) : replacement_(json.string("replacement")) {
    std::size_t pos = 0;
    if (replacement_.empty() || (next_code_point(replacement_, pos), pos != replacement_.size()))
      json.fail("replacement", "must be one character (it is \"" + replacement_ + "\")");
    const std::string scheme = json.string_or("prepend_scheme", "");
    if (scheme == "always" || scheme.empty())
      prepend_ = Prepend::kAlways;
    else if (scheme == "first")
      prepend_ = Prepend::kFirst;
    else if (scheme == "never")
      prepend_ = Prepend::kNever;
    else
      json.fail("prepend_scheme", "\"" + scheme + "\" is not one of first, always, never");
    // The field of older files: add_prefix_space false is prepend_scheme "never".
    if (!json.get("add_prefix_space").is_null() && !json.bool_or("add_prefix_space", true)) {
      if (!scheme.empty() && prepend_ != Prepend::kNever)
        json.fail("add_prefix_space",
                  "false does not match prepend_scheme \"" + scheme + "\" (use \"never\")");
      prepend_ = Prepend::kNever;
    }
    split_ = json.bool_or("split", true);
  }

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (PreToken& piece : pieces) {
      std::string text;
      text.reserve(piece.text.size() + replacement_.size());
      for (char c : piece.text) {
        if (c == ' ')
          text += replacement_;
        else
          text.push_back(c);
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts &&
          (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && piece.at_text_start)))
        text.insert(0, replacement_);
      piece.text = std::move(text);
    }
    if (split_) {
      split_pieces(pieces, SplitBehavior::kMergedWithNext, false,
                   [this](std::string_view text, std::vector<Match>* m) {
                     for (std::size_t pos = text.find(replacement_); pos != std::string_view::npos;
                          pos = text.find(replacement_, pos + replacement_.size()))
                       m->push_back({pos, pos + replacement_.size()});
                   });
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_ = Prepend::kAlways;
  bool split_ = true;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> split_ranges(const std::vector<Match>& matches,
                                                              std::size_t size,
                                                              SplitBehavior behavior, bool invert) {
  struct Span {
    std::size_t start, end;
    bool is_match;
  };
  std::vector<Span> spans;
  spans.reserve(2 * matches.size() + 1);
  std::size_t prev = 0;
  for (const Match& m : matches) {
    if (prev != m.start) spans.push_back({prev, m.start, invert});
    spans.push_back({m.start, m.end, !invert});
    prev = m.end;
  }
  if (prev != size) spans.push_back({prev, size, invert});

  std::vector<std::pair<std::size_t, std::size_t>> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty())
          out.back().second = s.end;
        else
          out.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty())
          out.back().second = s.end;
        else
          out.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty())
          out.back().first = it->start;
        else
          out.emplace_back(it->start, it->end);
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  std::erase_if(out, [](const auto& r) { return r.first == r.second; });
  return out;
}

const std::string& byte_level_char(unsigned char b) {
  return byte_level_map().chars[b];
}

int byte_level_byte(char32_t cp) {
  const auto& bytes = byte_level_map().bytes;
  return cp < bytes.size() ? bytes[cp] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
  const ByteLevelMap& map = byte_level_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += map.chars[static_cast<unsigned char>(c)];
  return out;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& json) {
  if (json.is_null()) return nullptr;
  json.expect_object();
  const std::string type = json.type();
  if (type == "Split") return std::make_unique<Split>(json);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(json);
  if (type == "Metaspace") return std::make_unique<Metaspace>(json);
  if (type == "Sequence") {
    const JsonField list = json.require("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      const JsonField item = list.at(i);
      SPEC_INPUT_CHECK(!item.is_null(), item.where() << " must be a pre-tokenizer, not null");
      steps.push_back(make_pre_tokenizer(item));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  json.unsupported_type(kSupported);
}

}  // namespace specrun::hf
