// tokenizer.json "normalizer": NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Prepend, Replace,
// Strip, StripAccents and Sequence, with the Rust library's semantics:
//  - Prepend adds nothing to an empty text;
//  - Lowercase maps each code point on its own (U+0130 -> "i̇", Σ -> σ: no final-sigma rule);
//  - Strip and the added tokens' lstrip/rstrip remove Unicode White_Space.
// Other types (BertNormalizer, Precompiled, ByteLevel, Nmt, ...) are refused at load.
#pragma once

#include <memory>
#include <string>

#include "text/hf_json.h"

namespace specrun::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes valid UTF-8 `text` in place.
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a null normalizer. Throws naming the field for what it does not support.
std::unique_ptr<Normalizer> make_normalizer(const JsonField& json);

}  // namespace specrun::hf
