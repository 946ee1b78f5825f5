// Elementwise ops on float32 buffers: SwiGLU's silu(gate) * up, and the residual add.
#include <cmath>
#include <cstddef>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

namespace {
// Elementwise work below this many elements stays on the calling thread (a fork costs more).
constexpr std::size_t kParallelMinElements = 1 << 15;
}  // namespace

void silu_mul(const float* gate, const float* up, float* out, std::size_t n) {
  // expf is not vectorised without -ffast-math: a prefill's n = tokens x intermediate is worth
  // both threads.
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace specrun::cpu
