// The block-wide building blocks of the token-decision kernels (sampling.cu: the sampling
// transforms and the top-k of log-softmax; sampling_verify.cu: inverse-CDF sampling and the
// verification of chains and trees), included by those two files only. Every block has kThreads
// threads; the reductions run in a fixed order (warp sums, then the warps' partial sums in warp
// order), so a result never varies from run to run.
#pragma once

#include "kernels/cuda/device_util.cuh"

namespace specrun::cuda::sampling_detail {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / detail::kWarp;
inline constexpr unsigned kFullMask = 0xffffffffu;

// Butterfly sum over a warp in a fixed order; every lane gets the result.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = detail::kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

// Block-wide sum; every thread gets the same value (warp sums, then the kWarps partial sums in
// warp order). `shared` holds kWarps values.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += shared[w];
  return total;
}

// Block-wide min or max of an int; every thread gets the result.
template <bool kMax>
__device__ __forceinline__ int block_extreme(int v, int* shared) {
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
#pragma unroll
  for (int off = detail::kWarp / 2; off > 0; off >>= 1) {
    const int o = __shfl_xor_sync(kFullMask, v, off);
    v = kMax ? max(v, o) : min(v, o);
  }
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  int r = shared[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = kMax ? max(r, shared[w]) : min(r, shared[w]);
  return r;
}

}  // namespace specrun::cuda::sampling_detail
