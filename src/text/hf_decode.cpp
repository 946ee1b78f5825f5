#include "text/hf_decode.h"

#include "common/error.h"
#include "common/utf8.h"
#include "text/hf_pretokenize.h"
#include "text/hf_regex.h"
#include "text/hf_unicode.h"

namespace specrun::hf {

namespace {

constexpr const char* kSupported =
    "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence";

class ByteLevel : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const std::size_t mark = bytes.size();
      bool mapped = true;
      for (std::size_t pos = 0; pos < token.size() && mapped;) {
        const int b = byte_level_byte(next_code_point(token, pos));
        if (b < 0)
          mapped = false;
        else
          bytes.push_back(static_cast<char>(b));
      }
      if (!mapped) bytes.replace(mark, std::string::npos, token);
    }
    tokens.assign(1, utf8_replace_invalid(bytes));
  }
};

class Metaspace : public Decoder {
 public:
  explicit Metaspace(const JsonField& json) : replacement_(json.string("replacement")) {
    const std::string scheme = json.string_or("prepend_scheme", "always");
    drop_first_ = scheme != "never" && json.bool_or("add_prefix_space", true);
  }
  void decode_chain(std::vector<std::string>& tokens, bool at_text_start) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      // The Rust library drops every replacement of the first token, not only a leading one.
      const bool drop = i == 0 && at_text_start && drop_first_;
      std::string out;
      const std::string& token = tokens[i];
      for (std::size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(token[pos++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_first_ = true;
};

class Replace : public Decoder {
 public:
  explicit Replace(const JsonField& json)
      : pattern_(json.require("pattern")), content_(json.string("content")) {}
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    for (std::string& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteFallback : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (invalid_utf8_at(run) == std::string_view::npos) {
        out.push_back(run);
      } else {
        for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
    };
    for (std::string& token : tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>')
        byte = hex_byte(token[3], token[4]);
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int hex_byte(char hi, char lo) {
    const int h = hex_digit(hi), l = hex_digit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class Fuse : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens, bool) const override {
    std::string all;
    for (const std::string& token : tokens) all += token;
    tokens.assign(1, std::move(all));
  }
};

class Strip : public Decoder {
 public:
  explicit Strip(const JsonField& json)
      : content_(json.string("content")),
        start_(json.integer_or("start", 0)),
        stop_(json.integer_or("stop", 0)) {
    std::size_t pos = 0;
    if (content_.empty() || (next_code_point(content_, pos), pos != content_.size()))
      json.fail("content", "must be one character (it is \"" + content_ + "\")");
    SPEC_INPUT_CHECK(start_ >= 0 && stop_ >= 0, json.where()
                                                    << ": start and stop must not be negative");
  }
  void decode_chain(std::vector<std::string>& tokens, bool at_text_start) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      // Continuing a text, its first token does not start it: its front is not stripped.
      if (i > 0 || at_text_start)
        for (long long k = 0; k < start_ && token.compare(0, content_.size(), content_) == 0; ++k)
          token.erase(0, content_.size());
      for (long long k = 0;
           k < stop_ && token.size() >= content_.size() &&
           token.compare(token.size() - content_.size(), content_.size(), content_) == 0;
           ++k)
        token.erase(token.size() - content_.size());
    }
  }

 private:
  std::string content_;
  long long start_, stop_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens, bool at_text_start) const override {
    for (const auto& step : steps_) step->decode_chain(tokens, at_text_start);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonField& json) {
  if (json.is_null()) return nullptr;
  json.expect_object();
  const std::string type = json.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(json);
  if (type == "Replace") return std::make_unique<Replace>(json);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(json);
  if (type == "Sequence") {
    const JsonField list = json.require("decoders");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      const JsonField item = list.at(i);
      SPEC_INPUT_CHECK(!item.is_null(), item.where() << " must be a decoder, not null");
      steps.push_back(make_decoder(item));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  json.unsupported_type(kSupported);
}

}  // namespace specrun::hf
