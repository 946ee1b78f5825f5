// rope: rotary position embedding, Hugging Face rotate_half (half-split) convention, in place.
// Layout: token t, head h at x + t * row_stride + h * head_dim; dimension j pairs with
// j + head_dim/2. Angles are positions[t] * inv_freq[j] in float32, as transformers computes them.
// The cos/sin table depends only on the positions, so a forward pass computes it once
// (rope_table) and applies it to q and k of every layer (rope_apply).
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

void rope_table(const float* inv_freq, int head_dim, const std::int32_t* positions, int n_tokens,
                float* cos_sin) {
  const int half = head_dim / 2;
  for (int t = 0; t < n_tokens; ++t) {
    const float pos = static_cast<float>(positions[t]);
    float* c = cos_sin + static_cast<std::size_t>(t) * head_dim;
    float* s = c + half;
    for (int j = 0; j < half; ++j) {
      const float angle = pos * inv_freq[j];
      c[j] = static_cast<float>(__builtin_cos(static_cast<double>(angle)));
      s[j] = static_cast<float>(__builtin_sin(static_cast<double>(angle)));
    }
  }
}

void rope_apply(float* x, int n_tokens, int n_heads, int head_dim, std::int64_t row_stride,
                const float* cos_sin) {
  const int half = head_dim / 2;
  // Tokens are independent: a prefill's split over the threads (each then also holds its rows
  // in cache for what follows).
#pragma omp parallel for schedule(static) if (static_cast <long>(n_tokens) * n_heads * head_dim >= \
                                              (1 << 15))
  for (int t = 0; t < n_tokens; ++t) {
    const float* c = cos_sin + static_cast<std::size_t>(t) * head_dim;
    const float* s = c + half;
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

void rope(float* x, int n_tokens, int n_heads, int head_dim, std::int64_t row_stride,
          const float* inv_freq, const std::int32_t* positions) {
  static thread_local detail::Scratch<float> cos_sin_buffer;
  float* cos_sin = cos_sin_buffer.get(static_cast<std::size_t>(n_tokens) * head_dim);
  rope_table(inv_freq, head_dim, positions, n_tokens, cos_sin);
  rope_apply(x, n_tokens, n_heads, head_dim, row_stride, cos_sin);
}

}  // namespace specrun::cpu::SPECRUN_ISA
