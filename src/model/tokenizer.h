// Decode-only tokenizers, so that token ids can be printed as text. Two formats:
//  - llama2.c's tokenizer .bin (model-formats.md section 5.2): u32 max_token_length, then per
//    token f32 score, i32 length, bytes. The number of tokens comes from the model, not the file.
//  - sentencepiece's tokenizer.model (a protobuf ModelProto). Only the pieces are read (field 1,
//    repeated SentencePiece {1: piece, 2: score, 3: type}) and normalizer_spec.add_dummy_prefix;
//    `▁` (U+2581) decodes to a space and `<0xHH>` byte pieces to the raw byte.
// Encoding is not implemented: prompts arrive as token ids.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace specrun {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual int vocab_size() const = 0;
  // "llama2c" or "sentencepiece".
  virtual const char* format() const = 0;
  // The raw piece of `id` as stored (e.g. "▁def", "<0x0A>", " Once"); throws for ids outside
  // [0, vocab_size).
  virtual const std::string& piece(int id) const = 0;

  // UTF-8 text of `ids` that continue after `prev_token` (-1: the start of a text, as right
  // after BOS). Control tokens (BOS/EOS/...) give no text. A leading space is dropped where
  // the format's own decoder drops it (llama2.c: the piece right after BOS; sentencepiece: the
  // first piece of a text when the model adds a dummy prefix). Throws naming an id outside the
  // vocabulary.
  virtual std::string decode_after(const std::vector<int>& ids, int prev_token) const = 0;
  // decode_after(ids, -1): `ids` start a text (the BOS itself may or may not be included).
  std::string decode(const std::vector<int>& ids) const { return decode_after(ids, -1); }
};

// llama2.c tokenizer .bin with `vocab_size` entries (from the model config). Throws naming the
// file when it is truncated or malformed.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int vocab_size);
// sentencepiece tokenizer.model. Throws naming the file when the protobuf is malformed.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path);

// The tokenizer of a model directory: tokenizer.bin (llama2.c format; vocab_size from
// config.json) or tokenizer.model (sentencepiece), in that order; nullptr when neither exists.
// Throws when a file exists but cannot be read.
std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_dir);

}  // namespace specrun
