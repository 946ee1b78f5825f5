// CPU compute primitives on raw buffers: the op interface that the CUDA backend mirrors.
//
// These functions know nothing of models, checkpoints or ranks. Every buffer is row-major and
// contiguous unless a stride is given; activations are float32; weights may stay in their storage
// dtype (F32, BF16, F16) and are widened on the fly, never copied to float32 in memory. All
// arithmetic accumulates in float32. Ops that take a noticeable amount of work split it over
// OpenMP threads; the caller chooses the thread count (omp_set_num_threads).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace specrun::cpu {

// Weights of a linear layer packed for matmul (pack_weights): the rows of W [out, in] in
// blocks of kPackRows, each block stored k-major: for every input index k the block's
// kPackRows weights W[row, k] lie together in one 64-byte (BF16, F16) or 128-byte (F32) group.
// A decode step then streams each block contiguously, and a kernel multiplies one group by a
// broadcast x[t, k] into per-row accumulators (no horizontal sums). Storage dtype unchanged;
// rows past `out` in the last block are zeros. Slot s of a group holds row s, except in BF16,
// where slot 2j holds row j and slot 2j + 1 row j + 16 (so that one shift and one mask widen
// the 32 values of a 512-bit load, rows 0-15 and 16-31).
inline constexpr int kPackRows = 32;

// Bytes of a packed [out, in] matrix in dtype t: ceil(out / kPackRows) * kPackRows * in values.
std::size_t packed_weight_bytes(DType t, int out, int in);

// Packs w ([out, in] row-major in t, a PyTorch nn.Linear weight as stored) into dst
// (packed_weight_bytes(t, out, in) bytes; 64-byte alignment is best). Threads split the blocks.
void pack_weights(const void* w, DType t, int out, int in, void* dst);

// Packs two matrices of one shape (an MLP's gate and up) as pairs of blocks for a fused SwiGLU
// matmul (MatmulOutput::swiglu): block 2i is a's block i, block 2i + 1 is b's, each laid out
// as pack_weights lays it out. dst: 2 * packed_weight_bytes(t, out, in) bytes.
void pack_weight_pairs(const void* a, const void* b, DType t, int out, int in, void* dst);

// A packed weight matrix: `data` from pack_weights(w, dtype, out, in, data), or, for a swiglu
// output, from pack_weight_pairs(gate, up, dtype, out, in, data).
struct PackedWeights {
  const void* data;
  DType dtype;
  int out, in;
};

// Linear layer: y[t, o] = sum_i x[t, i] * W[o, i]  (+ bias[o] when bias != nullptr).
//   x:    [n_tokens, w.in] float32.
//   w:    W packed (pack_weights).
//   bias: [w.out] float32, or nullptr.
//   y:    [n_tokens, w.out] float32; must not alias x.
// Up to 12 tokens each weight block is read from memory once for all of them, so scoring k+1
// tokens costs about as much memory traffic as one; longer inputs run token tiles over blocks
// kept in cache. Threads split the output rows (blocks).
// Numerics and bitwise batch-shape independence: y[t, o] is accumulated in float32 by fused
// multiply-adds in ascending i, restarted every 128 inputs and those partial sums added in
// order (rounding error like a 128-way blocked sum); the order depends on nothing else, so
// y[t, :] does not depend on n_tokens, the other tokens, the row's place in its block or the
// thread count.
void matmul(const float* x, int n_tokens, const PackedWeights& w, const float* bias, float* y);

// One product of matmul_multi: y[t, o] = sum_i x[t, i] * W[o, i] (+ bias[o]), bias [out] or
// nullptr, y [n_tokens, out] (must not alias x).
// swiglu: w holds gate/up block pairs (pack_weight_pairs; w.out = rows of each) and
// y[t, o] = silu(g) * u with g, u the two products: bitwise silu_mul of two matmul outputs, in
// one pass (no gate and up outputs in memory). bias must be nullptr.
struct MatmulOutput {
  PackedWeights w;
  const float* bias;
  float* y;
  bool swiglu = false;
};

// Several linear layers over the same input (q/k/v, gate/up; all with the same w.in) in one
// parallel region, each output exactly (bitwise) what matmul computes for it alone. Threads
// split the row blocks of all outputs together, so one fork/join serves them all.
void matmul_multi(const float* x, int n_tokens, const MatmulOutput* outputs, int n_outputs);

