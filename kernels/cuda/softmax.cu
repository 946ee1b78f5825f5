// softmax: row-wise softmax with temperature, in place on float32. Layout: x [n_rows, n]
// row-major; x[r, i] = exp((x[r, i] - max_r) / T) / sum_r. One block per row; max and sum are
// block reductions in a fixed order. Top-k and top-p filtering stay on the host (src/spec).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) softmax_kernel(float* x, int n, float inv_temperature) {
  __shared__ float shared[detail::kWarp];
  float* row = x + static_cast<std::size_t>(blockIdx.x) * n;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
  m = detail::block_reduce<true>(m, shared);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = expf((row[i] - m) * inv_temperature);
    row[i] = e;
    sum += e;
  }
  sum = detail::block_reduce<false>(sum, shared);
  const float inv = 1.0f / sum;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] *= inv;
}

}  // namespace

void softmax(cudaStream_t stream, float* x, int n_rows, int n, float temperature) {
  CUDA_OP_CHECK("softmax", x != nullptr, "needs x");
  CUDA_OP_CHECK("softmax", n_rows >= 1 && n >= 1, "bad sizes: rows " << n_rows << ", n " << n);
  CUDA_OP_CHECK("softmax", temperature > 0.0f,
                "temperature " << temperature << " must be > 0 (greedy decoding uses argmax)");
  softmax_kernel<<<n_rows, kThreads, 0, stream>>>(x, n, 1.0f / temperature);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
