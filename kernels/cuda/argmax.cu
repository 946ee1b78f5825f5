// argmax and argmax_rows: index of the largest element of each float32 row (argmax: rows
// 0..n_rows-1 of x [n_rows, n]; argmax_rows: rows rows[r] of x [*, n], sampling.h), out
// [n_rows] int32. Ties go to the lowest index; NaNs are never chosen, and a row that is all
// NaN gives -1, as in kernels/cpu argmax. One block per row: threads scan strided, then a warp
// and block reduction with the same (value, index) ordering.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sampling.h"

namespace specrun::cuda {
namespace {

constexpr int kThreads = 256;

// Whether (bv, bi) should replace (av, ai): larger value, or equal value and lower index;
// a number beats a NaN; two NaNs: lower index.
__device__ __forceinline__ bool better(float bv, int bi, float av, int ai) {
  const bool a_nan = isnan(av), b_nan = isnan(bv);
  if (a_nan != b_nan) return a_nan;
  if (a_nan) return bi < ai;
  return bv > av || (bv == av && bi < ai);
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* __restrict__ x, int n, const std::int32_t* __restrict__ rows,
                  std::int32_t* __restrict__ out) {
  __shared__ float s_val[kThreads / detail::kWarp];
  __shared__ int s_idx[kThreads / detail::kWarp];
  // rows == nullptr: block r reads row r.
  const std::size_t r = rows != nullptr ? static_cast<std::size_t>(rows[blockIdx.x]) : blockIdx.x;
  const float* row = x + r * n;
  float best = NAN;
  int best_i = 0x7fffffff;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (better(row[i], i, best, best_i)) {
      best = row[i];
      best_i = i;
    }
  for (int off = detail::kWarp / 2; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, off);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, off);
    if (better(ov, oi, best, best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / detail::kWarp; ++w)
      if (better(s_val[w], s_idx[w], best, best_i)) {
        best = s_val[w];
        best_i = s_idx[w];
      }
    out[blockIdx.x] = isnan(best) ? -1 : best_i;  // NaN survives only when the row is all NaN
  }
}

}  // namespace

void argmax(cudaStream_t stream, const float* x, int n_rows, int n, std::int32_t* out) {
  CUDA_OP_CHECK("argmax", x != nullptr && out != nullptr, "needs x and out");
  CUDA_OP_CHECK("argmax", n_rows >= 1 && n >= 1, "bad sizes: rows " << n_rows << ", n " << n);
  argmax_kernel<<<n_rows, kThreads, 0, stream>>>(x, n, nullptr, out);
  CUDA_CHECK_LAUNCH();
}

void argmax_rows(cudaStream_t stream, const float* x, int vocab, const std::int32_t* rows,
                 int n_rows, std::int32_t* out) {
  CUDA_OP_CHECK("argmax_rows", vocab >= 1 && n_rows >= 0,
                "bad sizes: vocab " << vocab << ", rows " << n_rows);
  if (n_rows == 0) return;
  CUDA_OP_CHECK("argmax_rows", x != nullptr && rows != nullptr && out != nullptr,
                "needs x, rows and out");
  argmax_kernel<<<n_rows, kThreads, 0, stream>>>(x, vocab, rows, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
