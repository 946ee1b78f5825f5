// rope: rotary position embedding, Hugging Face rotate_half (half-split) convention, in place.
// Layout: token t, head h at x + t * row_stride + h * head_dim; dimension j pairs with
// j + head_dim/2. Angles are positions[t] * inv_freq[j] in float32, as transformers computes them.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

void rope(float* x, int n_tokens, int n_heads, int head_dim, std::int64_t row_stride,
          const float* inv_freq, const std::int32_t* positions) {
  const int half = head_dim / 2;
  static thread_local std::vector<float> cos_sin;
  if (cos_sin.size() < static_cast<std::size_t>(2 * half)) cos_sin.resize(2 * half);
  float* c = cos_sin.data();
  float* s = c + half;
  for (int t = 0; t < n_tokens; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int j = 0; j < half; ++j) {
      const float angle = pos * inv_freq[j];
      c[j] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s[j] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    float* row = x + t * row_stride;
    for (int h = 0; h < n_heads; ++h) {
      float* v = row + static_cast<std::int64_t>(h) * head_dim;
#pragma omp simd
      for (int j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * c[j] - b * s[j];
        v[j + half] = b * c[j] + a * s[j];
      }
    }
  }
}

}  // namespace specrun::cpu
