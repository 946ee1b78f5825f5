// Attention whose keys and values differ in width (cuda::latent_attention and its cache ops,
// attention_latent.cu), declared apart from ops.h: built without a GPU, not yet verified on one
// (docs/gpu.md). Same conventions as ops.h (stream-ordered, no synchronisation, float32).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace specrun::cuda {

// Attention whose keys and values differ (multi-head latent attention's absorbed form,
// model/deepseek_model.h), beside the grouped-query kernels of ops.h, which stay for key_dim ==
// value_dim (attention_latent.cu; correctness only, not tuned). Its caches have the split layout:
// per layer [capacity][key_floats] then [capacity][value_floats] (key_floats = n_kv_heads *
// key_dim; value_floats = n_kv_heads * value_dim, or 0 when the values are the first value_dim
// floats of each key row), which is ops.h's KvSlot layout when key_floats == value_floats.
inline constexpr int kMaxLatentDim = 1024;  // key_dim and value_dim
// Writes the new tokens' key rows [n_tokens, key_floats] and value rows [n_tokens, value_floats]
// (v_new unused when value_floats is 0) of `layer` at their slots.
void latent_kv_append(cudaStream_t stream, const float* k_new, const float* v_new, int n_tokens,
                      int key_floats, int value_floats, const KvSlot* slots, int layer);
// Causal attention of n_tokens new tokens over their caches (latent_kv_append must have written
// them), tree-aware through KvSlot: q [n_tokens, n_heads * key_dim], out [n_tokens, n_heads *
// value_dim] float32; query head h reads kv head h / (n_heads / n_kv_heads); scores times
// scale (explicit), softmax in float32 (online, positions in order: batch-invariant).
void latent_attention(cudaStream_t stream, const float* q, int n_tokens, int n_heads,
                      int n_kv_heads, int key_dim, int value_dim, float scale, bool values_in_keys,
                      const KvSlot* slots, int layer, float* out);
// kv_keep on a cache of the split layout: slots first + rows[j] move to first + j for j < count,
// every layer's keys and values. rows: device int32, ascending. scratch: layers * count *
// (key_floats + value_floats) floats.
void kv_keep_split(cudaStream_t stream, float* cache, int capacity, int layers, int key_floats,
                   int value_floats, int first, const std::int32_t* rows, int count,
                   float* scratch);

}  // namespace specrun::cuda
