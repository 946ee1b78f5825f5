// llama2.c .bin (decode only) and sentencepiece tokenizer.model (protobuf pieces read here for
// decoding; libsentencepiece encodes); load_tokenizer_for picks a model folder's tokenizer.
#include "text/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/error.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "common/utf8.h"

namespace specrun {

namespace {

// "<0xHH>" -> the byte; false for anything else.
bool byte_piece(const std::string& p, unsigned char* out) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return false;
  unsigned value = 0;
  for (int i = 3; i < 5; ++i) {
    char c = p[static_cast<std::size_t>(i)];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = static_cast<unsigned>(c - '0');
    else if (c >= 'A' && c <= 'F')
      d = static_cast<unsigned>(c - 'A' + 10);
    else if (c >= 'a' && c <= 'f')
      d = static_cast<unsigned>(c - 'a' + 10);
    else
      return false;
    value = value * 16 + d;
  }
  *out = static_cast<unsigned char>(value);
  return true;
}

void check_id(int id, int vocab, const std::string& path) {
  SPEC_INPUT_CHECK(id >= 0 && id < vocab, "token id " << id << " is outside the vocabulary of "
                                                      << vocab << " pieces of tokenizer " << path);
}

class Llama2cTokenizer : public Tokenizer {
 public:
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;

  Llama2cTokenizer(const std::string& path, int vocab_size) : path_(path) {
    SPEC_INPUT_CHECK(vocab_size > 0, path << ": vocab size " << vocab_size << " must be positive");
    const std::string data = read_input_file(path, kTokenizerModelFile);
    std::size_t pos = 0;
    auto take = [&](void* dst, std::size_t n, const char* what, int index) {
      SPEC_INPUT_CHECK(pos + n <= data.size(), path << ": truncated at byte " << pos
                                                    << " while reading the " << what << " of token "
                                                    << index << " (file has " << data.size()
                                                    << " bytes; the model expects " << vocab_size
                                                    << " tokens): wrong tokenizer for this model?");
      std::memcpy(dst, data.data() + pos, n);
      pos += n;
    };
    std::uint32_t max_len = 0;
    take(&max_len, 4, "header", -1);
    pieces_.resize(static_cast<std::size_t>(vocab_size));
    for (int i = 0; i < vocab_size; ++i) {
      float score;
      std::int32_t len;
      take(&score, 4, "score", i);
      take(&len, 4, "length", i);
      SPEC_INPUT_CHECK(len >= 0 && static_cast<std::uint32_t>(len) <= max_len + 8,
                       path << ": token " << i << " has length " << len << " (max_token_length "
                            << max_len << "): not a llama2.c tokenizer");
      std::string& p = pieces_[static_cast<std::size_t>(i)];
      p.resize(static_cast<std::size_t>(len));
      take(p.data(), p.size(), "bytes", i);
    }
  }

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  const char* format() const override { return "llama2c"; }
  const std::string& piece(int id) const override {
    check_id(id, vocab_size(), path_);
    return pieces_[static_cast<std::size_t>(id)];
  }

  // run.c decode(): after BOS a leading space is stripped; <0xHH> is the raw byte.
  std::string decode_after(const std::vector<int>& ids, int prev_token) const override {
    std::string out;
    int prev = prev_token < 0 ? kBos : prev_token;
    for (int id : ids) {
      const std::string& p = piece(id);
      if (id == kBos || id == kEos) {
        prev = id;
        continue;
      }
      unsigned char byte;
      if (byte_piece(p, &byte)) {
        out.push_back(static_cast<char>(byte));
      } else if (prev == kBos && !p.empty() && p[0] == ' ') {
        out.append(p, 1);
      } else {
        out += p;
      }
      prev = id;
    }
    return utf8_replace_invalid(out);
  }

