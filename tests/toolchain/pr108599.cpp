// GCC PR target/108599 in a few lines: at -O2 with -march=x86-64-v4 (or x86-64-v3 with
// -mtune=rocketlake), GCC 12 copies the 32-byte initializer {0.5, 0.5, 0, 0} as four 0.5s. It is
// what test_sampling met. Compiled only, never run, by the gcc_pr108599_guard test
// (scripts/audit-gcc-pr108599.py reads GCC's RTL for the miscompiled constant).
#include <vector>

std::vector<float> transform(const std::vector<float>& logits, float temperature, int top_k);
void expect_probs(int line, const std::vector<float>& actual, const std::vector<double>& expected);

void ties_keep_the_lower_ids() {
  expect_probs(84, transform({1, 1, 1, 1}, 1.0f, 2), {0.5, 0.5, 0, 0});
}
