// attention: causal grouped-query attention of a window of new tokens over a float32 KV cache.
// Layout: q [n_tokens, n_heads*key_dim], out [n_tokens, n_heads*value_dim]; k [positions,
// n_kv_heads, key_dim], v [positions, n_kv_heads, value_dim] (key_dim = value_dim in the Llama
// family; MLA's differ). Query i
// is at position start + i and attends to keys 0..start+i. Threads split (block of 4 consecutive
// queries, head) units, whose queries share the loads of keys and values; scores live in a
// per-thread buffer that only grows.
//
// Numerics: a (query, key) score and a query's softmax and weighted sum depend only on that
// query, its position and the cache, never on the other queries of the call or of its block
// (every loop over keys runs over absolute positions 0..n_keys-1 in order, and each query has
// its own accumulators), so outputs are bitwise independent of the window and batch shape.
#include <omp.h>

#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

namespace {

// Queries of one head processed together (consecutive tokens): they share the loads of the keys
// and values.
constexpr int kQueryBlock = 4;

#ifdef SPECRUN_CPU_AVX512
// reduce16x4 of QB queries' dot products with 4 keys (k0, k0 + stride, ...): row i of the
// result holds query i's four sums. Each dot product is one 16-lane accumulator over ascending
// 16-element chunks (masked tail).
template <int QB>
inline void dots_4keys(const float* q, std::int64_t q_stride, const float* k0, std::int64_t stride,
                       int head_dim, __m128* sums) {
  __m512 a[QB][4];
#pragma GCC unroll 4
  for (int i = 0; i < QB; ++i) a[i][0] = a[i][1] = a[i][2] = a[i][3] = _mm512_setzero_ps();
  for (int d = 0; d < head_dim; d += 16) {
    const __mmask16 m = detail::tail_mask(head_dim - d);
    __m512 kv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) kv[j] = _mm512_maskz_loadu_ps(m, k0 + j * stride + d);
#pragma GCC unroll 4
    for (int i = 0; i < QB; ++i) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + i * q_stride + d);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) a[i][j] = _mm512_fmadd_ps(qv, kv[j], a[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QB; ++i) sums[i] = detail::reduce16x4(a[i][0], a[i][1], a[i][2], a[i][3]);
}

// scores[i * s_stride + p] = dot(q_i, k_p) * scale for QB queries (q_i at q + i * q_stride) and
// p < n_keys, k_p at k + p * stride: every dot product reduced with reduce16's tree whatever QB
// (dots_4keys; single keys at the end with reduce16), then scaled. Sixteen keys' scores are
// gathered in a register and stored at once (stores of 4 then loads of 16 stall forwarding).
template <int QB>
void scores_block(const float* q, std::int64_t q_stride, const float* k, std::int64_t stride,
                  int head_dim, int n_keys, float scale, float* scores, std::int64_t s_stride) {
  const __m512 scale16 = _mm512_set1_ps(scale);
  int p = 0;
  for (; p + 16 <= n_keys; p += 16) {
    __m128 s0[QB], s1[QB], s2[QB], s3[QB];
    dots_4keys<QB>(q, q_stride, k + p * stride, stride, head_dim, s0);
    dots_4keys<QB>(q, q_stride, k + (p + 4) * stride, stride, head_dim, s1);
    dots_4keys<QB>(q, q_stride, k + (p + 8) * stride, stride, head_dim, s2);
    dots_4keys<QB>(q, q_stride, k + (p + 12) * stride, stride, head_dim, s3);
#pragma GCC unroll 4
    for (int i = 0; i < QB; ++i) {
      __m512 v = _mm512_maskz_broadcast_f32x4(0x000f, s0[i]);
      v = _mm512_mask_broadcast_f32x4(v, 0x00f0, s1[i]);
      v = _mm512_mask_broadcast_f32x4(v, 0x0f00, s2[i]);
      v = _mm512_mask_broadcast_f32x4(v, 0xf000, s3[i]);
      _mm512_storeu_ps(scores + i * s_stride + p, _mm512_mul_ps(v, scale16));
    }
  }
  for (; p + 4 <= n_keys; p += 4) {
    __m128 s4[QB];
    dots_4keys<QB>(q, q_stride, k + p * stride, stride, head_dim, s4);
#pragma GCC unroll 4
    for (int i = 0; i < QB; ++i)
      _mm_storeu_ps(scores + i * s_stride + p, _mm_mul_ps(s4[i], _mm_set1_ps(scale)));
  }
  for (; p < n_keys; ++p) {
    const float* kp = k + p * stride;
#pragma GCC unroll 4
    for (int i = 0; i < QB; ++i) {
      __m512 a = _mm512_setzero_ps();
      for (int d = 0; d < head_dim; d += 16) {
        const __mmask16 m = detail::tail_mask(head_dim - d);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i * q_stride + d),
                            _mm512_maskz_loadu_ps(m, kp + d), a);
      }
      scores[i * s_stride + p] = detail::reduce16(a) * scale;
    }
  }
}

