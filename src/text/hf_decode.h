// tokenizer.json "decoder": ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and
// Sequence, each a step over the list of token strings as in the Rust library (decode_chain).
//  - ByteLevel: every token's characters back to bytes (a token with a character outside the
//    map, such as an added token, is taken as its UTF-8), all joined, invalid UTF-8 -> U+FFFD
//    per maximal subpart (from_utf8_lossy, which tokenizers.js's TextDecoder matches).
//  - ByteFallback: runs of <0xHH> tokens -> their bytes; a run that is not valid UTF-8 gives one
//    U+FFFD per byte (the Rust library; tokenizers.js's TextDecoder gives one per maximal
//    subpart).
// Other types (WordPiece, BPEDecoder, CTC) are refused at load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/hf_json.h"

namespace specrun::hf {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites `tokens` in place. `at_text_start`: the first token begins the text (Metaspace
  // drops its leading replacement there and Strip its leading content); false when decoding
  // continues a text.
  virtual void decode_chain(std::vector<std::string>& tokens, bool at_text_start) const = 0;
};

// nullptr for a null decoder (the tokens are then joined with spaces). Throws naming the field
// for what it does not support.
std::unique_ptr<Decoder> make_decoder(const JsonField& json);

}  // namespace specrun::hf
