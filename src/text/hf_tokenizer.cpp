// Hugging Face tokenizer.json with a BPE model: loading, the added tokens, the post-processor's
// special tokens, and the encode / decode pipelines of the Rust library (tokenizer/mod.rs):
//   encode: added tokens found in the raw text -> each piece between them normalized ->
//           normalized added tokens found -> pre-tokenized -> BPE -> post-processor's ids;
//   decode: ids -> pieces, special tokens skipped -> decoder steps -> joined.
// "truncation" and "padding" are ignored, as transformers disables them unless a call asks.
#include <algorithm>
#include <unordered_map>

#include "common/error.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "common/utf8.h"
#include "text/hf_added_tokens.h"
#include "text/hf_bpe.h"
#include "text/hf_decode.h"
#include "text/hf_json.h"
#include "text/hf_normalize.h"
#include "text/hf_pretokenize.h"
#include "text/tokenizer.h"

namespace specrun {

namespace {

constexpr int kMaxId = (1 << 30) - 1;
// Longest added token: real ones are special tokens and markers of at most ~30 bytes. Finding
// added tokens in a text reads up to this many bytes at each position.
constexpr std::size_t kMaxAddedTokenBytes = 1024;

// The ids a post-processor puts around a single text (add_special_tokens).
struct SpecialIds {
  std::vector<int> prefix;
  std::vector<int> suffix;
};

// TemplateProcessing's "single": the special tokens before and after $A, their ids from
// "special_tokens".
SpecialIds template_ids(const hf::JsonField& json) {
  const hf::JsonField single = json.require("single");
  const hf::JsonField specials = json.get("special_tokens");
  SpecialIds out;
  bool seen_a = false;
  for (std::size_t i = 0; i < single.array_size(); ++i) {
    const hf::JsonField item = single.at(i);
    item.expect_object();
    const hf::JsonField sequence = item.get("Sequence");
    if (!sequence.is_null()) {
      const std::string id = sequence.string("id");
      SPEC_INPUT_CHECK(id == "A" && !seen_a, sequence.where("id")
                                                 << " \"" << id
                                                 << "\": a single-text template holds $A once");
      seen_a = true;
      continue;
    }
    const std::string name = item.require("SpecialToken").string("id");
    const hf::JsonField entry = specials.get(name.c_str());
    SPEC_INPUT_CHECK(!entry.is_null(), specials.where() << " has no entry \"" << name
                                                        << "\", which " << item.where() << " uses");
    const hf::JsonField ids = entry.require("ids");
    for (std::size_t k = 0; k < ids.array_size(); ++k) {
      const nlohmann::json& id = ids.at(k).value();
      SPEC_INPUT_CHECK(
          id.is_number_integer() && id.get<long long>() >= 0 && id.get<long long>() <= kMaxId,
          ids.at(k).where() << " must be a token id");
      (seen_a ? out.suffix : out.prefix).push_back(id.get<int>());
    }
  }
  SPEC_INPUT_CHECK(seen_a, single.where() << " has no {\"Sequence\": {\"id\": \"A\"}}");
  return out;
}

// BertProcessing / RobertaProcessing: cls $A sep, each written ["[CLS]", 101].
SpecialIds cls_sep_ids(const hf::JsonField& json) {
  SpecialIds out;
  for (const char* key : {"cls", "sep"}) {
    const hf::JsonField pair = json.require(key);
    SPEC_INPUT_CHECK(pair.value().is_array() && pair.value().size() == 2 &&
                         pair.value()[1].is_number_integer() &&
                         pair.value()[1].get<long long>() >= 0 &&
                         pair.value()[1].get<long long>() <= kMaxId,
                     pair.where() << " must be [\"token\", id]");
    (key[0] == 'c' ? out.prefix : out.suffix).push_back(pair.value()[1].get<int>());
  }
  return out;
}

SpecialIds post_processor_ids(const hf::JsonField& json) {
  if (json.is_null()) return {};
  json.expect_object();
  const std::string type = json.type();
  if (type == "ByteLevel") return {};
  if (type == "TemplateProcessing") return template_ids(json);
  if (type == "BertProcessing" || type == "RobertaProcessing") return cls_sep_ids(json);
  if (type == "Sequence") {
    // Each processor wraps what the ones before it produced.
    SpecialIds out;
    const hf::JsonField list = json.require("processors");
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      const SpecialIds inner = post_processor_ids(list.at(i));
      out.prefix.insert(out.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      out.suffix.insert(out.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return out;
  }
  json.unsupported_type(
      "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence");
}

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path) : path_(path) {
    const std::string text = read_input_file(path, kTokenizerJsonFile);
    const std::string deep = json_depth_error(text, path);
    SPEC_INPUT_CHECK(deep.empty(), deep);
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    SPEC_INPUT_CHECK(!doc.is_discarded(), path << " is not valid JSON");
    const hf::JsonField root(doc, "", path_);
    root.expect_object();

    const hf::JsonField model = root.require("model");
    model.expect_object();
    const std::string type = model.string_or("type", model.get("merges").is_null() ? "" : "BPE");
    if (type != "BPE") {
      SPEC_INPUT_CHECK(!type.empty(), model.where("type") << " is missing");
      model.unsupported_type("BPE");
    }
    model_ = std::make_unique<hf::BpeModel>(model);
    normalizer_ = hf::make_normalizer(root.get("normalizer"));
    pre_tokenizer_ = hf::make_pre_tokenizer(root.get("pre_tokenizer"));
    decoder_ = hf::make_decoder(root.get("decoder"));
    load_pieces(root.get("added_tokens"));
    const SpecialIds specials = post_processor_ids(root.get("post_processor"));
    prefix_ = specials.prefix;
    suffix_ = specials.suffix;
    for (int id : prefix_) (void)entry(id);
    for (int id : suffix_) (void)entry(id);
  }

  int vocab_size() const override { return vocab_size_; }
  const char* format() const override { return "tokenizer.json"; }
  const std::string& piece(int id) const override { return entry(id).text; }

  std::string decode_after(const std::vector<int>& ids, int prev_token) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int id : ids)
      if (!is_special(id)) tokens.push_back(piece(id));
    if (!decoder_) {
      std::string joined;
      for (std::size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
      return joined;
    }
    const auto prev = pieces_.find(prev_token);
    const bool at_text_start = prev_token < 0 || (prev != pieces_.end() && prev->second.special);
    decoder_->decode_chain(tokens, at_text_start);
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  }

