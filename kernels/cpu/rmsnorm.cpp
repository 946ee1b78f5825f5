// rmsnorm: Hugging Face LlamaRMSNorm on float32 activations, weight in F32/BF16/F16.
// Layout: x, y [n_tokens, dim] row-major (may alias); w [dim].
#include <cmath>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

void rmsnorm(const float* x, int n_tokens, int dim, const void* w, DType w_dtype, float eps,
             float* y) {
  const auto* wh = static_cast<const std::uint16_t*>(w);
  const auto* wf = static_cast<const float*>(w);
  // Tokens are independent: a prefill's rows split over the threads.
#pragma omp parallel for schedule(static) if (static_cast <long>(n_tokens) * dim >= (1 << 15))
  for (int t = 0; t < n_tokens; ++t) {
    const float* xt = x + static_cast<std::size_t>(t) * dim;
    float* yt = y + static_cast<std::size_t>(t) * dim;
    const float mean_sq = detail::dot_f32(xt, xt, dim) / static_cast<float>(dim);
    const float scale = 1.0f / std::sqrt(mean_sq + eps);
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
}

}  // namespace specrun::cpu
