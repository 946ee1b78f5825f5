// argmax (lowest index wins ties) and softmax over one float32 row.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

int argmax(const float* x, int n) {
  int best = 0;
  float best_value = x[0];
  for (int i = 1; i < n; ++i) {
    // Strictly greater keeps the lowest index on ties; a NaN at 0 is replaced by any number.
    if (x[i] > best_value || (__builtin_isnan(best_value) && !__builtin_isnan(x[i]))) {
      best = i;
      best_value = x[i];
    }
  }
  return __builtin_isnan(best_value) ? -1 : best;
}

void softmax(float* x, int n) {
#ifdef SPECRUN_CPU_AVX2
  // The max (exact in any order), exp8 of 8 elements at a time (masked tail) into 8 partial
  // sums added at the end, then x * (1 / sum): attention's scores in the avx2 variant.
  __m256 mx = _mm256_set1_ps(-__builtin_inff());
  for (int i = 0; i < n; i += 8) {
    const __m256i m = detail::tail_mask8(n - i);
    mx = _mm256_blendv_ps(mx, _mm256_max_ps(mx, _mm256_maskload_ps(x + i, m)),
                          _mm256_castsi256_ps(m));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const __m256 max_value = _mm256_set1_ps(_mm_cvtss_f32(m4));
  __m256 sum8 = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256i m = detail::tail_mask8(n - i);
    const __m256 e = detail::exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), max_value));
    _mm256_maskstore_ps(x + i, m, e);
    sum8 = _mm256_add_ps(sum8, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
  }
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum8), _mm256_extractf128_ps(sum8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  const __m256 inv = _mm256_set1_ps(1.0f / _mm_cvtss_f32(s4));
  for (int i = 0; i < n; i += 8) {
    const __m256i m = detail::tail_mask8(n - i);
    _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
  }
#else
  float max_value = -__builtin_inff();
  for (int i = 0; i < n; ++i) max_value = detail::max_of(max_value, x[i]);
  float sum = 0.f;
  for (int i = 0; i < n; ++i) {
    x[i] = __builtin_expf(x[i] - max_value);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] *= inv;
#endif
}

}  // namespace specrun::cpu::SPECRUN_ISA
