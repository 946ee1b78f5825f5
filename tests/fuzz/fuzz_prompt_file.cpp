// libFuzzer target: the prompt file reader on arbitrary bytes (mutated HDF5 files, from the seed
// corpus), as `run` reads them: the whole file in a child process first (check_prompt_file; a
// file that crashes or hangs libhdf5 there is refused), then the header, the longest prompt,
// every prompt, texts and the content hash in this process.
#include <algorithm>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "io/checked_read.h"
#include "io/prompt_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = specrun::fuzz::write_input("prompts.h5", data, size);
  try {
    const std::string hash = specrun::check_prompt_file(path);
    specrun::PromptReader reader(path);
    const int64_t n = reader.size();
    if (n < 0 || reader.total_tokens() < 0) __builtin_trap();
    (void)reader.longest(n);
    const int64_t count = std::min<int64_t>(n, 64);
    const auto prompts = reader.read(0, count);
    if (static_cast<int64_t>(prompts.size()) != count) __builtin_trap();
    for (int64_t i = 0; i < count; ++i) (void)reader.read_text(i);
    if (reader.content_hash() != hash) __builtin_trap();
  } catch (const specrun::Error& e) {
    specrun::fuzz::count_refusal(e.what());
  }
  return 0;
}