// Row gather (embedding lookup): out[t, :] = widen(table[ids[t] - row_begin, :]) when
// row_begin <= ids[t] < row_begin + n_rows, else zeros (so that shards of a table split by rows
// can each fill the rows they own and a sum over shards gives the full lookup).
//   table: [n_rows, dim] row-major in `dtype`;  out: [n_tokens, dim] float32.
void gather_rows(const void* table, DType dtype, std::int64_t row_begin, std::int64_t n_rows,
                 int dim, const std::int32_t* ids, int n_tokens, float* out);

// gather_rows from a packed table (pack_weights layout: a tied embedding that shares lm_head's
// packed copy): out[t, :] = widen(row ids[t] - row_begin of table) for ids in
// [row_begin, row_begin + table.out), else zeros. Bitwise what gather_rows gives on the same
// rows unpacked.
void gather_rows_packed(const PackedWeights& table, std::int64_t row_begin, const std::int32_t* ids,
                        int n_tokens, float* out);

// RMSNorm (Hugging Face LlamaRMSNorm): y[t, i] = x[t, i] * rsqrt(mean_i(x[t, :]^2) + eps) * w[i].
//   x, y: [n_tokens, dim] float32 (may alias);  w: [dim] in `w_dtype`.
void rmsnorm(const float* x, int n_tokens, int dim, const void* w, DType w_dtype, float eps,
             float* y);

// Residual add then RMSNorm in one pass: x[t, :] += delta[t, :], then y = rmsnorm(x) (bitwise
// add_inplace followed by rmsnorm). x, delta, y: [n_tokens, dim]; y must not alias x or delta.
void add_rmsnorm(float* x, const float* delta, int n_tokens, int dim, const void* w, DType w_dtype,
                 float eps, float* y);

// Rotary position embedding, Hugging Face rotate_half convention, in place. For every token t,
// head h and j < head_dim/2, with a = positions[t] * inv_freq[j] (float32) and c, s = cos, sin(a):
//   x'[j]            = x[j] * c - x[j + head_dim/2] * s
//   x'[j+head_dim/2] = x[j + head_dim/2] * c + x[j] * s
//   x: token t, head h starts at x + t * row_stride + h * head_dim (row_stride >=
//   n_heads*head_dim). inv_freq: [head_dim/2];  positions: [n_tokens].
void rope(float* x, int n_tokens, int n_heads, int head_dim, std::int64_t row_stride,
          const float* inv_freq, const std::int32_t* positions);

// rope in two steps, for reuse of the table across layers and across q and k:
//   rope_table: cos_sin[t * head_dim + j] = cos(a), cos_sin[t * head_dim + head_dim/2 + j] = sin(a)
//               with a = positions[t] * inv_freq[j] (float32), j < head_dim/2;
//   rope_apply: rotates x (layout as rope's) with that table. rope = rope_table + rope_apply.
void rope_table(const float* inv_freq, int head_dim, const std::int32_t* positions, int n_tokens,
                float* cos_sin);
void rope_apply(float* x, int n_tokens, int n_heads, int head_dim, std::int64_t row_stride,
                const float* cos_sin);

// Causal grouped-query attention of a window of new tokens over a KV cache.
//   q:   [n_tokens, n_heads * head_dim] float32; query i sits at position start + i.
//   k, v: [>= start + n_tokens, n_kv_heads, head_dim] float32 caches, positions 0..start+n-1
//   filled. out: [n_tokens, n_heads * head_dim] float32.
// Query head h reads kv head h / (n_heads / n_kv_heads) (n_heads must be a multiple of
// n_kv_heads). Query i sees keys 0..start+i; scores are scaled by 1/sqrt(head_dim) and the
// softmax is computed in float32. Threads split (token, head) pairs.
void attention(const float* q, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
               const float* k, const float* v, int start, float* out);

// SwiGLU activation: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias
// gate or up.
void silu_mul(const float* gate, const float* up, float* out, std::size_t n);

// Residual add in place: y[i] += x[i].
void add_inplace(float* y, const float* x, std::size_t n);

// Index of the largest element of x[0..n); the lowest index wins ties. n >= 1; NaNs are never
// chosen unless every element is NaN (then 0).
int argmax(const float* x, int n);

// The sum of data[0..n), computed only to read the buffer once as fast as the threads can
// (a STREAM-like read kernel: the benchmark's memory-bandwidth reference). The summation order
// depends on the thread count.
float stream_read(const float* data, std::size_t n);

// Numerically stable softmax in place over x[0..n): x[i] = exp(x[i] - max) / sum.
void softmax(float* x, int n);

}  // namespace specrun::cpu
