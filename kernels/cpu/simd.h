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

// Four dot products sharing the loads of x: out[r] = sum_i x[i] * w[r * w_stride + i].
inline void dot4_f32(const float* x, const float* w, std::int64_t w_stride, int n, float* out) {
  const float* w0 = w;
  const float* w1 = w + w_stride;
  const float* w2 = w + 2 * w_stride;
  const float* w3 = w + 3 * w_stride;
#ifdef SPECRUN_CPU_AVX512
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail_mask(n - i);
    __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    a0 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, w0 + i), a0);
    a1 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, w1 + i), a1);
    a2 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, w2 + i), a2);
    a3 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, w3 + i), a3);
  }
  out[0] = reduce16(a0);
  out[1] = reduce16(a1);
  out[2] = reduce16(a2);
  out[3] = reduce16(a3);
#else
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int i = 0; i < n; ++i) {
    s0 += x[i] * w0[i];
    s1 += x[i] * w1[i];
    s2 += x[i] * w2[i];
    s3 += x[i] * w3[i];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
#endif
}

// A tile of 4 weight rows x NT tokens (NT <= 4), weights of type KT widened on the fly:
//   y[t * y_stride + r] = sum_i x[t * x_stride + i] * widen(w[r * w_stride + i]),  r < 4, t < NT.
// Each weight vector is loaded and widened once for NT tokens and each token vector serves four
// rows, so neither loads nor conversions dominate the FMAs.
template <int NT, DType KT>
inline void tile_rows4(const float* x, std::int64_t x_stride, const void* w, std::int64_t w_stride,
                       int n, float* y, std::int64_t y_stride) {
#ifdef SPECRUN_CPU_AVX512
  // Named accumulators: GCC 12 spills an accumulator array to the stack every iteration.
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
  __m512 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
  __m512 a30 = a00, a31 = a00, a32 = a00, a33 = a00;
  const float* x0 = x;
  const float* x1 = x + x_stride;
  const float* x2 = x + 2 * x_stride;
  const float* x3 = x + 3 * x_stride;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512 w0, w1, w2, w3;
    if constexpr (KT == DType::kF32) {
      const auto* wf = static_cast<const float*>(w);
      w0 = load16(wf, i, m);
      w1 = load16(wf + w_stride, i, m);
      w2 = load16(wf + 2 * w_stride, i, m);
      w3 = load16(wf + 3 * w_stride, i, m);
    } else {
      const auto* wh = static_cast<const std::uint16_t*>(w);
      w0 = load16(wh, i, m, KT);
      w1 = load16(wh + w_stride, i, m, KT);
      w2 = load16(wh + 2 * w_stride, i, m, KT);
      w3 = load16(wh + 3 * w_stride, i, m, KT);
    }
    __m512 xv = _mm512_maskz_loadu_ps(m, x0 + i);
    a00 = _mm512_fmadd_ps(xv, w0, a00);
    a01 = _mm512_fmadd_ps(xv, w1, a01);
    a02 = _mm512_fmadd_ps(xv, w2, a02);
    a03 = _mm512_fmadd_ps(xv, w3, a03);
    if constexpr (NT > 1) {
      xv = _mm512_maskz_loadu_ps(m, x1 + i);
      a10 = _mm512_fmadd_ps(xv, w0, a10);
      a11 = _mm512_fmadd_ps(xv, w1, a11);
      a12 = _mm512_fmadd_ps(xv, w2, a12);
      a13 = _mm512_fmadd_ps(xv, w3, a13);
    }
    if constexpr (NT > 2) {
      xv = _mm512_maskz_loadu_ps(m, x2 + i);
      a20 = _mm512_fmadd_ps(xv, w0, a20);
      a21 = _mm512_fmadd_ps(xv, w1, a21);
      a22 = _mm512_fmadd_ps(xv, w2, a22);
      a23 = _mm512_fmadd_ps(xv, w3, a23);
    }
    if constexpr (NT > 3) {
      xv = _mm512_maskz_loadu_ps(m, x3 + i);
      a30 = _mm512_fmadd_ps(xv, w0, a30);
      a31 = _mm512_fmadd_ps(xv, w1, a31);
      a32 = _mm512_fmadd_ps(xv, w2, a32);
      a33 = _mm512_fmadd_ps(xv, w3, a33);
    }
  }
  auto store = [&](int t, __m512 c0, __m512 c1, __m512 c2, __m512 c3) {
    float* yt = y + t * y_stride;
    yt[0] = reduce16(c0);
    yt[1] = reduce16(c1);
    yt[2] = reduce16(c2);
    yt[3] = reduce16(c3);
  };
  store(0, a00, a01, a02, a03);
  if constexpr (NT > 1) store(1, a10, a11, a12, a13);
  if constexpr (NT > 2) store(2, a20, a21, a22, a23);
  if constexpr (NT > 3) store(3, a30, a31, a32, a33);
#else
  const std::size_t row_bytes = dtype_size(KT) * static_cast<std::size_t>(w_stride);
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < 4; ++r)
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