// The largest of the 16 lanes (exact in any order).
float reduce_max16(__m512 v) {
  // (maskz forms: GCC 12 warns "may be used uninitialized" in the unmasked ones)
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 1));
  const __m256 m8 = _mm256_max_ps(lo, hi);
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

// x_i[0..n_i) = softmax(x_i) for QB rows (x_i at x + i * stride, n_i = n[i]): per row its max,
// exp(x - max) (exp16), a 16-lane sum over ascending chunks reduced with reduce16, then
// x * (1 / sum). Each row's result depends only on that row and its length; the rows go through
// each pass together so that their dependency chains (exp16, the horizontal reductions) overlap.
template <int QB>
void softmax_rows(float* x, std::int64_t stride, const int* n) {
  int n_max = 0;
  for (int i = 0; i < QB; ++i) n_max = detail::max_of(n_max, n[i]);
  // f(i, mask, chunk) for every 16-element chunk of every row, chunk by chunk across the rows.
  auto each_chunk = [&](auto&& f) {
    for (int p = 0; p < n_max; p += 16)
#pragma GCC unroll 4
      for (int i = 0; i < QB; ++i)
        if (p < n[i]) f(i, detail::tail_mask(n[i] - p), x + i * stride + p);
  };
  __m512 mx[QB], sum[QB], max_score[QB], inv_sum[QB];
#pragma GCC unroll 4
  for (int i = 0; i < QB; ++i) mx[i] = _mm512_set1_ps(-__builtin_inff());
  each_chunk([&](int i, __mmask16 m, const float* xp) {
    mx[i] = _mm512_maskz_max_ps(0xffff, mx[i], _mm512_mask_loadu_ps(mx[i], m, xp));
  });
#pragma GCC unroll 4
  for (int i = 0; i < QB; ++i) {
    max_score[i] = _mm512_set1_ps(reduce_max16(mx[i]));
    sum[i] = _mm512_setzero_ps();
  }
  each_chunk([&](int i, __mmask16 m, float* xp) {
    const __m512 e = detail::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xp), max_score[i]));
    _mm512_mask_storeu_ps(xp, m, e);
    sum[i] = _mm512_add_ps(sum[i], _mm512_maskz_mov_ps(m, e));
  });
#pragma GCC unroll 4
  for (int i = 0; i < QB; ++i) inv_sum[i] = _mm512_set1_ps(1.0f / detail::reduce16(sum[i]));
  each_chunk([&](int i, __mmask16 m, float* xp) {
    _mm512_mask_storeu_ps(xp, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xp), inv_sum[i]));
  });
}

// out_i[d] = sum_p w_i[p] * v_p[d] over p < n_keys[i] (ascending, non-decreasing in i) for QB
// queries (w_i at w + i * w_stride, out_i at out + i * out_stride): for each query one fused
// multiply-add per key in ascending p, accumulated in registers; the queries share the loads of
// the values.
template <int QB>
void weighted_sum_block(const float* w, std::int64_t w_stride, const int* n_keys, const float* v,
                        std::int64_t stride, int head_dim, float* out, std::int64_t out_stride) {
  for (int d = 0; d < head_dim; d += 64) {
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) m[c] = detail::tail_mask(detail::max_of(0, head_dim - d - 16 * c));
    __m512 o[QB][4];
#pragma GCC unroll 4
    for (int i = 0; i < QB; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = _mm512_setzero_ps();
    auto accumulate = [&](int p, int first_query) {
      const float* vp = v + p * stride + d;
      __m512 vv[4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) vv[c] = _mm512_maskz_loadu_ps(m[c], vp + 16 * c);
#pragma GCC unroll 4
      for (int i = 0; i < QB; ++i) {
        if (i < first_query) continue;
        const __m512 wp = _mm512_set1_ps(w[i * w_stride + p]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) o[i][c] = _mm512_fmadd_ps(wp, vv[c], o[i][c]);
      }
    };
    int p = 0;
    for (; p < n_keys[0]; ++p) accumulate(p, 0);
    // Keys seen only by the later queries of the block.
    for (int first = 1; first < QB; ++first)
      for (; p < n_keys[first]; ++p) accumulate(p, first);
#pragma GCC unroll 4
    for (int i = 0; i < QB; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c)
        _mm512_mask_storeu_ps(out + i * out_stride + d + 16 * c, m[c], o[i][c]);
  }
}

// Where a head's queries, keys, values and outputs are: rows of key_dim (q, k) and value_dim
// (v, out) floats at these strides.
struct HeadRows {
  std::int64_t q_stride, k_stride, v_stride, out_stride;
  int key_dim, value_dim;
};

