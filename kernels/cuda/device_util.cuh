// Device-side helpers shared by the kernels of this directory (included by .cu files only):
// widening of stored weights to float32, warp and block reductions in a fixed order, and the
// argument checks the launchers share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/dtype.h"
#include "kernels/cuda/cuda_check.h"

namespace specrun::cuda::detail {

inline constexpr int kWarp = 32;

// Storage element -> float32. BF16 is the top half of a float32; F16 via the hardware convert.
__device__ __forceinline__ float widen(float v) {
  return v;
}
__device__ __forceinline__ float widen(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float widen(__half v) {
  return __half2float(v);
}

// Element i of a weight vector stored in `dtype`.
__device__ __forceinline__ float load_widen(const void* w, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return widen(static_cast<const __nv_bfloat16*>(w)[i]);
    case DType::kF16:
      return widen(static_cast<const __half*>(w)[i]);
    default:
      return static_cast<const float*>(w)[i];
  }
}

// Butterfly sum over the 32 lanes: every lane ends with the same value (a + b == b + a
// exactly), and the order depends only on the lane values.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Block-wide sum or max (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `shared` holds 32 floats. Fixed order: warps reduce, then warp 0 reduces the warp results.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int n_warps = blockDim.x / kWarp;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const float neutral = kMax ? -INFINITY : 0.0f;
  v = lane < n_warps ? shared[lane] : neutral;
  v = kMax ? warp_max(v) : warp_sum(v);
  return v;
}

// RMSNorm's row scale, shared by rmsnorm.cu and the projections that normalise their input
// themselves (gemv.cuh), so that both give the same bits: 1 / sqrt(mean(row^2) + eps) of
// row [dim], summed by a block of kNormThreads threads (thread j: elements j, j + kNormThreads,
// ... with fmaf, then block_reduce). Every thread of the block calls it and gets the value;
// `shared` as for block_reduce. The row is only read (an output aliasing it may be written
// after the call).
inline constexpr int kNormThreads = 128;
__device__ __forceinline__ float rms_scale(const float* row, int dim, float eps, float* shared) {
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += kNormThreads) sum = fmaf(row[i], row[i], sum);
  sum = block_reduce<false>(sum, shared);
  return 1.0f / sqrtf(sum / static_cast<float>(dim) + eps);
}

// Element i of a normalised row: (x * scale) * w[i], two roundings in this order.
__device__ __forceinline__ float rms_apply(float x, float scale, const void* w, DType w_dtype,
                                           std::int64_t i) {
  return __fmul_rn(__fmul_rn(x, scale), load_widen(w, w_dtype, i));
}

// Programmatic dependent launch (compute capability 9.0 on; docs/gpu.md "Dependent launches").
// A kernel launched with `dependent` (launch_dependent below) may start while the kernel before
// it on the stream is still running: it may read only what no earlier kernel writes (weights)
// before wait_for_prior_grids(), which returns once the earlier kernels have finished and their
// writes are visible; every thread of such a kernel calls it before touching anything else. A
// kernel that calls allow_dependents() lets the next dependent launch start once every block of
// this kernel has started (the next kernel's blocks then only take SM room this one no longer
// needs). Both compile to nothing below sm_90 and do nothing for launches without the attribute.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch
// when `dependent` (the kernel must then call wait_for_prior_grids() as above), and checks it.
template <class... Params, class... Args>
void launch_dependent(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block,
                      std::size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1]{};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = dependent ? attribute : nullptr;
  config.numAttrs = dependent ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// Blocks for n elements at `threads` per block, capped to what a grid x dimension allows
// (kernels loop with a grid stride).
inline unsigned grid_for(std::size_t n, int threads) {
  std::size_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535u * 32u) blocks = 65535u * 32u;
  return static_cast<unsigned>(blocks == 0 ? 1 : blocks);
}

}  // namespace specrun::cuda::detail

// Launcher precondition: a plain SPEC_CHECK that names the op.
#define CUDA_OP_CHECK(op, cond, msg) SPEC_CHECK(cond, "cuda::" op ": " << msg)
