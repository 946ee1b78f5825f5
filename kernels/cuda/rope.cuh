// The rotation of one RoPE pair (Hugging Face rotate_half), shared by every kernel that rotates:
// the in-place rotation (rope.cu), the keys as they are appended to the cache (kv_append.cu) and
// the queries as attention loads them (attention.cu). For j < half = head_dim / 2, with c, s the
// cos and sin of pair j:
//   x'[j] = x[j] c - x[j + half] s,   x'[j + half] = x[j + half] c + x[j] s.
// Each product and the sum are rounded on their own (__fmul_rn, __fadd_rn: never contracted into
// an FMA), so every kernel gives the same bits for the same element, whatever the compiler
// decides in its context; the fused ops rely on it (bitwise what the compositions give).
#pragma once

#include <cuda_runtime.h>

namespace specrun::cuda::detail {

__device__ __forceinline__ float rope_first(float x0, float x1, float c, float s) {
  return __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
}
__device__ __forceinline__ float rope_second(float x0, float x1, float c, float s) {
  return __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// Element d of one head rotated: head [head_dim] float32 (not rotated), cos_sin the token's
// row of the table (cos of the pairs, then their sin; rope_table's layout).
__device__ __forceinline__ float rope_element(const float* head, int d, int half,
                                              const float* cos_sin) {
  if (d < half) return rope_first(head[d], head[d + half], cos_sin[d], cos_sin[half + d]);
  const int j = d - half;
  return rope_second(head[j], head[d], cos_sin[j], cos_sin[half + j]);
}

}  // namespace specrun::cuda::detail
