// Tokenizers of the model folders specrun reads: text -> token ids (prompts) and ids -> text
// (outputs). Three formats:
//  - Hugging Face `tokenizer.json` with a BPE model (text/hf_tokenizer.cpp): byte-level BPE with
//    the split pre-tokenizer regexes of Llama 3.x and Qwen2/3, and the Llama-2-style
//    sentencepiece BPE (Prepend/Replace normalizer or Metaspace, byte fallback); added and
//    special tokens; the post-processor's BOS. What it does not support is refused at load,
//    naming the field.
//  - sentencepiece `tokenizer.model` (a protobuf ModelProto): encoded with libsentencepiece;
//    decoded from the pieces (`▁` U+2581 is a space, `<0xHH>` the raw byte).
//  - llama2.c's tokenizer .bin (docs/reference.md, "llama2.c checkpoints and tokenizer"): u32
//    max_token_length, then per token f32 score, i32 length, bytes; the number of tokens comes
//    from the model. Decode only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace specrun {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Number of ids, added tokens included.
  virtual int vocab_size() const = 0;
  // "llama2c", "sentencepiece" or "tokenizer.json".
  virtual const char* format() const = 0;
  // The raw piece of `id` as stored (e.g. "▁def", "<0x0A>", "Ġthe", "<|eot_id|>"); throws for ids
  // outside [0, vocab_size).
  virtual const std::string& piece(int id) const = 0;

  // UTF-8 text of `ids` that continue after `prev_token` (-1: the start of a text, as right
  // after BOS). Special (control) tokens give no text, as Hugging Face's
  // decode(skip_special_tokens=True). A leading space is dropped where the format's own decoder
  // drops it (llama2.c: the piece right after BOS; sentencepiece and Llama-2 tokenizer.json: the
  // first piece of a text). Bytes that do not form UTF-8 become U+FFFD. Throws naming an id
  // outside the vocabulary.
  virtual std::string decode_after(const std::vector<int>& ids, int prev_token) const = 0;
  // decode_after(ids, -1): `ids` start a text (the BOS itself may or may not be included).
  std::string decode(const std::vector<int>& ids) const { return decode_after(ids, -1); }

  // Whether encode() is available (llama2.c tokenizers: no).
  virtual bool can_encode() const { return true; }
  // Token ids of UTF-8 `text`, equal to Hugging Face's `tokenizer(text,
  // add_special_tokens=add_special).input_ids` (and to sentencepiece's encode for
  // tokenizer.model, plus BOS when add_special and the model adds one). Special tokens written
  // in the text ("<|eot_id|>", "<s>") become their ids, as transformers does by default (a
  // rendered chat template relies on it). Throws naming the tokenizer file when `text` is not
  // valid UTF-8 or the tokenizer cannot encode.
  virtual std::vector<int> encode(std::string_view text, bool add_special) const = 0;

  // The id whose piece is exactly `content` (a special/added token such as "<|eot_id|>", or any
  // vocabulary entry), or -1 when there is none.
  virtual int token_to_id(std::string_view content) const = 0;
  // Whether `id` is a special (control) token: BOS/EOS/pad and the like, skipped by decode.
  virtual bool is_special(int id) const = 0;

  // The files this tokenizer was read from (absolute or as given), for fingerprints.
  virtual std::vector<std::string> files() const = 0;
};

// llama2.c tokenizer .bin with `vocab_size` entries (from the model config). Throws naming the
// file when it is truncated or malformed.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int vocab_size);
// sentencepiece tokenizer.model. `add_bos` / `add_eos`: what encode(add_special = true) adds
// (tokenizer_config.json's add_bos_token / add_eos_token). Throws naming the file when the
// protobuf is malformed.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path,
                                                        bool add_bos = true, bool add_eos = false);
// Hugging Face tokenizer.json (text/hf_tokenizer.cpp). Throws naming the file and the field
// for anything it does not support.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);

// The tokenizer of a model directory: tokenizer.json (what transformers' AutoTokenizer uses),
// tokenizer.model (sentencepiece; add_bos_token / add_eos_token from tokenizer_config.json) or
// tokenizer.bin (llama2.c format; vocab_size from config.json), in that order; nullptr when
// none exists. Throws when a file exists but cannot be read, is not a regular file or is larger
// than its kind allows (common/input_file.h).
std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_dir);

}  // namespace specrun