  bool can_encode() const override { return false; }
  std::vector<int> encode(std::string_view, bool) const override {
    SPEC_INPUT_FAIL(path_ << ": encoding text with a llama2.c tokenizer.bin is not supported; give "
                             "prompts as token ids, or use a model folder with tokenizer.json or "
                             "tokenizer.model");
  }
  int token_to_id(std::string_view content) const override {
    for (std::size_t i = 0; i < pieces_.size(); ++i)
      if (pieces_[i] == content) return static_cast<int>(i);
    return -1;
  }
  bool is_special(int id) const override { return id == kBos || id == kEos; }
  std::vector<std::string> files() const override { return {path_}; }

 private:
  std::string path_;
  std::vector<std::string> pieces_;
};

// Minimal protobuf wire-format reader over a byte range.
class ProtoReader {
 public:
  ProtoReader(const std::string& path, const char* begin, const char* end)
      : path_(path), p_(begin), end_(end) {}
  bool done() const { return p_ >= end_; }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      SPEC_INPUT_CHECK(p_ < end_, path_ << ": truncated protobuf varint: corrupt tokenizer.model");
      auto b = static_cast<unsigned char>(*p_++);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    SPEC_INPUT_FAIL(path_ << ": malformed protobuf varint: corrupt tokenizer.model");
  }
  // Reads a tag; returns the field number, sets the wire type.
  std::uint64_t tag(int* wire) {
    std::uint64_t t = varint();
    *wire = static_cast<int>(t & 7);
    return t >> 3;
  }
  std::string_view bytes() {
    std::uint64_t n = varint();
    SPEC_INPUT_CHECK(n <= static_cast<std::uint64_t>(end_ - p_),
                     path_ << ": protobuf field of " << n << " bytes runs past the end of its "
                           << "message: truncated or corrupt tokenizer.model");
    std::string_view v(p_, static_cast<std::size_t>(n));
    p_ += n;
    return v;
  }
  float fixed32_float() {
    SPEC_INPUT_CHECK(end_ - p_ >= 4, path_ << ": truncated protobuf fixed32");
    float f;
    std::memcpy(&f, p_, 4);
    p_ += 4;
    return f;
  }
  void skip(int wire) {
    switch (wire) {
      case 0:
        varint();
        return;
      case 1:
        SPEC_INPUT_CHECK(end_ - p_ >= 8, path_ << ": truncated protobuf fixed64");
        p_ += 8;
        return;
      case 2:
        bytes();
        return;
      case 5:
        fixed32_float();
        return;
      default:
        SPEC_INPUT_FAIL(path_ << ": unsupported protobuf wire type " << wire
                              << ": not a sentencepiece tokenizer.model");
    }
  }

 private:
  std::string path_;
  const char* p_;
  const char* end_;
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  enum PieceType {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
  };

