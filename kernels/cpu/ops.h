// CPU compute primitives on raw buffers: the op interface that the CUDA backend mirrors.
//
// The compute kernels (kernel_api.inc) exist once per instruction-set variant and are called
// through the variant chosen at start-up (dispatch.h); the weight layout functions here are the
// same for every variant. These functions know nothing of models, checkpoints or ranks. Every
// buffer is row-major and contiguous unless a stride is given; activations are float32; weights may
// stay in their storage dtype (F32, BF16, F16), or quantized (int4, int8, fp8 e4m3 with scales),
// and are widened on the fly, never copied to float32 in memory. All arithmetic accumulates in
// float32. Ops that take a noticeable amount of work split it over OpenMP threads; the caller
// chooses the thread count (omp_set_num_threads).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/variant.h"

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

// Slot of row r (< kPackRows) of a packed block within a k-group (the layout above): BF16
// interleaves rows j and j + 16 in each 32-bit word, other dtypes keep row order.
// packed_blocks: blocks of a packed matrix with `out` rows. (Inline helpers: every kernel variant
// compiles its own copy, kernels/cpu/variant.h.)
inline namespace SPECRUN_ISA_NS {
constexpr int packed_slot(DType t, int r) {
  return t == DType::kBF16 ? (r < 16 ? 2 * r : 2 * (r - 16) + 1) : r;
}
constexpr int packed_blocks(int out) {
  return (out + kPackRows - 1) / kPackRows;
}
}  // namespace SPECRUN_ISA_NS

// Quantized weights (issue 44; docs/quantization-design.md 3.4), as loaded: `data` the codes in
// the checkpoint's layout (quant_row_bytes per row), `scales` [quant_scale_rows(out),
// quant_scale_cols(in)] row-major in quant.scale_dtype, `zeros` the signed zero points (one per
// scale) when quant.zero_points.
struct QuantMatrix {
  const void* data;
  const void* scales;
  const std::int8_t* zeros;
  QuantFormat quant;
  int out, in;
};

// Quantized weights packed for matmul (pack_quantized): blocks of kPackRows rows, each block one
// record: its codes k-major (int4: 16 bytes per input, byte j = row j's stored nibble (q + 8) in
// the low half and row j + 16's in the high half; int8 and fp8: 32 bytes per input, byte j = row
// j's code, q + 128 or the e4m3 bits), then per scale group (quant_scale_cols(in) of them) the
// block's 32 row scales in the scale dtype, then (zero points) per group 32 int8 zero points.
// Rows past `out`: code of q = 0 (fp8: +0), scale 0. Kept packed: never widened in memory.
inline namespace SPECRUN_ISA_NS {
constexpr std::size_t quant_block_values(const QuantFormat& f, int in) {
  return static_cast<std::size_t>(in) * (f.kind == QuantKind::kInt4 ? 16 : 32);
}
constexpr std::size_t quant_block_scales(const QuantFormat& f, int in) {
  return static_cast<std::size_t>(quant_scale_cols(f, in)) * kPackRows * dtype_size(f.scale_dtype);
}
constexpr std::size_t quant_block_bytes(const QuantFormat& f, int in) {
  return quant_block_values(f, in) + quant_block_scales(f, in) +
         (f.zero_points ? static_cast<std::size_t>(quant_scale_cols(f, in)) * kPackRows : 0);
}
}  // namespace SPECRUN_ISA_NS

// Bytes of a packed quantized [out, in] matrix: packed_blocks(out) * quant_block_bytes.
std::size_t packed_quant_bytes(const QuantFormat& f, int out, int in);
// Packs w into dst (packed_quant_bytes bytes), and two matrices of one shape and format (an
// MLP's gate and up) as pairs of blocks as pack_weight_pairs does (2 * packed_quant_bytes).
void pack_quantized(const QuantMatrix& w, void* dst);
void pack_quantized_pairs(const QuantMatrix& a, const QuantMatrix& b, void* dst);

// A packed weight matrix: `data` from pack_weights(w, dtype, out, in, data), or, for a swiglu
// output, from pack_weight_pairs(gate, up, dtype, out, in, data); quantized (quant.kind not
// kNone): from pack_quantized / pack_quantized_pairs, and dtype is ignored.
struct PackedWeights {
  const void* data;
  DType dtype;
  int out, in;
  QuantFormat quant{};
};

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

// One product of matmul_grouped: an output over its own input rows x [n_tokens, out.w.in].
struct MatmulGroup {
  const float* x;
  int n_tokens;
  MatmulOutput out;
};

// Read kernels of the bandwidth probe (stream_read).
inline constexpr int kReadKernels = 3;

// The compute kernels, dispatched to the variant chosen at start-up (dispatch.h).
#include "kernels/cpu/kernel_api.inc"

// Mixture-of-experts routing (kernels/cpu/moe.cpp; the same for every kernel variant, compiled
// once): for each of n rows of router logits [n, n_experts] (float32), the softmax in float32
// (the row's max subtracted, exp, the sum in ascending index order, each term divided by it),
// then the top_k experts by probability in descending order, the lower index first among equal
// probabilities, and their weights: the probabilities, divided by their sum (in that order) when
// renormalise. experts, weights: [n, top_k]. 1 <= top_k <= n_experts. A row is decided by its
// own logits only (batch-invariant).
void route_top_k(const float* logits, int n, int n_experts, int top_k, bool renormalise,
                 std::int32_t* experts, float* weights);

// DeepSeek-V3's router (topk_method "noaux_tc", scoring_func "sigmoid"; kernels/cpu/moe.cpp,
// compiled once), per row of router logits [n, n_experts] (float32):
//   s_e = sigmoid(logit_e); c_e = s_e + bias[e] (the e_score_correction_bias, float32);
//   with n_group > 1 the experts are n_group consecutive groups; a group's score is the sum of its
//   two highest c (added highest first), and only the topk_group best groups (by that score, the
//   lower group index first among equals) are eligible: experts of other groups are never chosen;
//   the top_k eligible experts by c in descending order (the lower index first among equals);
//   their weights are the unbiased s, divided by (their sum + 1e-20) when renormalise, then
//   multiplied by scale (routed_scaling_factor).
// experts, weights: [n, top_k]. Requires n_experts % n_group == 0, n_experts / n_group >= 2 when
// n_group > 1, 1 <= topk_group <= n_group and top_k <= topk_group * n_experts / n_group. A row is
// decided by its own logits only (batch-invariant).
void route_noaux_tc(const float* logits, int n, int n_experts, const float* bias, int n_group,
                    int topk_group, int top_k, bool renormalise, float scale, std::int32_t* experts,
                    float* weights);

// Weighted row sums (kernels/cpu/moe.cpp, compiled once): for t < rows,
//   y[t, :] = sum over i in [first[t], first[t + 1]) of scale[i] * x[src[i], :]
// accumulated in float32 in ascending i from zero, each term a product then an add (no fused
// multiply-add), so a row depends on its own terms only; a row without terms is zeros.
// x [*, width], y [rows, width] float32, y must not alias x; first [rows + 1], src and scale
// [first[rows]]. Threads split the rows.
void combine_rows(float* y, int rows, std::size_t width, const float* x, const int* first,
                  const int* src, const float* scale);

// Names of the bandwidth probe's read kernels (stream_read's `kernel`, 0 <= kernel <
// kReadKernels): "wide", "wide+prefetch", "4 streams+prefetch".
const char* read_kernel_name(int kernel);

}  // namespace specrun::cpu
