// rmsnorm: Hugging Face LlamaRMSNorm on float32 activations with a weight in F32/BF16/F16.
// Layout: x, y [n_tokens, dim] row-major (may alias), w [dim]. One block per token: the sum of
// squares is reduced in a fixed order (detail::rms_scale: threads, then warps), so a token's
// result does not depend on the other tokens of the batch, and the projections that normalise
// their own input (matmul_multi and swiglu_gemv given a norm; gemv.cuh) get the same bits.
// add_rmsnorm first adds delta [n_tokens, dim] to x (each thread the elements it then squares):
// bitwise add_inplace followed by rmsnorm. Either may be a programmatic dependent launch (ops.h).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

constexpr int kThreads = detail::kNormThreads;  // the GEMVs' fused norm sums in this order too

// delta == nullptr: plain rmsnorm (x read only).
__global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(float* x, const float* __restrict__ delta, int dim, const void* __restrict__ w,
                   DType w_dtype, float eps, float* y) {
  __shared__ float shared[detail::kWarp];
  detail::wait_for_prior_grids();  // a dependent launch: the kernel before has finished
  detail::allow_dependents();      // the projection after the norm may start fetching its weights
  float* xt = x + static_cast<std::size_t>(blockIdx.x) * dim;
  float* yt = y + static_cast<std::size_t>(blockIdx.x) * dim;
  if (delta != nullptr) {  // each thread writes the elements it then reads in rms_scale
    const float* dt = delta + static_cast<std::size_t>(blockIdx.x) * dim;
    for (int i = threadIdx.x; i < dim; i += kThreads) xt[i] = xt[i] + dt[i];
  }
  const float scale = detail::rms_scale(xt, dim, eps, shared);
  for (int i = threadIdx.x; i < dim; i += kThreads)
    yt[i] = detail::rms_apply(xt[i], scale, w, w_dtype, i);
}

}  // namespace

void rmsnorm(cudaStream_t stream, const float* x, int n_tokens, int dim, const void* w,
             DType w_dtype, float eps, float* y, bool dependent) {
  CUDA_OP_CHECK("rmsnorm", x != nullptr && w != nullptr && y != nullptr, "needs x, w and y");
  CUDA_OP_CHECK("rmsnorm", n_tokens >= 1 && dim >= 1 && n_tokens <= 2147483647,
                "bad sizes: tokens " << n_tokens << ", dim " << dim);
  // The kernel writes x only when given a delta.
  detail::launch_dependent(dependent, rmsnorm_kernel, dim3(static_cast<unsigned>(n_tokens)),
                           dim3(kThreads), 0, stream, const_cast<float*>(x),
                           static_cast<const float*>(nullptr), dim, w, w_dtype, eps, y);
}

void add_rmsnorm(cudaStream_t stream, float* x, const float* delta, int n_tokens, int dim,
                 const void* w, DType w_dtype, float eps, float* y, bool dependent) {
  CUDA_OP_CHECK("add_rmsnorm", x != nullptr && delta != nullptr && w != nullptr && y != nullptr,
                "needs x, delta, w and y");
  CUDA_OP_CHECK("add_rmsnorm", y != x && y != delta && delta != x,
                "y, x and delta must be three different buffers");
  CUDA_OP_CHECK("add_rmsnorm", n_tokens >= 1 && dim >= 1,
                "bad sizes: tokens " << n_tokens << ", dim " << dim);
  detail::launch_dependent(dependent, rmsnorm_kernel, dim3(static_cast<unsigned>(n_tokens)),
                           dim3(kThreads), 0, stream, x, delta, dim, w, w_dtype, eps, y);
}

}  // namespace specrun::cuda
