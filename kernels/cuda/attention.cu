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
// group's keys and values together (2 kGroup loads in flight: one memory latency a group, the
// values not waiting for the scores), reduce the kGroup dot products with butterflies, and
// update the warp's online softmax once (running max, sum and weighted V, the group's terms
// added in position order). Registers are sized to head_dim (1, 2, 4 or 8 elements a lane). The
// warps' states are merged in warp order. The order of every operation depends only on p and
// head_dim, not on the batch: decode and verify windows give bit-identical outputs for the same
// token. Long contexts split (split_partial, ops.h; the backend's decode and verify passes): a
// token at position p >= kAttentionSplitPositions is taken by p / kAttentionSplitPositions + 1
// blocks, the c-th attending to positions [c S, (c + 1) S) (S = kAttentionSplitPositions) as above
// and writing its unnormalised state (max, sum, weighted V) to `partial`; attention_merge then adds
// the chunks' states in chunk order. Which chunks there are depends only on p, so a token's
// output is still the same in any window; tokens before S take one block as without a split.
// The states of tokens x heads x chunks outgrow any fixed buffer at long contexts (512 tokens x
// 32 heads x 128 chunks of 130 floats: 1.1 GB at 32K positions), so the tokens go in groups
// whose states fit the caller's buffer, each group's attention and merge launched in turn.
// attention_rope rotates each query as it loads it (RoPE with a rope_table table, rope.cuh):
// bitwise what rope_apply on q followed by attention gives, without the launch; q is left as
// it was.
#include <algorithm>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope.cuh"

