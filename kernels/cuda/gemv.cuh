// What the two batch-invariant GEMV kernels share (included by matmul.cu and gemv_mma.cu only):
// the plan of a launch (up to three output matrices sharing x), the row groups a block owns,
// the L2 prefetch of a group's weight rows, and the count of blocks resident on the device.
//
// Both kernels compute y [n_tokens, out] = x W^T (+ bias) for n_tokens <= gemv_tokens(), every
// (row, token) reduced in one order that depends neither on n_tokens nor on the token's place
// in the batch (ops.h). The CUDA-core kernel (matmul.cu) takes any weight dtype; the tensor-core
// kernel (gemv_mma.cu, kGemvTensorCores) BF16 weights with `in` a multiple of 32.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace specrun::cuda::detail {

// One output matrix of a GEMV launch: y [n_tokens, out] = x W^T (+ bias); the row groups
// [first_block, first_block + ceil(out / group rows)) of the launch compute it. A launch covers
// up to kMaxSegments matrices sharing x (q, k and v in one launch).
inline constexpr int kMaxSegments = 3;
struct GemvSegment {
  const void* w;
  const float* bias;
  float* y;
  int out;
  int first_block;
};
struct GemvPlan {
  GemvSegment seg[kMaxSegments];
  int n_seg;
  int n_groups;    // groups of rows over all segments (the blocks of a plain launch)
  bool dependent;  // launched as a programmatic dependent launch: prefetch, then wait
  // y += x W^T (+ bias) (the residual add after o_proj and down_proj; one segment, no SwiGLU):
  // the thread that computes y[t, r] reads and writes it, so the result is bitwise the plain
  // GEMV followed by add_inplace.
  bool accumulate;
  // The input's RMSNorm (norm_w [in] in norm_dtype), done by every block into its dynamic shared
  // memory before its rows (normed_input below); norm_w == nullptr: x as given.
  const void* norm_w;
  DType norm_dtype;
  float norm_eps;
};

// Bytes of dynamic shared memory a launch of `plan` needs: the normalised rows, if any.
inline std::size_t norm_smem_bytes(const GemvPlan& plan, int n_tokens, int in) {
  return plan.norm_w == nullptr
             ? 0
             : static_cast<std::size_t>(n_tokens) * static_cast<std::size_t>(in) * sizeof(float);
}

// The rows the block multiplies: x itself, or (plan.norm_w) x's rows normalised into the
// block's dynamic shared memory [n_tokens, in] with rms_scale and rms_apply, bitwise what
// rmsnorm.cu writes (a block of kNormThreads threads sums in its order; every thread calls this,
// after waiting for the kernel that wrote x). Generic loads read either.
// Kernels are instantiated with kNorm = (plan.norm_w != nullptr) and kAccumulate =
// plan.accumulate (never both), so that plain launches keep their registers.
template <bool kNorm>
__device__ __forceinline__ const float* normed_input(const float* x, int n_tokens, int in,
                                                     const GemvPlan& plan) {
  if constexpr (!kNorm) {
    return x;
  } else {
    extern __shared__ float4 dynamic_smem[];
    __shared__ float reduce[kWarp];
    float* xs = reinterpret_cast<float*>(dynamic_smem);
    for (int t = 0; t < n_tokens; ++t) {
      const float* row = x + static_cast<std::int64_t>(t) * in;
      const float scale = rms_scale(row, in, plan.norm_eps, reduce);
      for (int i = static_cast<int>(threadIdx.x); i < in; i += kNormThreads)
        xs[static_cast<std::int64_t>(t) * in + i] =
            rms_apply(row[i], scale, plan.norm_w, plan.norm_dtype, i);
    }
    __syncthreads();
    return xs;
  }
}

// Whether the rows a launch of `plan` multiplies start 16-byte aligned: x's address, or with a
// fused norm the shared memory's (always), so that the kernel (and its order of sums) is the one
// the plain launch on a separately normalised buffer would take.
inline bool input_aligned(const GemvPlan& plan, const float* x) {
  return plan.norm_w != nullptr || reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
}