  SentencePieceTokenizer(const std::string& path, bool add_bos, bool add_eos)
      : path_(path), add_bos_(add_bos), add_eos_(add_eos) {
    const std::string data = read_input_file(path, kTokenizerModelFile);
    ProtoReader model(path, data.data(), data.data() + data.size());
    while (!model.done()) {
      int wire;
      std::uint64_t field = model.tag(&wire);
      if (field == 1 && wire == 2) {
        std::string_view msg = model.bytes();
        ProtoReader sp(path, msg.data(), msg.data() + msg.size());
        Piece piece;
        while (!sp.done()) {
          int w;
          std::uint64_t f = sp.tag(&w);
          if (f == 1 && w == 2)
            piece.text = std::string(sp.bytes());
          else if (f == 2 && w == 5)
            sp.fixed32_float();
          else if (f == 3 && w == 0)
            piece.type = static_cast<int>(sp.varint());
          else
            sp.skip(w);
        }
        pieces_.push_back(std::move(piece));
      } else if (field == 3 && wire == 2) {  // normalizer_spec
        std::string_view msg = model.bytes();
        ProtoReader ns(path, msg.data(), msg.data() + msg.size());
        while (!ns.done()) {
          int w;
          std::uint64_t f = ns.tag(&w);
          if (f == 3 && w == 0)
            add_dummy_prefix_ = ns.varint() != 0;
          else
            ns.skip(w);
        }
      } else {
        model.skip(wire);
      }
    }
    SPEC_INPUT_CHECK(!pieces_.empty(), path << ": no pieces found: not a sentencepiece model");
    const auto status = processor_.LoadFromSerializedProto(data);
    SPEC_INPUT_CHECK(status.ok(),
                     path << ": libsentencepiece cannot load it: " << status.ToString());
    SPEC_INPUT_CHECK(processor_.GetPieceSize() == vocab_size(),
                     path << ": libsentencepiece reads " << processor_.GetPieceSize()
                          << " pieces, the protobuf holds " << vocab_size());
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const Piece& p = pieces_[i];
      if (p.type == kControl || p.type == kUnknown) specials_.push_back(static_cast<int>(i));
    }
    // Longest first, so that a special token that is a prefix of another never wins.
    std::sort(specials_.begin(), specials_.end(), [&](int a, int b) {
      return pieces_[static_cast<std::size_t>(a)].text.size() >
             pieces_[static_cast<std::size_t>(b)].text.size();
    });
  }

  // Text between special tokens is encoded by libsentencepiece, each stretch on its own (as
  // transformers' LlamaTokenizer splits on its special tokens first); the special tokens
  // written in the text ("<s>", "</s>", "<unk>") become their ids.
  std::vector<int> encode(std::string_view text, bool add_special) const override {
    const std::size_t bad = invalid_utf8_at(text);
    SPEC_INPUT_CHECK(bad == std::string_view::npos,
                     "text to encode with " << path_ << " is not valid UTF-8 (byte " << bad << ")");
    std::vector<int> ids;
    if (add_special && add_bos_ && processor_.bos_id() >= 0) ids.push_back(processor_.bos_id());
    std::size_t start = 0;
    auto encode_stretch = [&](std::size_t end) {
      if (end <= start) return;
      std::vector<int> part;
      const auto status = processor_.Encode(text.substr(start, end - start), &part);
      SPEC_INPUT_CHECK(status.ok(), path_ << ": libsentencepiece failed: " << status.ToString());
      ids.insert(ids.end(), part.begin(), part.end());
    };
    for (std::size_t i = 0; i < text.size();) {
      int found = -1;
      for (int id : specials_) {
        const std::string& p = pieces_[static_cast<std::size_t>(id)].text;
        if (!p.empty() && text.compare(i, p.size(), p) == 0) {
          found = id;
          break;
        }
      }
      if (found < 0) {
        ++i;
        continue;
      }
      encode_stretch(i);
      ids.push_back(found);
      i += pieces_[static_cast<std::size_t>(found)].text.size();
      start = i;
    }
    encode_stretch(text.size());
    if (add_special && add_eos_ && processor_.eos_id() >= 0) ids.push_back(processor_.eos_id());
    return ids;
  }

  int token_to_id(std::string_view content) const override {
    const int id = processor_.PieceToId(content);
    // PieceToId answers unk for unknown pieces; only the unk piece itself maps to it.
    if (id == processor_.unk_id() && content != piece(id)) return -1;
    return id;
  }
  bool is_special(int id) const override {
    check_id(id, vocab_size(), path_);
    const int type = pieces_[static_cast<std::size_t>(id)].type;
    return type == kControl || type == kUnknown || type == kUnused;
  }
  std::vector<std::string> files() const override { return {path_}; }

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  const char* format() const override { return "sentencepiece"; }
  const std::string& piece(int id) const override {
    check_id(id, vocab_size(), path_);
    return pieces_[static_cast<std::size_t>(id)].text;
  }

  std::string decode_after(const std::vector<int>& ids, int prev_token) const override {
    static const std::string kMetaSpace = "\xE2\x96\x81";  // U+2581
    std::string out;
    bool at_start =
        prev_token < 0 || (prev_token < vocab_size() &&
                           pieces_[static_cast<std::size_t>(prev_token)].type == kControl);
    for (int id : ids) {
      check_id(id, vocab_size(), path_);
      const Piece& p = pieces_[static_cast<std::size_t>(id)];
      if (p.type == kControl || p.type == kUnused) continue;
      if (p.type == kUnknown) {
        out += " \xE2\x81\x87 ";  // sentencepiece's unk surface " ⁇ "
        at_start = false;
        continue;
      }
      unsigned char byte;
      if (p.type == kByte && byte_piece(p.text, &byte)) {
        out.push_back(static_cast<char>(byte));
        at_start = false;
        continue;
      }
      std::string text;
      for (std::size_t i = 0; i < p.text.size();) {
        if (p.text.compare(i, kMetaSpace.size(), kMetaSpace) == 0) {
          text.push_back(' ');
          i += kMetaSpace.size();
        } else {
          text.push_back(p.text[i++]);
        }
      }
      if (at_start && add_dummy_prefix_ && !text.empty() && text[0] == ' ') text.erase(0, 1);
      out += text;
      at_start = false;
    }
    return utf8_replace_invalid(out);
  }

 private:
  struct Piece {
    std::string text;
    int type = kNormal;
  };
  std::string path_;
  std::vector<Piece> pieces_;
  bool add_dummy_prefix_ = true;  // protobuf default
  bool add_bos_, add_eos_;
  std::vector<int> specials_;  // control and unknown pieces, longest text first
  sentencepiece::SentencePieceProcessor processor_;
};