namespace specrun::cuda {
namespace {

using detail::kWarp;
constexpr int kWarps = 8;
constexpr int kGroup = 4;                       // keys per warp step
constexpr int kMaxLanes = kMaxHeadDim / kWarp;  // head_dim elements per lane (at most)
constexpr int kMergeThreads = 128;
static_assert(kAttentionSplitPositions % (kWarps * kGroup) == 0,
              "a chunk starts every warp at its first group");

// kLanes: head_dim elements per lane (head_dim <= 32 kLanes); registers sized to it, the
// arithmetic the same for any kLanes that covers head_dim.
template <int kLanes>
__global__ void __launch_bounds__(kWarps* kWarp)
    attention_kernel(const float* __restrict__ q, int n_heads, int n_kv_heads, int head_dim,
                     const float* __restrict__ cos_sin, const KvSlot* __restrict__ slots, int layer,
                     float scale, float* __restrict__ out, float* __restrict__ partial,
                     int max_chunks) {
  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float warp_out[kWarps][kMaxHeadDim];
  detail::wait_for_prior_grids();  // a dependent launch: q, k and v have been written
  detail::allow_dependents();      // o_proj's GEMV may start fetching its weights
  const int t = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const int kv = h / (n_heads / n_kv_heads);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const KvSlot s = slots[t];
  // This block's chunk of the positions 0..p: all of them, or (split) chunk blockIdx.y; a block
  // past the token's chunks has nothing to do.
  const int n_chunks = partial != nullptr ? s.position / kAttentionSplitPositions + 1 : 1;
  const int chunk = static_cast<int>(blockIdx.y);
  if (n_chunks > max_chunks) __trap();  // the caller's split is too small: fail loudly
  if (chunk >= n_chunks) return;
  const int first = chunk * kAttentionSplitPositions;
  const int last =
      n_chunks == 1 ? s.position : min(s.position, first + kAttentionSplitPositions - 1);
  const std::size_t row = static_cast<std::size_t>(n_kv_heads) * head_dim;
  const std::size_t plane = static_cast<std::size_t>(s.capacity) * row;
  const float* k = s.cache + static_cast<std::size_t>(layer) * 2 * plane + kv * head_dim;
  const float* v = k + plane;
  const std::size_t q_stride = static_cast<std::size_t>(n_heads) * head_dim;
  const float* qh = q + t * q_stride + static_cast<std::size_t>(h) * head_dim;

  // The query, rotated here when given the table (cos_sin: this token's row of it).
  const float* cs = cos_sin != nullptr ? cos_sin + static_cast<std::size_t>(t) * head_dim : nullptr;
  float qr[kLanes], acc[kLanes];
#pragma unroll
  for (int c = 0; c < kLanes; ++c) {
    const int d = lane + c * kWarp;
    qr[c] = d >= head_dim   ? 0.0f
            : cs != nullptr ? detail::rope_element(qh, d, head_dim / 2, cs)
                            : qh[d];
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int p0 = first + warp * kGroup; p0 <= last; p0 += kWarps * kGroup) {
    // The group's slots: itself in the chain, the path's entry in a token tree. Positions past
    // the token's own (or the chunk's last) are not read and weigh nothing.
    int at[kGroup];
    bool valid[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const int p = p0 + j;
      valid[j] = p <= last;
      const int pp = valid[j] ? p : p0;
      at[j] = s.path == nullptr || pp < s.tree_base ? pp : s.path[pp - s.tree_base];
    }
    // The group's keys and values, all loads in flight together (the values do not wait for
    // the scores).
    float kr[kGroup][kLanes], vr[kGroup][kLanes];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const float* kp = k + static_cast<std::size_t>(at[j]) * row;
      const float* vp = v + static_cast<std::size_t>(at[j]) * row;
#pragma unroll
      for (int c = 0; c < kLanes; ++c) {
        const int d = lane + c * kWarp;
        kr[j][c] = d < head_dim && valid[j] ? kp[d] : 0.0f;
        vr[j][c] = d < head_dim && valid[j] ? vp[d] : 0.0f;
      }
    }
    float score[kGroup];
    float m_new = m;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kLanes; ++c) dot = fmaf(qr[c], kr[j][c], dot);
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
#pragma unroll
    for (int c = 0; c < kLanes; ++c) {
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
  for (int c = 0; c < kLanes; ++c) {
    const int d = lane + c * kWarp;
    if (d < head_dim) warp_out[warp][d] = acc[c];
  }
  __syncthreads();
  // Merge in warp order. Warp 0 always saw the chunk's first key, so the max is finite; a warp
  // that saw no key (a short context) has max -inf and weighs exp(-inf) = 0.
  float m_all = warp_max[0];
  for (int w = 1; w < kWarps; ++w) m_all = fmaxf(m_all, warp_max[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) l_all += warp_sum[w] * expf(warp_max[w] - m_all);
  if (n_chunks > 1) {  // this chunk's state, for attention_merge
    float* st = partial + (static_cast<std::size_t>(blockIdx.x) * max_chunks + chunk) *
                              (static_cast<std::size_t>(head_dim) + 2);
    if (threadIdx.x == 0) {
      st[0] = m_all;
      st[1] = l_all;
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
      float o = 0.0f;
      for (int w = 0; w < kWarps; ++w) o += warp_out[w][d] * expf(warp_max[w] - m_all);
      st[2 + d] = o;
    }
    return;
  }
  const float inv = 1.0f / l_all;
  float* oh = out + t * q_stride + static_cast<std::size_t>(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += warp_out[w][d] * expf(warp_max[w] - m_all);
    oh[d] = o * inv;
  }
}

// The chunks' states of each split (token, head), added in chunk order: max, then the sum and
// the weighted V rescaled to it, then divided by the sum. One block per (token, head); tokens
// with one chunk were written by attention_kernel.
__global__ void __launch_bounds__(kMergeThreads)
    attention_merge_kernel(int n_heads, int head_dim, const KvSlot* __restrict__ slots,
                           const float* __restrict__ partial, int max_chunks,
                           float* __restrict__ out) {
  detail::wait_for_prior_grids();  // a dependent launch: the chunks' states have been written
  detail::allow_dependents();      // o_proj's GEMV may start fetching its weights
  const int t = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const int n_chunks = slots[t].position / kAttentionSplitPositions + 1;
  if (n_chunks == 1) return;
  const std::size_t width = static_cast<std::size_t>(head_dim) + 2;
  const float* st = partial + static_cast<std::size_t>(blockIdx.x) * max_chunks * width;
  float m_all = st[0];
  for (int c = 1; c < n_chunks; ++c) m_all = fmaxf(m_all, st[c * width]);
  float l_all = 0.0f;
  for (int c = 0; c < n_chunks; ++c) l_all += st[c * width + 1] * expf(st[c * width] - m_all);
  const float inv = 1.0f / l_all;
  float* oh = out + (static_cast<std::size_t>(t) * n_heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int c = 0; c < n_chunks; ++c) o += st[c * width + 2 + d] * expf(st[c * width] - m_all);
    oh[d] = o * inv;
  }
}

void launch_attention(const char* op, cudaStream_t stream, const float* q, int n_tokens,
                      int n_heads, int n_kv_heads, int head_dim, const float* cos_sin,
                      const KvSlot* slots, int layer, float* out, const AttentionSplit& split,
                      bool dependent) {
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
  const int group = attention_split_group(n_tokens, n_heads, head_dim, split);
  const std::size_t blocks = static_cast<std::size_t>(group) * n_heads;
  SPEC_CHECK(blocks <= 2147483647u, "cuda::" << op << ": too many (token, head) pairs: " << blocks);
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const int chunks = split.partial != nullptr ? split.chunks : 1;
  // The kernel whose registers fit head_dim: 1, 2, 4 or 8 elements per lane.
  const int lanes = (head_dim + kWarp - 1) / kWarp;
  auto* kernel = lanes <= 1   ? &attention_kernel<1>
                 : lanes <= 2 ? &attention_kernel<2>
                 : lanes <= 4 ? &attention_kernel<4>
                              : &attention_kernel<kMaxLanes>;
  const std::size_t q_stride = static_cast<std::size_t>(n_heads) * head_dim;
  // Groups of tokens whose chunks' states fit the buffer, one after another: a group's attention
  // waits for the previous group's merge (stream order, or its grid-dependency wait in a
  // dependent launch) before it writes the states again.
  for (int t0 = 0; t0 < n_tokens; t0 += group) {
    const int count = std::min(group, n_tokens - t0);
    const unsigned grid = static_cast<unsigned>(count) * static_cast<unsigned>(n_heads);
    const float* qg = q + t0 * q_stride;
    const float* cs =
        cos_sin != nullptr ? cos_sin + static_cast<std::size_t>(t0) * head_dim : nullptr;
    float* og = out + t0 * q_stride;
    detail::launch_dependent(dependent, kernel, dim3(grid, static_cast<unsigned>(chunks)),
                             dim3(kWarps * kWarp), 0, stream, qg, n_heads, n_kv_heads, head_dim, cs,
                             slots + t0, layer, scale, og, split.partial, chunks);
    // Tokens split over several blocks: their chunks' states merged (a kernel after a kernel: a
    // dependent launch whenever the attention was one).
    if (chunks > 1)
      detail::launch_dependent(dependent, attention_merge_kernel, dim3(grid), dim3(kMergeThreads),
                               0, stream, n_heads, head_dim, slots + t0,
                               static_cast<const float*>(split.partial), chunks, og);
  }
}

}  // namespace

int attention_chunks(int max_position) {
  const int needed = std::max(0, max_position) / kAttentionSplitPositions + 1;
  int chunks = 1;
  while (chunks < needed) chunks *= 2;
  return chunks;
}

std::size_t attention_split_floats(int n_tokens, int n_heads, int head_dim, int chunks) {
  return static_cast<std::size_t>(n_tokens) * n_heads * chunks *
         (static_cast<std::size_t>(head_dim) + 2);
}

int attention_split_group(int n_tokens, int n_heads, int head_dim, const AttentionSplit& split) {
  SPEC_CHECK(
      split.chunks >= 1 && split.chunks <= 65535 && (split.partial != nullptr || split.chunks == 1),
      "cuda::attention: a split needs its states' buffer and 1..65535 chunks, got "
          << split.chunks);
  if (split.partial == nullptr) return n_tokens;
  const std::size_t one = attention_split_floats(1, n_heads, head_dim, split.chunks);
  SPEC_CHECK(split.floats >= one, "cuda::attention: the split's buffer of "
                                      << split.floats << " floats is smaller than one token's "
                                      << split.chunks << " chunks' states (" << one << ")");
  return static_cast<int>(
      std::min<std::size_t>(static_cast<std::size_t>(n_tokens), split.floats / one));
}

void attention(cudaStream_t stream, const float* q, int n_tokens, int n_heads, int n_kv_heads,
               int head_dim, const KvSlot* slots, int layer, float* out, AttentionSplit split) {
  launch_attention("attention", stream, q, n_tokens, n_heads, n_kv_heads, head_dim, nullptr, slots,
                   layer, out, split, false);
}

void attention_rope(cudaStream_t stream, const float* q, int n_tokens, int n_heads, int n_kv_heads,
                    int head_dim, const float* cos_sin, const KvSlot* slots, int layer, float* out,
                    AttentionSplit split, bool dependent) {
  CUDA_OP_CHECK("attention_rope", cos_sin != nullptr && head_dim % 2 == 0,
                "needs the RoPE table and an even head_dim (" << head_dim << ")");
  launch_attention("attention_rope", stream, q, n_tokens, n_heads, n_kv_heads, head_dim, cos_sin,
                   slots, layer, out, split, dependent);
}

}  // namespace specrun::cuda
