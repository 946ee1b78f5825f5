// rmsnorm: Hugging Face LlamaRMSNorm on float32 activations with a weight in F32/BF16/F16.
// Layout: x, y [n_tokens, dim] row-major (may alias), w [dim]. One block per token: the sum of
// squares is reduced in a fixed order (threads, then warps), so a token's result does not
// depend on the other tokens of the batch.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(const float* x, int dim, const void* __restrict__ w, DType w_dtype, float eps,
                   float* y) {
  __shared__ float shared[detail::kWarp];
  const float* xt = x + static_cast<std::size_t>(blockIdx.x) * dim;
  float* yt = y + static_cast<std::size_t>(blockIdx.x) * dim;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sum = fmaf(xt[i], xt[i], sum);
  sum = detail::block_reduce<false>(sum, shared);
  const float scale = 1.0f / sqrtf(sum / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    yt[i] = (xt[i] * scale) * detail::load_widen(w, w_dtype, i);
}

}  // namespace

void rmsnorm(cudaStream_t stream, const float* x, int n_tokens, int dim, const void* w,
             DType w_dtype, float eps, float* y) {
  CUDA_OP_CHECK("rmsnorm", x != nullptr && w != nullptr && y != nullptr, "needs x, w and y");
  CUDA_OP_CHECK("rmsnorm", n_tokens >= 1 && dim >= 1 && n_tokens <= 2147483647,
                "bad sizes: tokens " << n_tokens << ", dim " << dim);
  rmsnorm_kernel<<<n_tokens, kThreads, 0, stream>>>(x, dim, w, w_dtype, eps, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