// Writes the finished sum v (bias added) of y[t, row] of `seg` (at = t * out + row).
template <bool kAccumulate>
__device__ __forceinline__ void store_output(const GemvSegment& seg, std::int64_t at, float v) {
  seg.y[at] = kAccumulate ? seg.y[at] + v : v;
}

// Numbers the row groups of `plan`'s segments (kGroupRows rows each) and returns their count.
inline int number_groups(GemvPlan& plan, int group_rows) {
  int groups = 0;
  for (int s = 0; s < plan.n_seg; ++s) {
    plan.seg[s].first_block = groups;
    groups += (plan.seg[s].out + group_rows - 1) / group_rows;
  }
  plan.n_groups = groups;
  return groups;
}

// The segment of row group g and its first row, read with constant indices (a run-time index
// would copy the plan to local memory).
template <int kGroupRows>
__device__ __forceinline__ GemvSegment group_segment(const GemvPlan& plan, int g, int* row0) {
  const GemvSegment seg = plan.n_seg > 2 && g >= plan.seg[2].first_block   ? plan.seg[2]
                          : plan.n_seg > 1 && g >= plan.seg[1].first_block ? plan.seg[1]
                                                                           : plan.seg[0];
  *row0 = (g - seg.first_block) * kGroupRows;
  return seg;
}

// Asks L2 for the weight rows of row group g (kGroupRows rows; kSwiglu adds up's rows after
// gate's), kThreads / rows threads per row, a 128-byte line each per step. No kernel writes
// weights, so this may run before the kernel that writes x has finished.
template <typename W, bool kSwiglu, int kGroupRows, int kThreads>
__device__ __forceinline__ void prefetch_group(const GemvPlan& plan, int g, int in) {
  constexpr int kR = kSwiglu ? 2 * kGroupRows : kGroupRows;
  static_assert(kThreads % kR == 0, "every row gets the same number of threads");
  int row0 = 0;
  const GemvSegment seg = group_segment<kGroupRows>(plan, g, &row0);
  const int r = static_cast<int>(threadIdx.x) % kR, rr = r % kGroupRows;
  const char* row = reinterpret_cast<const char*>(
      static_cast<const W*>(seg.w) +
      static_cast<std::int64_t>(row0 + rr < seg.out ? row0 + rr : row0) * in +
      (kSwiglu && r >= kGroupRows ? static_cast<std::int64_t>(seg.out) * in : 0));
  const std::int64_t row_bytes = static_cast<std::int64_t>(in) * sizeof(W);
  for (std::int64_t off = static_cast<std::int64_t>(threadIdx.x / kR) * 128; off < row_bytes;
       off += static_cast<std::int64_t>(kThreads / kR) * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(row + off));
}

// Blocks of `kernel` (launched with `threads` threads and `smem` bytes of dynamic shared memory)
// that fit on the current device at once (SMs x resident blocks per SM), asked once per kernel
// and size (a process drives one device; launches come from one thread).
template <class... Params>
int resident_blocks(void (*kernel)(Params...), int threads, std::size_t smem = 0) {
  static std::map<std::pair<const void*, std::size_t>, int> known;
  const std::pair<const void*, std::size_t> key(reinterpret_cast<const void*>(kernel), smem);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  int device = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return known[key] = std::max(1, sms * per_sm);
}

// The tensor-core GEMV (gemv_mma.cu) for BF16 weights: launches it and returns true when it
// applies (`in` a multiple of 32, x and every weight 16-byte aligned, compute capability 8.0 on),
// else launches nothing and returns false. The choice depends on none of n_tokens, so a token's
// outputs stay bitwise the same alone and in a window. swiglu: plan.seg[0] is a gate/up pair.
bool launch_gemv_mma(cudaStream_t stream, const float* x, int n_tokens, int in, GemvPlan plan,
                     bool swiglu, int flags);

}  // namespace specrun::cuda::detail
