// Test helper: the small synthetic target/draft pair the decoder tests run (make_model_pair:
// hidden 64, 2 layers, 4 heads, 2 kv heads, intermediate 128, vocabulary 256), written to a
// temporary directory removed with the object, and prompts for it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/prompt_file.h"
#include "model/synthetic.h"

namespace specrun::test {

struct SmallPair {
  // architecture: SyntheticSpec::architecture (make-model --arch).
  explicit SmallPair(const std::string& tag, const std::string& architecture = "llama")
      : dir(std::filesystem::temp_directory_path() /
            ("specrun_test_" + tag + "_" + std::to_string(::getpid()))) {
    spec.architecture = architecture;
    spec.hidden = 64;
    spec.layers = 2;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.intermediate = 128;
    spec.vocab = 256;
    make_model_pair(spec, dir.string());
  }
  ~SmallPair() { std::filesystem::remove_all(dir); }
  SmallPair(const SmallPair&) = delete;
  SmallPair& operator=(const SmallPair&) = delete;
  std::string target() const { return (dir / "target").string(); }
  std::string draft() const { return (dir / "draft").string(); }

  std::filesystem::path dir;
  SyntheticSpec spec;
};

// n prompts: prompt i has index first_index + i and 5 + 3i tokens, token t = 3 + (7t + i) % 250.
inline std::vector<Prompt> small_prompts(int n, std::int64_t first_index = 0) {
  std::vector<Prompt> prompts(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    Prompt& p = prompts[static_cast<std::size_t>(i)];
    p.index = first_index + i;
    p.id = std::to_string(i);
    for (int t = 0; t < 5 + 3 * i; ++t) p.tokens.push_back(3 + (7 * t + i) % 250);
  }
  return prompts;
}

}  // namespace specrun::test
