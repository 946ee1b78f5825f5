// Elementwise ops on float32 buffers: SwiGLU's silu(gate) * up (AVX-512: simd.h exp16), and the
// residual add.
#include <cstddef>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

namespace {
// Elementwise work below this many elements stays on the calling thread (a fork costs more).
constexpr std::size_t kParallelMinElements = 1 << 15;
}  // namespace

void silu_mul(const float* gate, const float* up, float* out, std::size_t n) {
  // A prefill's n = tokens x intermediate is worth both threads.
#ifdef SPECRUN_CPU_AVX512
  const std::size_t n_vec = (n + 15) / 16;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::size_t v = 0; v < n_vec; ++v) {
    const std::size_t i = v * 16;
    const __mmask16 m = detail::tail_mask(n - i < 16 ? static_cast<int>(n - i) : 16);
    _mm512_mask_storeu_ps(
        out + i, m,
        detail::silu_mul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
#elif defined(SPECRUN_CPU_AVX2)
  const std::size_t n_vec = (n + 7) / 8;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::size_t v = 0; v < n_vec; ++v) {
    const std::size_t i = v * 8;
    const __m256i m = detail::tail_mask8(n - i < 8 ? static_cast<int>(n - i) : 8);
    _mm256_maskstore_ps(
        out + i, m,
        detail::silu_mul8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
  }
#else
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = detail::silu_mul1(gate[i], up[i]);
  }
#endif
}

void add_inplace(float* y, const float* x, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace specrun::cpu::SPECRUN_ISA
