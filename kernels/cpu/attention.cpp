// attention: causal grouped-query attention of a window of new tokens over a float32 KV cache.
// Layout: q, out [n_tokens, n_heads*head_dim]; k, v [positions, n_kv_heads, head_dim]. Query i
// is at position start + i and attends to keys 0..start+i. Threads split (token, head) pairs;
// each pair keeps its scores in a per-thread buffer that only grows.
//
// Numerics: a (query, key) score and a query's softmax and weighted sum depend only on that
// query, its position and the cache, never on the other queries of the call (the key loop runs
// over absolute positions 0..n_keys-1 in order), so outputs are bitwise independent of the
// window and batch shape.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

namespace {

#ifdef SPECRUN_CPU_AVX512
// scores[p] = dot(q, k_p) * scale for p < n_keys, k_p at k + p * stride. Each dot product is one
// 16-lane accumulator over ascending 16-element chunks (masked tail), reduced with reduce16's
// tree; four keys at a time share the loads of q and one reduce16x4.
void scores_avx512(const float* q, const float* k, std::int64_t stride, int head_dim, int n_keys,
                   float scale, float* scores) {
  int p = 0;
  for (; p + 4 <= n_keys; p += 4) {
    const float* k0 = k + p * stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < head_dim; i += 16) {
      const __mmask16 m = detail::tail_mask(head_dim - i);
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + i);
      a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + i), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + stride + i), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + 2 * stride + i), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k0 + 3 * stride + i), a3);
    }
    detail::reduce16x4(a0, a1, a2, a3, scores + p);
    for (int j = 0; j < 4; ++j) scores[p + j] *= scale;
  }
  for (; p < n_keys; ++p) {
    const float* kp = k + p * stride;
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < head_dim; i += 16) {
      const __mmask16 m = detail::tail_mask(head_dim - i);
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), _mm512_maskz_loadu_ps(m, kp + i), a);
    }
    scores[p] = detail::reduce16(a) * scale;
  }
}

// out[i] = sum_p weights[p] * v_p[i], summed over p in ascending order (a multiply, then an
// add: the same arithmetic as repeated axpy), accumulated in registers.
void weighted_sum_avx512(const float* weights, const float* v, std::int64_t stride, int head_dim,
                         int n_keys, float* out) {
  for (int i = 0; i < head_dim; i += 64) {
    const __mmask16 m0 = detail::tail_mask(head_dim - i);
    const __mmask16 m1 = detail::tail_mask(head_dim - i - 16 > 0 ? head_dim - i - 16 : 0);
    const __mmask16 m2 = detail::tail_mask(head_dim - i - 32 > 0 ? head_dim - i - 32 : 0);
    const __mmask16 m3 = detail::tail_mask(head_dim - i - 48 > 0 ? head_dim - i - 48 : 0);
    __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (int p = 0; p < n_keys; ++p) {
      const float* vp = v + p * stride + i;
      const __m512 wp = _mm512_set1_ps(weights[p]);
      o0 = _mm512_add_ps(o0, _mm512_mul_ps(wp, _mm512_maskz_loadu_ps(m0, vp)));
      o1 = _mm512_add_ps(o1, _mm512_mul_ps(wp, _mm512_maskz_loadu_ps(m1, vp + 16)));
      o2 = _mm512_add_ps(o2, _mm512_mul_ps(wp, _mm512_maskz_loadu_ps(m2, vp + 32)));
      o3 = _mm512_add_ps(o3, _mm512_mul_ps(wp, _mm512_maskz_loadu_ps(m3, vp + 48)));
    }
    _mm512_mask_storeu_ps(out + i, m0, o0);
    _mm512_mask_storeu_ps(out + i + 16, m1, o1);
    _mm512_mask_storeu_ps(out + i + 32, m2, o2);
    _mm512_mask_storeu_ps(out + i + 48, m3, o3);
  }
}
#endif

}  // namespace

void attention(const float* q, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
               const float* k, const float* v, int start, float* out) {
  const int group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const std::int64_t q_stride = static_cast<std::int64_t>(n_heads) * head_dim;
  const std::int64_t kv_stride = static_cast<std::int64_t>(n_kv_heads) * head_dim;
  const int n_pairs = n_tokens * n_heads;
  const std::int64_t work = static_cast<std::int64_t>(n_pairs) * (start + n_tokens) * head_dim;

#pragma omp parallel for schedule(dynamic, 1) if (work >= (1 << 15))
  for (int pair = 0; pair < n_pairs; ++pair) {
    const int t = pair / n_heads;
    const int h = pair % n_heads;
    const int kv = h / group;
    const int n_keys = start + t + 1;
    static thread_local std::vector<float> scores_buffer;
    if (scores_buffer.size() < static_cast<std::size_t>(n_keys)) scores_buffer.resize(n_keys);
    float* scores = scores_buffer.data();

    const float* qh = q + t * q_stride + static_cast<std::int64_t>(h) * head_dim;
    const float* kh = k + static_cast<std::int64_t>(kv) * head_dim;
    const float* vh = v + static_cast<std::int64_t>(kv) * head_dim;
#ifdef SPECRUN_CPU_AVX512
    scores_avx512(qh, kh, kv_stride, head_dim, n_keys, scale, scores);
#else
    for (int p = 0; p < n_keys; ++p)
      scores[p] = detail::dot_f32(qh, kh + p * kv_stride, head_dim) * scale;
#endif
    float max_score = -INFINITY;
    for (int p = 0; p < n_keys; ++p) max_score = std::max(max_score, scores[p]);
    float sum = 0.f;
#ifdef SPECRUN_CPU_AVX512
    for (int p = 0; p < n_keys; p += 16) {
      const __mmask16 m = detail::tail_mask(n_keys - p);
      const __m512 e = detail::exp16(
          _mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + p), _mm512_set1_ps(max_score)));
      _mm512_mask_storeu_ps(scores + p, m, e);
    }
    for (int p = 0; p < n_keys; ++p) sum += scores[p];
#else
    for (int p = 0; p < n_keys; ++p) {
      scores[p] = std::exp(scores[p] - max_score);
      sum += scores[p];
    }
#endif
    const float inv_sum = 1.0f / sum;
    for (int p = 0; p < n_keys; ++p) scores[p] *= inv_sum;
    float* oh = out + t * q_stride + static_cast<std::int64_t>(h) * head_dim;
#ifdef SPECRUN_CPU_AVX512
    weighted_sum_avx512(scores, vh, kv_stride, head_dim, n_keys, oh);
#else
    std::fill(oh, oh + head_dim, 0.f);
    for (int p = 0; p < n_keys; ++p) detail::axpy(scores[p], vh + p * kv_stride, oh, head_dim);
#endif
  }
}

}  // namespace specrun::cpu
