// latent_attention: causal attention whose keys and values may differ in width, with the values
// optionally inside the key rows and an explicit softmax scale: multi-head latent attention's
// absorbed form (model/deepseek_model.h: one latent kv head of kv_lora_rank + qk_rope_head_dim
// floats whose first kv_lora_rank floats are the values). Its cache has the split layout (ops.h
// KvSlot): per layer [capacity][key_floats] then [capacity][value_floats] (value_floats 0 when
// the values are inside the keys). latent_kv_append writes the new tokens' rows there and
// kv_keep_split compacts it after a verified tree.
//
// Written for correctness only (built without a GPU; docs/gpu.md says what the first GPU run
// must check), beside the tuned grouped-query kernels of attention.cu, which stay as they are
// for key_dim == value_dim. One block of kThreads threads per (token, head): the query head in
// shared memory; the positions 0..p one after the other, each score reduced over the threads
// (lane partial sums over d = lane, lane + kThreads, ...; butterflies within a warp; the warps'
// sums added in warp order by every thread), then one online-softmax update (running max, sum,
// weighted values; each thread owns value elements tid, tid + kThreads, ...). The order of every
// operation depends only on p and the head sizes, never on the batch: batch-invariant, as the
// grouped-query kernel.
#include "kernels/cuda/attention_latent.h"
#include "kernels/cuda/device_util.cuh"

namespace specrun::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = kMaxLatentDim / kThreads;  // value elements a thread owns

__device__ int slot_of(const KvSlot& s, int p) {
  return s.path == nullptr || p < s.tree_base ? p : s.path[p - s.tree_base];
}

__global__ void latent_attention_kernel(const float* __restrict__ q, int n_heads, int group,
                                        int key_dim, int value_dim, int key_floats,
                                        int value_floats, bool values_in_keys, float scale,
                                        const KvSlot* __restrict__ slots, int layer,
                                        float* __restrict__ out) {
  extern __shared__ float qs[];  // [key_dim]
  __shared__ float partial[2][kWarps];
  const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const KvSlot s = slots[t];
  const float* qh = q + (static_cast<std::size_t>(t) * n_heads + h) * key_dim;
  for (int d = tid; d < key_dim; d += kThreads) qs[d] = qh[d];
  __syncthreads();
  const int kv_head = h / group;
  const std::size_t cap = static_cast<std::size_t>(s.capacity);
  const float* keys = s.cache + static_cast<std::size_t>(layer) * cap * (key_floats + value_floats);
  const float* values = keys + cap * key_floats;
  float acc[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int p = 0; p <= s.position; ++p) {
    const std::size_t slot = static_cast<std::size_t>(slot_of(s, p));
    const float* k = keys + slot * key_floats + static_cast<std::size_t>(kv_head) * key_dim;
    const float* v = values_in_keys ? k
                                    : values + slot * value_floats +
                                          static_cast<std::size_t>(kv_head) * value_dim;
    float dot = 0.0f;
    for (int d = tid; d < key_dim; d += kThreads) dot = fmaf(qs[d], k[d], dot);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    // Two buffers: a warp may write position p + 1's partial sum while a slower warp still reads
    // position p's.
    float* part = partial[p & 1];
    if (lane == 0) part[warp] = dot;
    __syncthreads();
    float score = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) score += part[w];
    score *= scale;
    const float m_new = fmaxf(m, score);
    const float alpha = expf(m - m_new);  // 0 for the first position (m = -inf)
    const float weight = expf(score - m_new);
    l = l * alpha + weight;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int d = tid + i * kThreads;
      if (d < value_dim) acc[i] = acc[i] * alpha + weight * v[d];
    }
    m = m_new;
  }
  float* o = out + (static_cast<std::size_t>(t) * n_heads + h) * value_dim;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int d = tid + i * kThreads;
    if (d < value_dim) o[d] = acc[i] / l;
  }
}

__global__ void latent_kv_append_kernel(const float* __restrict__ k_new,
                                        const float* __restrict__ v_new, int key_floats,
                                        int value_floats, const KvSlot* __restrict__ slots,
                                        int layer, std::size_t n) {
  const int row = key_floats + value_floats;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t t = i / row;
    const int c = static_cast<int>(i % row);
    const KvSlot s = slots[t];
    const std::size_t cap = static_cast<std::size_t>(s.capacity);
    float* keys = s.cache + static_cast<std::size_t>(layer) * cap * row;
    const std::size_t slot = static_cast<std::size_t>(s.slot);
    if (c < key_floats)
      keys[slot * key_floats + c] = k_new[t * key_floats + c];
    else
      keys[cap * key_floats + slot * value_floats + (c - key_floats)] =
          v_new[t * value_floats + (c - key_floats)];
  }
}

