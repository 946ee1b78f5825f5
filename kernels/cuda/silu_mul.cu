// silu_mul: SwiGLU activation out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
// Layout: flat float32 arrays of n elements; out may alias gate or up. Grid-stride loop.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace

void silu_mul(cudaStream_t stream, const float* gate, const float* up, float* out, std::size_t n) {
  CUDA_OP_CHECK("silu_mul", gate != nullptr && up != nullptr && out != nullptr,
                "needs gate, up and out");
  if (n == 0) return;
  silu_mul_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(gate, up, out, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
