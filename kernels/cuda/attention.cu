// attention: causal grouped-query attention of new tokens over their sequences' KV caches.
// Layout: q, out [n_tokens, n_heads * head_dim] float32; slots [n_tokens] (device) give each
// token's cache (float32 [n_layers][2][capacity][n_kv_heads][head_dim]) and position p; the
// token attends to positions 0..p of kv head h / (n_heads / n_kv_heads), each read from its
// slot (KvSlot: a token-tree node reads its ancestors' slots past the tree's start). A node's
// keys are then exactly those of a sequential decode of its path, in the same order.
//
// One block of kWarps warps per (token, head). Warp w takes the keys in groups of kGroup: w's
// group holds positions kGroup * w .. kGroup * w + kGroup - 1, then the same kGroup * kWarps
// further on, and so on. For each group the lanes split head_dim (lane d, d + 32, ...), load the
// group's keys together (kGroup loads in flight rather than one), reduce the kGroup dot products
// with butterflies, and update the warp's online softmax once (running max, sum and weighted V,
// the group's terms added in position order). The warps' states are merged in warp order. The
// order of every operation depends only on p and head_dim, not on the batch: decode and verify
// windows give bit-identical outputs for the same token.
// attention_rope rotates each query as it loads it (RoPE with a rope_table table, rope.cuh):
// bitwise what rope_apply on q followed by attention gives, without the launch; q is left as
// it was.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope.cuh"

namespace specrun::cuda {
namespace {

using detail::kWarp;
constexpr int kWarps = 8;
constexpr int kGroup = 4;                      // keys per warp step
constexpr int kPerLane = kMaxHeadDim / kWarp;  // head_dim elements per lane (at most)

__global__ void __launch_bounds__(kWarps* kWarp)
    attention_kernel(const float* __restrict__ q, int n_heads, int n_kv_heads, int head_dim,
                     const float* __restrict__ cos_sin, const KvSlot* __restrict__ slots, int layer,
                     float scale, float* __restrict__ out) {
  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float warp_out[kWarps][kMaxHeadDim];
  detail::wait_for_prior_grids();  // a dependent launch: q, k and v have been written
  detail::allow_dependents();      // o_proj's GEMV may start fetching its weights
  const int t = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const int kv = h / (n_heads / n_kv_heads);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const KvSlot s = slots[t];
  const std::size_t row = static_cast<std::size_t>(n_kv_heads) * head_dim;
  const std::size_t plane = static_cast<std::size_t>(s.capacity) * row;
  const float* k = s.cache + static_cast<std::size_t>(layer) * 2 * plane + kv * head_dim;
  const float* v = k + plane;
  const std::size_t q_stride = static_cast<std::size_t>(n_heads) * head_dim;
  const float* qh = q + t * q_stride + static_cast<std::size_t>(h) * head_dim;

  // The query, rotated here when given the table (cos_sin: this token's row of it).
  const float* cs = cos_sin != nullptr ? cos_sin + static_cast<std::size_t>(t) * head_dim : nullptr;
  float qr[kPerLane], acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + c * kWarp;
    qr[c] = d >= head_dim   ? 0.0f
            : cs != nullptr ? detail::rope_element(qh, d, head_dim / 2, cs)
                            : qh[d];
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int p0 = warp * kGroup; p0 <= s.position; p0 += kWarps * kGroup) {
    // The group's slots: itself in the chain, the path's entry in a token tree. Positions past
    // the token's own are not read and weigh nothing.
    int at[kGroup];
    bool valid[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const int p = p0 + j;
      valid[j] = p <= s.position;
      const int pp = valid[j] ? p : p0;
      at[j] = s.path == nullptr || pp < s.tree_base ? pp : s.path[pp - s.tree_base];
    }
    float kr[kGroup][kPerLane];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const float* kp = k + static_cast<std::size_t>(at[j]) * row;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        const int d = lane + c * kWarp;
        kr[j][c] = d < head_dim && valid[j] ? kp[d] : 0.0f;
      }
    }
    float score[kGroup];
    float m_new = m;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) dot = fmaf(qr[c], kr[j][c], dot);
      score[j] = detail::warp_sum(dot) * scale;
      if (valid[j]) m_new = fmaxf(m_new, score[j]);
    }
    const float correction = expf(m - m_new);
    float weight[kGroup];
    l *= correction;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      weight[j] = valid[j] ? expf(score[j] - m_new) : 0.0f;
      l += weight[j];
    }
    float vr[kGroup][kPerLane];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const float* vp = v + static_cast<std::size_t>(at[j]) * row;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        const int d = lane + c * kWarp;
        vr[j][c] = d < head_dim && valid[j] ? vp[d] : 0.0f;
      }
    }
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      float a = acc[c] * correction;
#pragma unroll
      for (int j = 0; j < kGroup; ++j) a = fmaf(weight[j], vr[j][c], a);
      acc[c] = a;
    }
    m = m_new;
  }
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + c * kWarp;
    if (d < head_dim) warp_out[warp][d] = acc[c];
  }
  __syncthreads();
  // Merge in warp order. Warp 0 always saw key 0, so the global max is finite; a warp that saw
  // no key (a short context) has max -inf and weighs exp(-inf) = 0.
  float m_all = warp_max[0];
  for (int w = 1; w < kWarps; ++w) m_all = fmaxf(m_all, warp_max[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) l_all += warp_sum[w] * expf(warp_max[w] - m_all);
  const float inv = 1.0f / l_all;
  float* oh = out + t * q_stride + static_cast<std::size_t>(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += warp_out[w][d] * expf(warp_max[w] - m_all);
    oh[d] = o * inv;
  }
}

