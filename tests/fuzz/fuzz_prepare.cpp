// libFuzzer target: `specrun prepare` on arbitrary JSONL. A file it accepts is read back with the
// prompt reader: the same number of prompts and tokens.
#include <cstdint>
#include <string>

#include "common/error.h"
#include "io/prompt_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& jsonl = specrun::fuzz::write_input("prompts.jsonl", data, size);
  const std::string out = jsonl + ".h5";
  try {
    const specrun::PrepareSummary summary = specrun::prepare_prompt_file(jsonl, out, true);
    specrun::PromptReader reader(out);
    if (reader.size() != summary.prompts || reader.total_tokens() != summary.tokens)
      __builtin_trap();
    const auto prompts = reader.read(0, reader.size());
    int64_t tokens = 0;
    for (const specrun::Prompt& p : prompts) tokens += static_cast<int64_t>(p.tokens.size());
    if (tokens != summary.tokens) __builtin_trap();
  } catch (const specrun::Error&) {
  }
  return 0;
}
