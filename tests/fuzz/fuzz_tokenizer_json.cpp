// libFuzzer target: bytes as a Hugging Face tokenizer.json (added tokens, normalizers,
// pre-tokenizers, the BPE model). An accepted file encodes its own text (which holds every added
// token's content, so the added-token matcher runs on its patterns) and a fixed sample: every id
// it gives is inside the vocabulary and has a piece, and the ids decode.
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/utf8.h"
#include "tests/fuzz/fuzz_input.h"
#include "text/tokenizer.h"

namespace {

void check_ids(const specrun::Tokenizer& tok, const std::vector<int>& ids) {
  for (int id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    try {
      (void)tok.piece(id);  // encode gives only ids with a piece
    } catch (const specrun::Error&) {
      __builtin_trap();
    }
  }
  (void)tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = specrun::fuzz::write_input("tokenizer.json", data, size);
  try {
    const auto tok = specrun::load_hf_tokenizer(path);
    const std::string text(reinterpret_cast<const char*>(data), size);
    for (const std::string& sample :
         {text.substr(0, 1 << 14),
          std::string("Hello <|x|> world!\n\t  123 \xC3\xBC\xE2\x82\xAC")}) {
      if (specrun::invalid_utf8_at(sample) != std::string::npos) continue;
      for (bool add_special : {false, true}) check_ids(*tok, tok->encode(sample, add_special));
    }
  } catch (const specrun::Error&) {
  }
  return 0;
}