void launch_attention(const char* op, cudaStream_t stream, const float* q, int n_tokens,
                      int n_heads, int n_kv_heads, int head_dim, const float* cos_sin,
                      const KvSlot* slots, int layer, float* out, bool dependent) {
  SPEC_CHECK(q != nullptr && slots != nullptr && out != nullptr && q != out,
             "cuda::" << op << ": needs q, slots and a separate output");
  SPEC_CHECK(n_tokens >= 1 && n_heads >= 1 && n_kv_heads >= 1 && layer >= 0,
             "cuda::" << op << ": bad sizes: tokens " << n_tokens << ", heads " << n_heads
                      << ", kv heads " << n_kv_heads << ", layer " << layer);
  SPEC_CHECK(n_heads % n_kv_heads == 0, "cuda::" << op << ": " << n_heads
                                                 << " query heads are not a multiple of "
                                                 << n_kv_heads << " kv heads");
  SPEC_CHECK(head_dim >= 1 && head_dim <= kMaxHeadDim,
             "cuda::" << op << ": head_dim " << head_dim << " is outside 1.." << kMaxHeadDim
                      << " (raise kMaxHeadDim in kernels/cuda/ops.h)");
  const std::size_t blocks = static_cast<std::size_t>(n_tokens) * n_heads;
  SPEC_CHECK(blocks <= 2147483647u, "cuda::" << op << ": too many (token, head) pairs: " << blocks);
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  detail::launch_dependent(dependent, attention_kernel, dim3(static_cast<unsigned>(blocks)),
                           dim3(kWarps * kWarp), 0, stream, q, n_heads, n_kv_heads, head_dim,
                           cos_sin, slots, layer, scale, out);
}

}  // namespace

void attention(cudaStream_t stream, const float* q, int n_tokens, int n_heads, int n_kv_heads,
               int head_dim, const KvSlot* slots, int layer, float* out) {
  launch_attention("attention", stream, q, n_tokens, n_heads, n_kv_heads, head_dim, nullptr, slots,
                   layer, out, false);
}

void attention_rope(cudaStream_t stream, const float* q, int n_tokens, int n_heads, int n_kv_heads,
                    int head_dim, const float* cos_sin, const KvSlot* slots, int layer, float* out,
                    bool dependent) {
  CUDA_OP_CHECK("attention_rope", cos_sin != nullptr && head_dim % 2 == 0,
                "needs the RoPE table and an even head_dim (" << head_dim << ")");
  launch_attention("attention_rope", stream, q, n_tokens, n_heads, n_kv_heads, head_dim, cos_sin,
                   slots, layer, out, dependent);
}

}  // namespace specrun::cuda
