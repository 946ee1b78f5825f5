// Elementwise ops on float32 buffers: SwiGLU's silu(gate) * up, and the residual add.
#include <cmath>
#include <cstddef>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

void silu_mul(const float* gate, const float* up, float* out, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace specrun::cpu
