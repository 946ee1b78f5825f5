// What every kernel variant's sources share (internal to kernels/cpu): the variant's own
// declarations of the kernels, and the inner loops the ops use: dot products, horizontal sums,
// row widening, exp, axpy, scratch buffers. AVX-512 intrinsics in the variants compiled with
// AVX-512 (avx512), otherwise portable loops that the compiler vectorises for the variant's
// instruction set (`omp simd` allows the reassociation a vectorised sum needs). Every function
// accumulates in float32.
//
// Only a variant's translation units include this (kernels/cpu/variant.h): everything here is
// in specrun::cpu::<variant>. They use no standard-library templates or inline functions (no
// <algorithm>, <vector>, <atomic>, <cmath>), whose out-of-line copies would carry the variant's
// instructions into the rest of the program; the compiler builtins and the helpers below stand
// in for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"

#if !defined(SPECRUN_ISA)
#error "kernels/cpu/simd.h is for the kernel variants' sources, built with -DSPECRUN_ISA=<variant>"
#endif

// SPECRUN_CPU_AVX512: the avx512 variant's intrinsics paths; SPECRUN_CPU_AVX2: the avx2
// variant's (matmul tiles, exp); neither: the portable loops.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#include <immintrin.h>
#define SPECRUN_CPU_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define SPECRUN_CPU_AVX2 1
#elif defined(__SSE2__)
#include <immintrin.h>
#endif

namespace specrun::cpu::SPECRUN_ISA {

// This variant's implementation of every kernel (dispatch.h calls them through its table).
#include "kernels/cpu/kernel_api.inc"

}  // namespace specrun::cpu::SPECRUN_ISA

namespace specrun::cpu {
// Throws std::bad_alloc (defined once, in dispatch.cpp: the exception's inline code stays out of
// the variants).
[[noreturn]] void throw_out_of_memory(std::size_t bytes);
}  // namespace specrun::cpu

namespace specrun::cpu::SPECRUN_ISA::detail {

// std::min / std::max for the kernels (the same results: a < b ? a : b, b < a ? a : b).
template <typename T>
inline T min_of(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
inline T max_of(T a, T b) {
  return a < b ? b : a;
}

// A per-thread scratch buffer of T (trivially copyable) that only grows; contents are not kept
// across growth. For `static thread_local` use (std::vector would instantiate outside the
// variant's namespace).
template <typename T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }
  // At least n elements, 64-byte aligned. Throws std::bad_alloc when memory runs out (inside an
  // OpenMP region that ends the process, as std::vector's would).
  T* get(std::size_t n) {
    if (n > capacity_) {
      std::free(data_);
      data_ = nullptr;
      capacity_ = 0;
      const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, bytes);
      if (p == nullptr) throw_out_of_memory(bytes);
      data_ = static_cast<T*>(p);
      capacity_ = n;
    }
    return data_;
  }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

inline float f16_bits_to_f32(std::uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

// The vector exp's constants (exp16, exp8): the clamp, log2(e), ln 2 in two parts (Cody-Waite;
// the high part exact in 16 bits), and the Taylor coefficients of exp(r), highest degree first.
constexpr float kExpLow = -104.0f, kExpHigh = 89.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693145751953125f, kLn2Low = 1.428606765330187e-06f;
constexpr float kExpTaylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                 1.0f / 6,    0.5f,       1.0f,       1.0f};

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
  x = _mm512_maskz_min_ps(0xffff, _mm512_maskz_max_ps(0xffff, x, _mm512_set1_ps(kExpLow)),
                          _mm512_set1_ps(kExpHigh));
  const __m512 n = _mm512_maskz_roundscale_ps(0xffff, _mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kExpTaylor[0]);
#pragma GCC unroll 8
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpTaylor[i]));
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

#ifdef SPECRUN_CPU_AVX2
// Lanes [0, remaining) set (remaining clamped to [0, 8]), for maskload/maskstore.
inline __m256i tail_mask8(int remaining) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(remaining), lane);
}
// exp(x) for 8 floats: exp16's method and constants (Cody-Waite reduction, degree-7 Taylor
// polynomial), with 2^n made from exponent bits in two halves (AVX2 has no vscalefps), so that
// n from -150 to 128 (x clamped to [-104, 89]) gives zero-ish, subnormal or +inf as expf does.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpLow)), _mm256_set1_ps(kExpHigh));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kExpTaylor[0]);
#pragma GCC unroll 8
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpTaylor[i]));
  // 2^n = 2^n1 * 2^n2 with n1 = floor(n / 2), n2 = n - n1, both in [-75, 64]: normal floats.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
// silu(g) * u for 8 floats (silu_mul's and the fused gate/up epilogue's one formula here).
inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}
#endif

// silu(g) * u, the portable builds' formula (silu_mul and the fused gate/up epilogue).
inline float silu_mul1(float g, float u) {
  return g / (1.0f + __builtin_expf(-g)) * u;
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

}  // namespace specrun::cpu::SPECRUN_ISA::detail