template <int QB>
void attend_block(const float* q, const float* k, const float* v, const HeadRows& r,
                  const int* n_keys, float scale, float* scores, std::int64_t s_stride,
                  float* out) {
  scores_block<QB>(q, r.q_stride, k, r.k_stride, r.key_dim, n_keys[QB - 1], scale, scores,
                   s_stride);
  softmax_rows<QB>(scores, s_stride, n_keys);
  weighted_sum_block<QB>(scores, s_stride, n_keys, v, r.v_stride, r.value_dim, out, r.out_stride);
}
#else
// Where a head's queries, keys and values are (one query at a time: no query or output strides).
struct HeadRows {
  std::int64_t k_stride, v_stride;
  int key_dim, value_dim;
};

// One query at a time: dot products, softmax (ops.h, a sequential sum), repeated axpy.
void attend_one(const float* q, const float* k, const float* v, const HeadRows& r, int n_keys,
                float scale, float* scores, float* out) {
  for (int p = 0; p < n_keys; ++p)
    scores[p] = detail::dot_f32(q, k + p * r.k_stride, r.key_dim) * scale;
  softmax(scores, n_keys);
  for (int d = 0; d < r.value_dim; ++d) out[d] = 0.f;
  for (int p = 0; p < n_keys; ++p) detail::axpy(scores[p], v + p * r.v_stride, out, r.value_dim);
}
#endif

}  // namespace

void attention(const float* q, int n_tokens, int n_heads, int n_kv_heads, int key_dim,
               int value_dim, const float* k, const float* v, int start, float* out) {
  attention_strided(q, n_tokens, n_heads, n_kv_heads, key_dim, value_dim, k,
                    static_cast<std::int64_t>(n_kv_heads) * key_dim, v,
                    static_cast<std::int64_t>(n_kv_heads) * value_dim,
                    1.0f / __builtin_sqrtf(static_cast<float>(key_dim)), start, out);
}

void attention_strided(const float* q, int n_tokens, int n_heads, int n_kv_heads, int key_dim,
                       int value_dim, const float* k, std::int64_t k_stride, const float* v,
                       std::int64_t v_stride, float scale, int start, float* out) {
  const int group = n_heads / n_kv_heads;
  const std::int64_t q_stride = static_cast<std::int64_t>(n_heads) * key_dim;
  const std::int64_t out_stride = static_cast<std::int64_t>(n_heads) * value_dim;
  const int n_blocks = (n_tokens + kQueryBlock - 1) / kQueryBlock;
  const int n_units = n_blocks * n_heads;
  const std::int64_t work = static_cast<std::int64_t>(n_tokens) * n_heads * (start + n_tokens) *
                            detail::max_of(key_dim, value_dim);
#ifdef SPECRUN_CPU_AVX512
  const HeadRows rows{q_stride, k_stride, v_stride, out_stride, key_dim, value_dim};
#else
  const HeadRows rows{k_stride, v_stride, key_dim, value_dim};
#endif

  // Units: (head, block of kQueryBlock consecutive queries), head-major: the units a thread
  // takes one after the other mostly read the same head's keys and values.
#pragma omp parallel for schedule(dynamic, 1) if (work >= (1 << 15))
  for (int unit = 0; unit < n_units; ++unit) {
    const int h = unit / n_blocks;
    const int t0 = unit % n_blocks * kQueryBlock;
    const int nq = detail::min_of(kQueryBlock, n_tokens - t0);
    const int kv = h / group;
    int n_keys[kQueryBlock];
    for (int i = 0; i < nq; ++i) n_keys[i] = start + t0 + i + 1;
    const std::int64_t s_stride = n_keys[nq - 1];
    static thread_local detail::Scratch<float> scores_buffer;
    float* scores = scores_buffer.get(static_cast<std::size_t>(s_stride) * kQueryBlock);

    const float* qh = q + t0 * q_stride + static_cast<std::int64_t>(h) * key_dim;
    const float* kh = k + static_cast<std::int64_t>(kv) * key_dim;
    const float* vh = v + static_cast<std::int64_t>(kv) * value_dim;
    float* oh = out + t0 * out_stride + static_cast<std::int64_t>(h) * value_dim;
#ifdef SPECRUN_CPU_AVX512
    switch (nq) {
      case 4:
        attend_block<4>(qh, kh, vh, rows, n_keys, scale, scores, s_stride, oh);
        break;
      case 3:
        attend_block<3>(qh, kh, vh, rows, n_keys, scale, scores, s_stride, oh);
        break;
      case 2:
        attend_block<2>(qh, kh, vh, rows, n_keys, scale, scores, s_stride, oh);
        break;
      default:
        attend_block<1>(qh, kh, vh, rows, n_keys, scale, scores, s_stride, oh);
        break;
    }
#else
    for (int i = 0; i < nq; ++i)
      attend_one(qh + i * q_stride, kh, vh, rows, n_keys[i], scale, scores, oh + i * out_stride);
#endif
  }
}

}  // namespace specrun::cpu::SPECRUN_ISA