  std::vector<int> encode(std::string_view text, bool add_special) const override {
    const std::size_t bad = invalid_utf8_at(text);
    SPEC_INPUT_CHECK(bad == std::string_view::npos,
                     path_ << ": the text to encode is not valid UTF-8 (byte " << bad << " of "
                           << text.size() << ")");
    std::vector<int> ids;
    if (add_special) ids = prefix_;
    std::vector<hf::TextSpan> spans;
    raw_matcher_.split(text, &spans);
    for (const hf::TextSpan& span : spans) {
      if (span.token >= 0)
        ids.push_back(span.token);
      else
        encode_between(text.substr(span.start, span.end - span.start), span.start == 0, &ids);
    }
    if (add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
    return ids;
  }

  int token_to_id(std::string_view content) const override {
    auto it = added_ids_.find(content);
    if (it != added_ids_.end()) return it->second;
    return model_->id_of(content);
  }

  bool is_special(int id) const override { return entry(id).special; }

  std::vector<std::string> files() const override { return {path_}; }

 private:
  // The model's vocabulary and the added tokens (which win where both give an id a piece).
  void load_pieces(const hf::JsonField& added) {
    std::vector<hf::AddedToken> tokens;
    const std::size_t count = added.is_null() ? 0 : added.array_size();
    for (std::size_t i = 0; i < count; ++i) {
      const hf::JsonField item = added.at(i);
      hf::AddedToken t;
      t.content = item.string("content");
      SPEC_INPUT_CHECK(t.content.size() <= kMaxAddedTokenBytes,
                       item.where("content")
                           << " is " << t.content.size() << " bytes long, more than the "
                           << kMaxAddedTokenBytes
                           << " an added token may have (real ones are special tokens and "
                              "markers of a few dozen bytes)");
      const long long id = item.integer("id");
      SPEC_INPUT_CHECK(id >= 0 && id <= kMaxId, item.where("id")
                                                    << " " << id << " is not a valid token id");
      t.id = static_cast<int>(id);
      t.special = item.bool_or("special", false);
      t.lstrip = item.bool_or("lstrip", false);
      t.rstrip = item.bool_or("rstrip", false);
      t.normalized = item.bool_or("normalized", !t.special);
      SPEC_INPUT_CHECK(!item.bool_or("single_word", false),
                       item.where("single_word")
                           << " true is not supported (token \"" << t.content << "\"; only false)");
      SPEC_INPUT_CHECK(!t.content.empty(), item.where("content") << " must not be empty");
      tokens.push_back(std::move(t));
    }
    // By id, only the ids that have a piece: a table sized by the largest id would cost 32 GB
    // for one id near 2^30 in a 4 KB file.
    pieces_.reserve(model_->vocab().size() + tokens.size());
    for (const auto& [content, id] : model_->vocab()) pieces_[id] = {content, false};
    for (const auto& entry : pieces_) vocab_size_ = std::max(vocab_size_, entry.first + 1);
    for (const hf::AddedToken& t : tokens) {
      pieces_[t.id] = {t.content, t.special};
      vocab_size_ = std::max(vocab_size_, t.id + 1);
      added_ids_[t.content] = t.id;
      if (!t.normalized) {
        raw_matcher_.add(t.content, t.id, t.lstrip, t.rstrip);
      } else {
        std::string pattern = t.content;
        if (normalizer_) normalizer_->normalize(pattern);
        normalized_matcher_.add(pattern, t.id, t.lstrip, t.rstrip);
      }
    }
  }

  // Text between two raw-text added tokens: normalized, then split at the normalized ones.
  void encode_between(std::string_view text, bool at_text_start, std::vector<int>* ids) const {
    std::string normalized(text);
    if (normalizer_) normalizer_->normalize(normalized);
    if (normalized_matcher_.empty()) {
      encode_words(std::move(normalized), at_text_start, ids);
      return;
    }
    std::vector<hf::TextSpan> spans;
    normalized_matcher_.split(normalized, &spans);
    for (const hf::TextSpan& span : spans) {
      if (span.token >= 0)
        ids->push_back(span.token);
      else
        encode_words(normalized.substr(span.start, span.end - span.start),
                     at_text_start && span.start == 0, ids);
    }
  }

  void encode_words(std::string text, bool at_text_start, std::vector<int>* ids) const {
    if (text.empty()) return;
    std::vector<hf::PreToken> words{{std::move(text), at_text_start}};
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(words);
    for (const hf::PreToken& word : words) model_->encode(word.text, ids);
  }

  struct Piece {
    std::string text;
    bool special = false;
  };

  const Piece& entry(int id) const {
    SPEC_INPUT_CHECK(id >= 0 && id < vocab_size(),
                     "token id " << id << " is outside the vocabulary of " << vocab_size()
                                 << " pieces of tokenizer " << path_);
    const auto it = pieces_.find(id);
    SPEC_INPUT_CHECK(it != pieces_.end(), "token id " << id << " has no piece in tokenizer "
                                                      << path_ << " (its ids have a gap there)");
    return it->second;
  }

  std::string path_;
  std::unique_ptr<hf::BpeModel> model_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Decoder> decoder_;
  hf::AddedTokenMatcher raw_matcher_;         // added tokens with normalized false
  hf::AddedTokenMatcher normalized_matcher_;  // normalized true, in their normalized form
  hf::StringIdMap added_ids_;                 // content -> id of the added tokens
  std::unordered_map<int, Piece> pieces_;     // by id (added tokens win over the model's)
  int vocab_size_ = 0;                        // the largest id + 1
  std::vector<int> prefix_, suffix_;          // the post-processor's ids around a text
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  return std::make_unique<HfTokenizer>(path);
}

}  // namespace specrun
