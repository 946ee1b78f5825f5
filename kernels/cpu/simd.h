// Inner loops shared by the CPU ops (internal to kernels/cpu): dot products, horizontal sums,
// row widening, exp, axpy. AVX-512 intrinsics when the build targets a CPU that has them
// (-march=native), otherwise portable loops that the compiler vectorises (`omp simd` allows the
// reassociation a vectorised sum needs). Every function accumulates in float32.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/dtype.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define SPECRUN_CPU_AVX512 1
#endif

namespace specrun::cpu::detail {

// Slot of row r (< 32) of a packed block within a k-group (ops.h pack_weights layout): BF16
// interleaves rows j and j + 16 in each 32-bit word, other dtypes keep row order.
constexpr int packed_slot(DType t, int r) {
  return t == DType::kBF16 ? (r < 16 ? 2 * r : 2 * (r - 16) + 1) : r;
}

inline float f16_bits_to_f32(std::uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

#ifdef SPECRUN_CPU_AVX512
inline __mmask16 tail_mask(int remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff)
                         : static_cast<__mmask16>((1u << remaining) - 1u);
}
// 16 weights starting at w[i] (masked), widened to float32.
inline __m512 load16(const float* w, int i, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, w + i);
}
// (The maskz forms avoid GCC 12's false "may be used uninitialized" in the unmasked ones.)
inline __m512 load16(const std::uint16_t* w, int i, __mmask16 m, DType t) {
  __m256i h = _mm256_maskz_loadu_epi16(m, w + i);
  if (t == DType::kF16) return _mm512_maskz_cvtph_ps(0xffff, h);
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
}
inline float reduce16(__m512 v) {
  __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 0));
  __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}
// exp(x) for 16 floats, within ~2 ulp of expf (|x| <= 88; below -104 it returns 0-ish, above 89
// +inf): x = n ln2 + r, |r| <= ln2/2 (Cody-Waite, two-part ln2), exp(r) by its degree-7 Taylor
// polynomial (truncation < 6e-9 relative), times 2^n with vscalefps. glibc's expf is not
// vectorised without -ffast-math; this is ~10x faster and, being elementwise, as independent of
// the batch shape as expf. Callers use it for every element (masked tails, no scalar epilogue).
inline __m512 exp16(__m512 x) {
  // (maskz forms: GCC 12 warns "may be used uninitialized" on the unmasked ones)
  x = _mm512_maskz_min_ps(0xffff, _mm512_maskz_max_ps(0xffff, x, _mm512_set1_ps(-104.0f)),
                          _mm512_set1_ps(89.0f));
  const __m512 n =
      _mm512_maskz_roundscale_ps(0xffff, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(0xffff, p, n);
}
// silu(g) * u = g / (1 + exp(-g)) * u for 16 floats (silu_mul's and the fused gate/up
// epilogue's one formula).
inline __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}
// 128-bit lanes of a and b picked by IMM as _mm512_shuffle_f32x4 does (the maskz form avoids
// GCC 12's false "used uninitialized" in the unmasked one).
template <int IMM>
inline __m512 shuffle_lanes(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(0xffff, a, b, IMM);
}
// [reduce16(a), reduce16(b), reduce16(c), reduce16(d)], bitwise: the same additions of the same
// pairs (reduce16's tree: halves of 512, of 256, then lanes 0+2, 1+3, then 0+1), four sums per
// instruction (attention's four keys at a time).
inline __m128 reduce16x4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // [a_lo256 | b_lo256] + [a_hi256 | b_hi256]
  const __m512 ab = _mm512_add_ps(shuffle_lanes<0x44>(a, b), shuffle_lanes<0xee>(a, b));
  const __m512 cd = _mm512_add_ps(shuffle_lanes<0x44>(c, d), shuffle_lanes<0xee>(c, d));
  // 128-bit lanes: [a8lo, a8hi, b8lo, b8hi] and [c8lo, ...] -> [a4, b4, c4, d4]
  const __m512 s4 = _mm512_add_ps(shuffle_lanes<0x88>(ab, cd), shuffle_lanes<0xdd>(ab, cd));
  // Within each 128-bit lane: [s0 + s2, s1 + s3, ..], then element 0 + element 1.
  const __m512 s2 = _mm512_add_ps(s4, _mm512_maskz_permute_ps(0xffff, s4, 0xee));
  const __m512 s1 = _mm512_add_ps(s2, _mm512_maskz_permute_ps(0xffff, s2, 0x55));
  const __m512i lanes = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  return _mm512_maskz_extractf32x4_ps(0xf, _mm512_maskz_permutexvar_ps(0xffff, lanes, s1), 0);
}
#endif

// silu(g) * u, the portable builds' formula (silu_mul and the fused gate/up epilogue).
inline float silu_mul1(float g, float u) {
  return g / (1.0f + std::exp(-g)) * u;
}

// sum_i a[i] * b[i]
inline float dot_f32(const float* a, const float* b, int n) {
#ifdef SPECRUN_CPU_AVX512
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    __mmask16 m = tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return reduce16(_mm512_add_ps(acc0, acc1));
#else
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
#endif
}

// out[i] = widen(w[i]) for i < n.
inline void widen_row(const void* w, DType t, int n, float* out) {
  if (t == DType::kF32) {
    std::memcpy(out, w, sizeof(float) * static_cast<std::size_t>(n));
    return;
  }
  const auto* h = static_cast<const std::uint16_t*>(w);
#ifdef SPECRUN_CPU_AVX512
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, m, load16(h, i, m, t));
  }
#else
  if (t == DType::kBF16) {
#pragma omp simd
    for (int i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
  } else {
    for (int i = 0; i < n; ++i) out[i] = f16_bits_to_f32(h[i]);
  }
#endif
}

// y[i] += a * x[i]
inline void axpy(float a, const float* x, float* y, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace specrun::cpu::detail
