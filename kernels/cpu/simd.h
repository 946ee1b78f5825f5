// Inner loops shared by the CPU ops (internal to kernels/cpu): dot products with weights widened
// on the fly, row widening, axpy. AVX-512 intrinsics when the build targets a CPU that has them
// (-march=native), otherwise portable loops that the compiler vectorises (`omp simd` allows the
// reassociation a vectorised sum needs). Every function accumulates in float32.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/dtype.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define SPECRUN_CPU_AVX512 1
#endif

namespace specrun::cpu::detail {

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
#endif

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

// sum_i x[i] * widen(w[i]) for a weight row in `t`.
inline float dot_weight_row(const float* x, const void* w, DType t, int n) {
  if (t == DType::kF32) return dot_f32(x, static_cast<const float*>(w), n);
  const auto* h = static_cast<const std::uint16_t*>(w);
#ifdef SPECRUN_CPU_AVX512
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load16(h, i, 0xffff, t), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), load16(h, i + 16, 0xffff, t), acc1);
  }
  for (; i < n; i += 16) {
    __mmask16 m = tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), load16(h, i, m, t), acc0);
  }
  return reduce16(_mm512_add_ps(acc0, acc1));
#else
  float s = 0.f;
  if (t == DType::kBF16) {
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; ++i) s += x[i] * bf16_to_f32(h[i]);
  } else {
    for (int i = 0; i < n; ++i) s += x[i] * f16_bits_to_f32(h[i]);
  }
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

// A tile of R weight rows x NT tokens, weights of type KT widened on the fly:
//   y[t * y_stride + r] = sum_i x[t * x_stride + i] * widen(w[r * w_stride + i]),  r < R, t < NT.
// Each weight vector is loaded and widened once for NT tokens and each token vector serves R
// rows, so neither loads nor conversions dominate the FMAs (R * NT + R + 1 <= 32 registers).
// Order contract (bitwise batch-shape independence): every (r, t) sum is accumulated alone, in
// one 16-lane accumulator, over i in ascending 16-element steps (the last one masked), then
// reduced with reduce16; R and NT change only which sums run side by side.
template <DType KT, int R, int NT>
inline void tile_rows(const float* x, std::int64_t x_stride, const void* w, std::int64_t w_stride,
                      int n, float* y, std::int64_t y_stride) {
#ifdef SPECRUN_CPU_AVX512
  static_assert(R * NT + R + 1 <= 32, "tile does not fit the 32 vector registers");
  // Fully unrolled constant-index loops: GCC keeps acc in registers.
  __m512 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (KT == DType::kF32)
        wv[r] = load16(static_cast<const float*>(w) + r * w_stride, i, m);
      else
        wv[r] = load16(static_cast<const std::uint16_t*>(w) + r * w_stride, i, m, KT);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * x_stride + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(xv, wv[r], acc[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = reduce16(acc[r][t]);
#else
  // One sum per (r, t) in the order dot_weight_row uses for every batch shape.
  const std::size_t row_bytes = dtype_size(KT) * static_cast<std::size_t>(w_stride);
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < R; ++r)
      y[t * y_stride + r] = dot_weight_row(
          x + t * x_stride, static_cast<const std::uint8_t*>(w) + row_bytes * r, KT, n);
#endif
}

// y[i] += a * x[i]
inline void axpy(float a, const float* x, float* y, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace specrun::cpu::detail
