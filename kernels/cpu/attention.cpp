// attention: causal grouped-query attention of a window of new tokens over a float32 KV cache.
// Layout: q, out [n_tokens, n_heads*head_dim]; k, v [positions, n_kv_heads, head_dim]. Query i
// is at position start + i and attends to keys 0..start+i. Threads split (token, head) pairs;
// each pair keeps its scores in a per-thread buffer that only grows.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

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
    float max_score = -INFINITY;
    for (int p = 0; p < n_keys; ++p) {
      scores[p] = detail::dot_f32(qh, kh + p * kv_stride, head_dim) * scale;
      max_score = std::max(max_score, scores[p]);
    }
    float sum = 0.f;
    for (int p = 0; p < n_keys; ++p) {
      scores[p] = std::exp(scores[p] - max_score);
      sum += scores[p];
    }
    float* oh = out + t * q_stride + static_cast<std::int64_t>(h) * head_dim;
    std::fill(oh, oh + head_dim, 0.f);
    const float inv_sum = 1.0f / sum;
    for (int p = 0; p < n_keys; ++p)
      detail::axpy(scores[p] * inv_sum, vh + p * kv_stride, oh, head_dim);
  }
}

}  // namespace specrun::cpu
