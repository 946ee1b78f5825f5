// add_inplace and add_bias: residual and bias additions on float32.
// Layout: add_inplace y[i] += x[i] over n elements; add_bias y [n_rows, dim] row-major,
// y[t, i] += bias[i]. Grid-stride loops, one thread per element.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

__global__ void add_kernel(float* y, const float* x, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void add_bias_kernel(float* y, const float* __restrict__ bias, std::size_t n, int dim) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % dim];
}

}  // namespace

void add_inplace(cudaStream_t stream, float* y, const float* x, std::size_t n) {
  CUDA_OP_CHECK("add_inplace", y != nullptr && x != nullptr, "needs y and x");
  if (n == 0) return;
  add_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(y, x, n);
  CUDA_CHECK_LAUNCH();
}

void add_bias(cudaStream_t stream, float* y, const float* bias, int n_rows, int dim) {
  CUDA_OP_CHECK("add_bias", y != nullptr && bias != nullptr && n_rows >= 1 && dim >= 1,
                "needs y, bias and positive sizes (rows " << n_rows << ", dim " << dim << ")");
  const std::size_t n = static_cast<std::size_t>(n_rows) * dim;
  add_bias_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(y, bias, n, dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