// A JSON file of a model folder (config.json, tokenizer_config.json), or an empty object when
// it does not exist. Throws naming the file when it exists but is not a JSON object.
nlohmann::json read_json_object(const std::string& path, const InputFileKind& kind) {
  if (!input_exists(path)) return nlohmann::json::object();
  const std::string text = read_input_file(path, kind);
  SPEC_INPUT_CHECK(json_too_deep_at(text) == std::string_view::npos,
                   path << " is nested more than " << kMaxJsonDepth << " levels deep");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  SPEC_INPUT_CHECK(j.is_object(), path << " is not a JSON object");
  return j;
}

bool bool_key(const nlohmann::json& j, const char* key, bool fallback, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  SPEC_INPUT_CHECK(it->is_boolean(),
                   path << ": \"" << key << "\" must be true or false, got " << it->dump());
  return it->get<bool>();
}

}  // namespace

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int vocab_size) {
  return std::make_unique<Llama2cTokenizer>(path, vocab_size);
}

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path, bool add_bos,
                                                        bool add_eos) {
  return std::make_unique<SentencePieceTokenizer>(path, add_bos, add_eos);
}

std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_dir) {
  const std::string hf = model_dir + "/tokenizer.json";
  if (input_exists(hf)) return load_hf_tokenizer(hf);
  const std::string sp = model_dir + "/tokenizer.model";
  if (input_exists(sp)) {
    const std::string config_path = model_dir + "/tokenizer_config.json";
    const nlohmann::json config = read_json_object(config_path, kTokenizerConfigFile);
    return load_sentencepiece_tokenizer(sp, bool_key(config, "add_bos_token", true, config_path),
                                        bool_key(config, "add_eos_token", false, config_path));
  }
  const std::string bin = model_dir + "/tokenizer.bin";
  if (input_exists(bin)) {
    const std::string config_path = model_dir + "/config.json";
    const nlohmann::json config = read_json_object(config_path, kModelConfigFile);
    auto vocab = config.find("vocab_size");
    SPEC_INPUT_CHECK(vocab != config.end() && vocab->is_number_integer(),
                     config_path << ": \"vocab_size\" (an integer) is needed to read " << bin);
    return load_llama2c_tokenizer(bin, vocab->get<int>());
  }
  return nullptr;
}

}  // namespace specrun