template <bool kGather>
__global__ void kv_keep_split_kernel(float* cache, int capacity, int key_floats, int value_floats,
                                     int first, const std::int32_t* __restrict__ rows, int count,
                                     float* scratch, std::size_t n) {
  const int row = key_floats + value_floats;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % row);
    const std::size_t j = i / row % count;
    const std::size_t layer = i / row / count;
    float* keys = cache + layer * static_cast<std::size_t>(capacity) * row;
    const std::size_t slot =
        static_cast<std::size_t>(first) + (kGather ? static_cast<std::size_t>(rows[j]) : j);
    float* at = c < key_floats ? keys + slot * key_floats + c
                               : keys + static_cast<std::size_t>(capacity) * key_floats +
                                     slot * value_floats + (c - key_floats);
    if (kGather)
      scratch[i] = *at;
    else
      *at = scratch[i];
  }
}

}  // namespace

void latent_kv_append(cudaStream_t stream, const float* k_new, const float* v_new, int n_tokens,
                      int key_floats, int value_floats, const KvSlot* slots, int layer) {
  CUDA_OP_CHECK("latent_kv_append",
                k_new != nullptr && (v_new != nullptr || value_floats == 0) && slots != nullptr,
                "needs keys, values (unless inside the keys) and slots");
  CUDA_OP_CHECK("latent_kv_append",
                n_tokens >= 1 && key_floats >= 1 && value_floats >= 0 && layer >= 0,
                "bad sizes: tokens " << n_tokens << ", key floats " << key_floats
                                     << ", value floats " << value_floats << ", layer " << layer);
  const std::size_t n = static_cast<std::size_t>(n_tokens) * (key_floats + value_floats);
  latent_kv_append_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(
      k_new, v_new, key_floats, value_floats, slots, layer, n);
  CUDA_CHECK_LAUNCH();
}

void latent_attention(cudaStream_t stream, const float* q, int n_tokens, int n_heads,
                      int n_kv_heads, int key_dim, int value_dim, float scale, bool values_in_keys,
                      const KvSlot* slots, int layer, float* out) {
  CUDA_OP_CHECK("latent_attention", q != nullptr && slots != nullptr && out != nullptr,
                "needs queries, slots and the output");
  CUDA_OP_CHECK("latent_attention",
                n_tokens >= 1 && n_tokens <= 65535 && n_heads >= 1 && n_heads <= 65535 &&
                    n_kv_heads >= 1 && n_heads % n_kv_heads == 0 && key_dim >= 1 &&
                    key_dim <= kMaxLatentDim && value_dim >= 1 && value_dim <= kMaxLatentDim &&
                    layer >= 0,
                "bad sizes: tokens " << n_tokens << ", heads " << n_heads << " over " << n_kv_heads
                                     << ", key_dim " << key_dim << ", value_dim " << value_dim
                                     << " (at most " << kMaxLatentDim << ")");
  CUDA_OP_CHECK("latent_attention", !values_in_keys || (n_kv_heads == 1 && value_dim <= key_dim),
                "values inside the keys need one kv head and value_dim <= key_dim");
  CUDA_OP_CHECK("latent_attention", scale > 0.0f, "needs a positive softmax scale");
  const int key_floats = n_kv_heads * key_dim;
  const int value_floats = values_in_keys ? 0 : n_kv_heads * value_dim;
  const std::size_t shared = static_cast<std::size_t>(key_dim) * sizeof(float);
  latent_attention_kernel<<<dim3(n_heads, n_tokens), kThreads, shared, stream>>>(
      q, n_heads, n_heads / n_kv_heads, key_dim, value_dim, key_floats, value_floats,
      values_in_keys, scale, slots, layer, out);
  CUDA_CHECK_LAUNCH();
}

void kv_keep_split(cudaStream_t stream, float* cache, int capacity, int layers, int key_floats,
                   int value_floats, int first, const std::int32_t* rows, int count,
                   float* scratch) {
  CUDA_OP_CHECK("kv_keep_split",
                cache != nullptr && scratch != nullptr && (rows != nullptr || count == 0),
                "needs the cache, the rows and scratch");
  CUDA_OP_CHECK("kv_keep_split",
                layers >= 1 && key_floats >= 1 && value_floats >= 0 && first >= 0 && count >= 0 &&
                    first + count <= capacity,
                "bad sizes: layers " << layers << ", key floats " << key_floats << ", value floats "
                                     << value_floats << ", first " << first << ", count " << count
                                     << ", capacity " << capacity);
  if (count == 0) return;
  const std::size_t n = static_cast<std::size_t>(layers) * count *
                        (static_cast<std::size_t>(key_floats) + value_floats);
  kv_keep_split_kernel<true><<<detail::grid_for(n, 256), 256, 0, stream>>>(
      cache, capacity, key_floats, value_floats, first, rows, count, scratch, n);
  CUDA_CHECK_LAUNCH();
  kv_keep_split_kernel<false><<<detail::grid_for(n, 256), 256, 0, stream>>>(
      cache, capacity, key_floats, value_floats, first, rows, count, scratch, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
