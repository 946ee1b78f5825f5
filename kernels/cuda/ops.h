// CUDA compute primitives on raw device buffers: the device mirror of kernels/cpu/ops.h.
//
// Same contracts as the CPU ops (row-major, activations float32, weights in their storage dtype
// F32/BF16/F16 widened on the fly, float32 accumulation), with these differences:
//  - every pointer is device memory unless the comment says otherwise;
//  - every launcher checks its arguments (SPEC_CHECK), launches on the explicit `stream` and
//    checks the launch (cudaGetLastError); none synchronises, so results are ready only after
//    the stream has been synchronised;
//  - attention and the KV-cache append work on a whole batch of sequences in one launch: every
//    new token carries a KvSlot that says where its sequence's cache is.
// One op per .cu file in this directory; each file's header states its layout.
//
// Token decisions (argmax, sampling, speculative verification) run here too, on the logits
// where the model left them (sampling.cu, sampling_verify.cu; src/spec/token_ops.h drives them):
// only token ids and accepted counts are copied to the host.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <tuple>

#include "kernels/cpu/dtype.h"

namespace specrun::cuda {

// Linear layer y[t, o] = sum_i x[t, i] * W[o, i] (+ bias[o]), float32 accumulation.
//   x [n_tokens, in] float32; w [out, in] in w_dtype; bias [out] float32 or nullptr;
//   y [n_tokens, out] float32, must not alias x.
// Two paths, chosen by n_tokens against gemv_tokens(flags, w_dtype, in) (64, or 512 on the
// tensor cores):
//  - n_tokens <= gemv_tokens(...) (decode, verify windows): a batch-invariant kernel. Every
//    y[t, o] is reduced in one fixed order that does not depend on n_tokens or on t's place in
//    the batch, so a token scored in a verify window gets bit-for-bit the logits it would get
//    when decoded alone: the greedy speculative == baseline invariant holds on the GPU too.
//    Activations stay float32 (no rounding). Which kernel, by `flags` (below):
//     - on the CUDA cores (the default): float32 FMA, the weights read once per 8 tokens;
//     - on the tensor cores (kGemvTensorCores; BF16 weights with `in` a multiple of 32 on
//       compute capability 8.0 on, else the CUDA-core kernel): BF16 mma.sync with float32
//       accumulation, each activation split into three BF16 parts whose sum is the float32
//       value (hi + mid + lo), so the products keep float32's precision; the weights are read
//       once per 64 tokens, and passes of up to kMaxTensorCoreTokens stay batch-invariant (a
//       verify pass of a batch of trees). Its sums are in another order than the CUDA cores':
//       results differ from theirs by float32 rounding, and a job uses one kernel throughout.
//  - larger n_tokens (prefill): cublasGemmEx. x is first rounded to w_dtype in `scratch`
//    (BF16 x BF16 or F16 x F16 -> F32 output, CUBLAS_COMPUTE_32F, i.e. float32 accumulation;
//    F32 weights: F32 x F32, CUBLAS_COMPUTE_32F without TF32). scratch must hold
//    matmul_scratch_bytes(n_tokens, in, w_dtype) bytes; the handle must be bound to `stream`.
// flags (kGemv*, or'ed) apply to the first path. kGemvTensorCores chooses the kernel; the
// others change how it is launched, never a result bit:
//   kGemvDependent   a programmatic dependent launch (sm_90 on; device_util.cuh): the blocks may
//                    start while the previous kernel on the stream runs, fetch their weight rows
//                    into L2, and wait for it before reading x;
//   kGemvPersistent  as many blocks as fit on the device at once, each walking groups of rows
//                    with a grid stride and asking L2 for its next group's rows first (instead of
//                    one block per group of rows, in waves).
inline constexpr int kMaxGemvTokens = 64;
inline constexpr int kMaxTensorCoreTokens = 512;
// The tensor-core kernel takes projections whose input width is a multiple of this.
inline constexpr int kTensorCoreInputMultiple = 32;
inline constexpr int kGemvDependent = 1;
inline constexpr int kGemvPersistent = 2;
inline constexpr int kGemvTensorCores = 4;
// The most tokens the batch-invariant path takes for a w_dtype [*, in] weight with these flags:
// kMaxTensorCoreTokens where the tensor-core kernel applies (kGemvTensorCores, BF16, `in` a
// multiple of 32, compute capability 8.0 on), else kMaxGemvTokens. Depends on the weight, never
// on the pass, so a token's outputs stay the same in every pass up to it.
int gemv_tokens(int flags, DType w_dtype, int in);
std::size_t matmul_scratch_bytes(int n_tokens, int in, DType w_dtype);
void matmul(cublasHandle_t cublas, cudaStream_t stream, const float* x, int n_tokens, int in,
            const void* w, DType w_dtype, int out, const float* bias, float* y, void* scratch,
            std::size_t scratch_bytes, int flags = 0);

// A weight kept packed as its checkpoint stores it (issue 44; matmul_quant.cu): codes [out,
// ceil(in / per_word)] int32 words (int4 / int8, stored q + 2^(b-1)) or [out, in] e4m3 bytes;
// scales [ceil(out / block_rows), ceil(in / group)] in format.scale_dtype; zeros (int only, or
// nullptr) [out, ceil(in / group)] int8, the offset already removed.
struct QuantWeight {
  const void* codes = nullptr;
  const void* scales = nullptr;
  const std::int8_t* zeros = nullptr;
  QuantFormat format{};
  int out = 0;
};
// y [n_tokens, out] = x W'^T with W' the exact dequantized weight ((q - z) * s, e4m3(b) * s),
// float32 fused multiply-adds; a token's result independent of the batch. Not yet run on a GPU.
void quant_matmul(cudaStream_t stream, const float* x, int n_tokens, int in, const QuantWeight& w,
                  float* y);

// The input's RMSNorm fused into the GEMV (matmul_multi and swiglu_gemv given norm_w): every
// block of the launch normalises x's rows into its shared memory, with the sums of rmsnorm
// below in the same order, so the outputs are bitwise rmsnorm into a buffer followed by the
// plain launch, and the norm is no launch of its own. Only for persistent launches (each block
// normalises once, however many row groups it walks) of at most kMaxNormTokens tokens whose
// rows fit in kMaxNormBytes: gemv_norm_fits; otherwise the caller runs rmsnorm first.
inline constexpr int kMaxNormTokens = 8;
inline constexpr std::size_t kMaxNormBytes = 40 * 1024;
bool gemv_norm_fits(int n_tokens, int in, int flags);

// Up to three GEMVs sharing x in one launch (q, k and v): y_s = x W_s^T (+ bias_s) for s <
// n_outs, W_s [out_s, in] in w_dtype. Bitwise what matmul gives for each alone with the same
// flags. Decode and verify windows only: 1 <= n_tokens <= gemv_tokens(flags, w_dtype, in).
// Unused outputs: pass nullptr / 0. flags as for matmul. norm_w [in] in norm_dtype: x is
// first normalised (y_s = rmsnorm(x, norm_w, norm_eps) W_s^T; see above; gemv_norm_fits must
// hold).
void matmul_multi(cudaStream_t stream, const float* x, int n_tokens, int in, DType w_dtype,
                  int n_outs, const void* w0, int out0, const float* bias0, float* y0,
                  const void* w1, int out1, const float* bias1, float* y1, const void* w2, int out2,
                  const float* bias2, float* y2, int flags = 0, const void* norm_w = nullptr,
                  DType norm_dtype = DType::kF32, float norm_eps = 0.0f);

// A GEMV added to its output (the residual add after o_proj and down_proj, in the epilogue):
// y[t, o] += x[t, :] . W[o, :] (+ bias[o]), bitwise matmul into a buffer followed by
// add_inplace. y must not alias x; 1 <= n_tokens <= gemv_tokens(flags, w_dtype, in).
void matmul_accumulate(cudaStream_t stream, const float* x, int n_tokens, int in, const void* w,
                       DType w_dtype, int out, const float* bias, float* y, int flags = 0);

// SwiGLU MLP input in one launch: y[t, r] = silu(x gate[r]) * (x up[r]) for r < rows, with
// gate_up [2 * rows, in] in w_dtype (gate's rows, then up's). Bitwise what two matmul calls
// and silu_mul give (with the same flags). 1 <= n_tokens <= gemv_tokens(flags, w_dtype, in);
// y [n_tokens, rows] must not alias x. flags as for matmul; norm_w as for matmul_multi.
void swiglu_gemv(cudaStream_t stream, const float* x, int n_tokens, int in, const void* gate_up,
                 DType w_dtype, int rows, float* y, int flags = 0, const void* norm_w = nullptr,
                 DType norm_dtype = DType::kF32, float norm_eps = 0.0f);

// Embedding lookup of a vocab-sharded table: out[t, :] = widen(table[ids[t] - row_begin, :])
// when row_begin <= ids[t] < row_begin + n_rows, else zeros (a sum over shards is the lookup).
//   table [n_rows, dim] in dtype; ids [n_tokens] int32 (device); out [n_tokens, dim] float32.
void gather_rows(cudaStream_t stream, const void* table, DType dtype, std::int64_t row_begin,
                 std::int64_t n_rows, int dim, const std::int32_t* ids, int n_tokens, float* out);

// y[t, :] = sum over i in [first[t], first[t + 1]) of scale[i] * x[src[i], :] for t < rows, in
// ascending i from zero, products and adds rounded separately (cpu::combine_rows's numerics);
// zeros for a row without terms. first, src, scale: device memory. y must not alias x.
void combine_rows(cudaStream_t stream, float* y, int rows, std::size_t width, const float* x,
                  const std::int32_t* first, const std::int32_t* src, const float* scale);

// out[r, :] = x[rows[r], :] for r < n_rows (rows: device int32). x, out [*, dim] float32.
void select_rows(cudaStream_t stream, const float* x, int dim, const std::int32_t* rows, int n_rows,
                 float* out);

// The small kernels of a step (the norms, rope_kv_append, attention_rope) take `dependent`:
// launched as a programmatic dependent launch (sm_90 on; device_util.cuh), the kernel may be
// placed on the device while the kernel before it still runs and waits for it before it reads or
// writes anything; a step graph thus hides their launch behind the projection before them.
// Never a result bit changes. Only right after another kernel (not a copy) on the stream.

// RMSNorm (LlamaRMSNorm): y[t, i] = x[t, i] * rsqrt(mean(x[t, :]^2) + eps) * w[i].
//   x, y [n_tokens, dim] float32 (may alias); w [dim] in w_dtype.
void rmsnorm(cudaStream_t stream, const float* x, int n_tokens, int dim, const void* w,
             DType w_dtype, float eps, float* y, bool dependent = false);

// Residual add and RMSNorm in one pass: x += delta, then y = rmsnorm(x) with w. Bitwise what
// add_inplace and rmsnorm give. x, delta, y [n_tokens, dim] float32; y must not alias x or delta.
void add_rmsnorm(cudaStream_t stream, float* x, const float* delta, int n_tokens, int dim,
                 const void* w, DType w_dtype, float eps, float* y, bool dependent = false);

// Rotary embedding, HF rotate_half, in place (see kernels/cpu/ops.h rope for the formula).
//   token t, head h at x + t * row_stride + h * head_dim; inv_freq [head_dim/2] float32 and
//   positions [n_tokens] int32, both device memory.
void rope(cudaStream_t stream, float* x, int n_tokens, int n_heads, int head_dim,
          std::int64_t row_stride, const float* inv_freq, const std::int32_t* positions);

// rope in two steps (the CPU's rope_table / rope_apply): cos_sin [n_tokens, head_dim] from
// inv_freq [head_dim/2] and positions [n_tokens] (device), then x rotated with it in place.
void rope_table(cudaStream_t stream, const float* inv_freq, int head_dim,
                const std::int32_t* positions, int n_tokens, float* cos_sin);
void rope_apply(cudaStream_t stream, float* x, int n_tokens, int n_heads, int head_dim,
                std::int64_t row_stride, const float* cos_sin);

// Where one new token's sequence keeps its KV cache (the KvCache layout, float32):
//   cache [n_layers][2 (K, V)][capacity][n_kv_heads][head_dim]; the token's keys and values go
//   to cache slot `slot`; it sits at `position` and attends to the keys of positions
//   0..position, position p being stored in slot p (a chain: path == nullptr, slot ==
//   position) or, for a token-tree node, slot p while p < tree_base and slot path[p - tree_base]
//   from there on (path: device int32, its ancestors' slots from the tree's start and its own,
//   position - tree_base + 1 entries). An array of KvSlot lives in device memory.
struct KvSlot {
  float* cache;
  int capacity;
  int position;
  int slot;
  int tree_base;
  const std::int32_t* path;
};

// Writes the new tokens' keys and values of `layer` into their caches at their slots.
//   k_new, v_new [n_tokens, n_kv_heads * head_dim] float32; slots [n_tokens] (device).
void kv_append(cudaStream_t stream, const float* k_new, const float* v_new, int n_tokens,
               int n_kv_heads, int head_dim, const KvSlot* slots, int layer);
// kv_append with the keys rotated on the way (RoPE, cos_sin [n_tokens, head_dim] from
// rope_table): the cache gets bitwise what rope_apply on k_new followed by kv_append writes;
// k_new is not changed. head_dim even.
void rope_kv_append(cudaStream_t stream, const float* k_new, const float* v_new, int n_tokens,
                    int n_kv_heads, int head_dim, const float* cos_sin, const KvSlot* slots,
                    int layer, bool dependent = false);

// Causal grouped-query attention of n_tokens new tokens (of any sequences) over their caches
// (kv_append must have written them). q, out [n_tokens, n_heads * head_dim] float32; query
// head h reads kv head h / (n_heads / n_kv_heads); scores scaled by 1/sqrt(head_dim), softmax
// in float32 (online, one fixed order per query: batch-invariant). head_dim <= kMaxHeadDim.
// Long contexts may be split over several blocks per (token, head) (AttentionSplit): a token at
// position p takes p / kAttentionSplitPositions + 1 blocks of kAttentionSplitPositions
// positions each, and a second launch adds their states in order. Which blocks a token takes
// depends only on p, so outputs stay batch-invariant; they differ (by float32 rounding) from
// the unsplit kernel's for p >= kAttentionSplitPositions, so a caller splits all its passes
// alike (the backend: every pass of up to kMaxTensorCoreTokens tokens).
inline constexpr int kMaxHeadDim = 256;
inline constexpr int kAttentionSplitPositions = 256;
// A power of two (calls of growing contexts share launch shapes) >= max_position / 256 + 1.
int attention_chunks(int max_position);
std::size_t attention_split_floats(int n_tokens, int n_heads, int head_dim, int chunks);
// The split of a call: chunks must be at least attention_chunks(the call's largest position) (a
// kernel with too few traps: a launch failure, never a wrong result). partial (device) holds
// `floats` floats, at least one token's states (attention_split_floats(1, ...)); the tokens are
// attended in groups whose states fit (launches one after another on the stream, the same
// bits as one launch), so the buffer need not grow with tokens x heads x chunks.
struct AttentionSplit {
  float* partial = nullptr;  // nullptr: every token in one block (chunks 1)
  int chunks = 1;
  std::size_t floats = 0;
  auto fields() const { return std::tuple(partial, chunks, floats); }  // StepGraphs' signature
};
// The tokens of one group of a split: as many as fit in split.floats (at least 1, at most
// n_tokens); n_tokens when unsplit. Throws when split.floats holds less than one token's states.
int attention_split_group(int n_tokens, int n_heads, int head_dim, const AttentionSplit& split);
void attention(cudaStream_t stream, const float* q, int n_tokens, int n_heads, int n_kv_heads,
               int head_dim, const KvSlot* slots, int layer, float* out, AttentionSplit split = {});
// attention with each query rotated as it is loaded (RoPE, cos_sin [n_tokens, head_dim] from
// rope_table): bitwise what rope_apply on q followed by attention gives; q is not changed.
void attention_rope(cudaStream_t stream, const float* q, int n_tokens, int n_heads, int n_kv_heads,
                    int head_dim, const float* cos_sin, const KvSlot* slots, int layer, float* out,
                    AttentionSplit split = {}, bool dependent = false);

// Compaction after a verified token tree: in one sequence's cache (the KvSlot layout, `layers`
// layers of row_floats-wide rows), slots first + rows[j] move to first + j for j < count, keys
// and values of every layer. rows: device int32, ascending. scratch: layers * 2 * count *
// row_floats floats (device); the moves go through it, so overlapping ranges are safe.
void kv_keep(cudaStream_t stream, float* cache, int capacity, int layers, int row_floats, int first,
             const std::int32_t* rows, int count, float* scratch);

// SwiGLU: out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void silu_mul(cudaStream_t stream, const float* gate, const float* up, float* out, std::size_t n);

// Residual add in place: y[i] += x[i].
void add_inplace(cudaStream_t stream, float* y, const float* x, std::size_t n);
// Bias add in place: y[t, i] += bias[i] for t < n_rows, i < dim.
void add_bias(cudaStream_t stream, float* y, const float* bias, int n_rows, int dim);

// Row-wise argmax: out[r] = index of the largest x[r, :] (lowest index on ties, NaNs never
// chosen; -1 when the row is all NaN). x [n_rows, n] float32; out [n_rows] int32.
void argmax(cudaStream_t stream, const float* x, int n_rows, int n, std::int32_t* out);

// Row-wise softmax with temperature in place: x[r, i] = exp((x[r, i] - max) / T) / sum.
// temperature > 0 (greedy decoding uses argmax). x [n_rows, n] float32.
void softmax(cudaStream_t stream, float* x, int n_rows, int n, float temperature);

}  // namespace specrun::cuda
