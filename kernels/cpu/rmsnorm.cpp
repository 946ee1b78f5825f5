// rmsnorm: Hugging Face LlamaRMSNorm on float32 activations, weight in F32/BF16/F16.
// Layout: x, y [n_tokens, dim] row-major (may alias); w [dim].
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

namespace {

// One row: y = x * rsqrt(mean(x^2) + eps) * w.
inline void norm_row(const float* xt, int dim, const void* w, DType w_dtype, float eps, float* yt) {
  const auto* wh = static_cast<const std::uint16_t*>(w);
  const auto* wf = static_cast<const float*>(w);
  const float mean_sq = detail::dot_f32(xt, xt, dim) / static_cast<float>(dim);
  const float scale = 1.0f / __builtin_sqrtf(mean_sq + eps);
  switch (w_dtype) {
    case DType::kF32:
#pragma omp simd
      for (int i = 0; i < dim; ++i) yt[i] = (xt[i] * scale) * wf[i];
      break;
    case DType::kBF16:
#pragma omp simd
      for (int i = 0; i < dim; ++i) yt[i] = (xt[i] * scale) * bf16_to_f32(wh[i]);
      break;
    case DType::kF16:
      for (int i = 0; i < dim; ++i) yt[i] = (xt[i] * scale) * detail::f16_bits_to_f32(wh[i]);
      break;
  }
}

// Tokens are independent: a prefill's rows split over the threads.
inline bool worth_threads(int n_tokens, int dim) {
  return static_cast<long>(n_tokens) * dim >= (1 << 15);
}

}  // namespace

void rmsnorm(const float* x, int n_tokens, int dim, const void* w, DType w_dtype, float eps,
             float* y) {
#pragma omp parallel for schedule(static) if (worth_threads(n_tokens, dim))
  for (int t = 0; t < n_tokens; ++t)
    norm_row(x + static_cast<std::size_t>(t) * dim, dim, w, w_dtype, eps,
             y + static_cast<std::size_t>(t) * dim);
}

void add_rmsnorm(float* x, const float* delta, int n_tokens, int dim, const void* w, DType w_dtype,
                 float eps, float* y) {
#pragma omp parallel for schedule(static) if (worth_threads(n_tokens, dim))
  for (int t = 0; t < n_tokens; ++t) {
    float* xt = x + static_cast<std::size_t>(t) * dim;
    const float* dt = delta + static_cast<std::size_t>(t) * dim;
#pragma omp simd
    for (int i = 0; i < dim; ++i) xt[i] += dt[i];
    norm_row(xt, dim, w, w_dtype, eps, y + static_cast<std::size_t>(t) * dim);
  }
}

}  // namespace specrun::cpu::SPECRUN_ISA
