// The backend interface: what a model graph may ask of the hardware that runs it.
//
// A backend is a C++ type (CpuBackend, CudaBackend), not a string. A model graph is a template
// over it (model/llama_model.h), so every buffer, weight and KV block it touches has the
// backend's own type: handing a CUDA weight or a device pointer to a CPU op is a compile error.
// Only the engine, which picks the backend at run time, sees backend-neutral handles
// (LanguageModel, DraftHead, KvCache, and the RowsView of a forward call's logits and hidden
// states: model/language_model.h), and those are checked at run time (a RowsView names its
// backend).
//
// What a backend provides (the concept `Backend` below spells it out):
//  - memory: typed pointers into float32 activation scratch (`F`, `CF`), weights prepared from
//    host tensors once at load (`Weight`: matrices in the backend's layout, norm vectors,
//    float32 biases; gate/up as one pair), one sequence's KV storage (`KvBlock`);
//  - plain ops: embedding gather, linear layer, SwiGLU over a prepared gate/up pair, RMSNorm,
//    residual add, RoPE table and rotation, KV append and causal attention over the staged
//    batch, row moves, weighted row sums (a mixture-of-experts layer's combination of its
//    experts' outputs), vocabulary unsharding, and the tensor-parallel collectives on its buffers
//    (handed to the group's Communicator: MPI on host memory for the CPU, NCCL on device memory
//    for CUDA, which records them into the pass's step graph with its kernels).
// Fused ops are not part of the concept: each is an optional member with a default composition
// of the plain ops (backend/default_ops.h: add+RMSNorm, several linears over one input,
// (add+)RMSNorm with the linears or SwiGLU after it, a linear added to the residual stream (now,
// or by the norm after it), RoPE of q and k with the KV append and attention, a
// mixture-of-experts layer's router and its routed experts). A graph calls
// them through `fused::` (default_ops.h), which uses the backend's member when it has one and
// the composition otherwise; a member must give bitwise what the composition gives on that
// backend.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dist/communicator.h"
#include "kernels/cpu/dtype.h"

namespace specrun {

// Which backend a job, a model or a view of its outputs belongs to.
enum class BackendKind { kCpu, kCuda };

// The CUDA backend's projections are batch-invariant (a token's logits are bitwise the same in
// any pass) for passes of at most this many tokens; larger passes (prefill, or a verify pass of
// batch x window tokens above it) go through cuBLAS with activations rounded to the weights'
// dtype. Greedy speculative output equals greedy baseline output on the GPU only while every
// verify pass stays within it. With the projections on the tensor cores
// (parallel.cuda_tensor_cores, BF16 weights) the limit is kCudaTensorCoreBatchInvariantTokens.
// The CPU backend is batch-invariant for any pass.
inline constexpr int kCudaBatchInvariantTokens = 64;
inline constexpr int kCudaTensorCoreBatchInvariantTokens = 512;
// ... for projections whose input width is a multiple of this (hidden, intermediate, heads x
// head_dim).
inline constexpr int kCudaTensorCoreInputMultiple = 32;

// "cpu" / "cuda".
const char* backend_name(BackendKind kind);
// Parses parallel.backend / --backend. Throws (exit code 2) naming `what` (e.g.
// "parallel.backend") for an unknown name, and for "cuda" in a build without CUDA, with advice.
BackendKind parse_backend(std::string_view name, std::string_view what);
// True when this build has the CUDA backend.
bool cuda_backend_built();

// A pointer into one backend's memory. Space is the backend's tag type (HostSpace, CudaSpace),
// so pointers of different backends are different types. Arithmetic as on T*.
template <class Space, class T>
class Ptr {
 public:
  Ptr() = default;
  explicit Ptr(T* p) : p_(p) {}
  T* get() const { return p_; }
  Ptr operator+(std::ptrdiff_t n) const { return Ptr(p_ + n); }
  // A pointer to T converts to a pointer to const T of the same space, never to another space.
  template <class U>
  requires std::same_as<const U, T> Ptr(const Ptr<Space, U>& o) : p_(o.get()) {}

 private:
  T* p_ = nullptr;
};

// A matrix or vector as the checkpoint loader hands it to a backend: host memory (a view of the
// mapped file or a copy), row-major [rows, cols] in dtype (vectors: rows = 1).
// A quantized matrix (quant.kind != kNone; docs/quantization-design.md 3.1): rows and cols are
// the logical shape, `data` the packed values in the checkpoint's layout (quant_row_bytes per
// row), `scales` the scale matrix (quant_scale_rows x quant_scale_cols, row-major, in
// quant.scale_dtype), `zeros` the signed zero points (int8, one per scale) when
// quant.zero_points; `dtype` is then the scale dtype and never an element type.
struct HostTensor {
  const std::byte* data = nullptr;
  DType dtype = DType::kF32;
  int rows = 0, cols = 0;
  QuantFormat quant{};
  const std::byte* scales = nullptr;
  const std::int8_t* zeros = nullptr;

  bool quantized() const { return quant.kind != QuantKind::kNone; }
  // Bytes held: the elements, or packed values + scales + zero points.
  std::size_t bytes() const {
    if (!quantized())
      return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * dtype_size(dtype);
    const std::size_t scales_n =
        static_cast<std::size_t>(quant_scale_rows(quant, rows) * quant_scale_cols(quant, cols));
    return static_cast<std::size_t>(rows) * quant_row_bytes(quant, cols) +
           scales_n * dtype_size(quant.scale_dtype) + (quant.zero_points ? scales_n : 0);
  }
};

// The exact value W'[r, c] of a quantized matrix, by the format's rule in float32
// ((q - z) * s, e4m3(b) * s; design 3.5). For tests and load-time conversions, not for kernels.
float dequantized(const HostTensor& t, int r, int c);
// "int4 group 32 (BF16 scales) [rows, cols]": a quantized tensor for messages.
std::string describe_quantized(const HostTensor& t);

// How a weight is used, so that a backend can lay it out for its kernels (CPU: packed blocks).
enum class WeightUse {
  kLinear,     // [out, in] operand of linear()
  kGateUp,     // gate and up of a SwiGLU MLP, prepared together (prepare_pair)
  kEmbedding,  // [vocab rows, dim] table of embed()
  kVector,     // a norm weight [dim] in its dtype, or a bias widened to float32
};

// One sequence of a forward call as a backend sees it: its KV storage, the first slot of its
// new tokens (= slots already filled) and how many there are. Rows of the batch's activations
// are the sequences' tokens in order.
// A token tree (model/kv_cache.h): slots from tree_base on are tree nodes (tree_base >= start +
// n_tokens when there is none), tree_parents[s - tree_base] the parent slot of slot s, for
// every slot s in [tree_base, start + n_tokens) (host memory, valid during the call). A node's
// keys are the chain's, slots [0, tree_base), then its ancestors' and its own, at positions
// tree_base, tree_base + 1, ... (its position is tree_base + its depth in the region).
template <class Block>
struct SeqSpan {
  Block* kv = nullptr;
  int start = 0;
  int n_tokens = 0;
  int first_row = 0;
  int tree_base = 0;
  const std::int32_t* tree_parents = nullptr;
  bool has_tree() const { return tree_base < start + n_tokens; }
};

// The heads of one attention layer on one rank. Query head h reads kv head h / (heads /
// kv_heads) (grouped-query attention; heads a multiple of kv_heads). A query and a key have
// key_dim floats per head (scores are scaled by `scale`, 0: 1/sqrt(key_dim)), a value and an
// output row value_dim: the Llama family has key_dim = value_dim = head_dim.
// values_in_keys: a kv head's value is the first value_dim floats of its key row, and the cache
// holds no value rows (value_floats() = 0). MLA's absorbed form (model/deepseek_model.h) is one
// kv head whose key row is the token's latent [c_kv (kv_lora_rank) ; k_pe (qk_rope_head_dim)]
// and whose value is c_kv: key_dim 576, value_dim 512 for DeepSeek-V3 and Kimi-K2, with the
// softmax scale of the un-absorbed heads (qk_head_dim^-0.5, YaRN's mscale^2).
struct AttentionHeads {
  int heads = 0, kv_heads = 0;
  int key_dim = 0, value_dim = 0;
  float scale = 0.0f;
  bool values_in_keys = false;
  // Floats per token: of q, of the attention output, of the keys and of the values of a token.
  std::int64_t q_width() const { return static_cast<std::int64_t>(heads) * key_dim; }
  std::int64_t out_width() const { return static_cast<std::int64_t>(heads) * value_dim; }
  int key_floats() const { return kv_heads * key_dim; }
  int value_floats() const { return values_in_keys ? 0 : kv_heads * value_dim; }
  // The softmax scale the scores are multiplied by.
  float softmax_scale() const {
    return scale != 0.0f ? scale : 1.0f / __builtin_sqrtf(static_cast<float>(key_dim));
  }
};

// The routed (token, expert) pairs of one mixture-of-experts layer on one rank, grouped for its
// experts (model/moe_block.h builds them from the router's choices). Host memory, valid during
// the call that takes them.
//  - pairs [first[e], first[e + 1]) go to the rank's local expert e (first: [local experts + 1]);
//    token[p] is the row of the layer's input that pair p reads (ascending within an expert);
//  - output row t is the weighted sum of its pairs' expert outputs: pairs by_token[i] with
//    weights weight[i] for i in [token_first[t], token_first[t + 1]) (token_first: [rows + 1]),
//    in ascending expert order (Hugging Face's order of adding the experts).
struct ExpertGroups {
  std::span<const int> first;
  std::span<const int> token;
  std::span<const int> token_first;
  std::span<const int> by_token;
  std::span<const float> weight;
  int pairs() const { return static_cast<int>(token.size()); }
  int local_experts() const { return static_cast<int>(first.size()) - 1; }
};

// How a mixture-of-experts router turns a token's router logits into its experts and their
// weights, on the host (kernels/cpu/ops.h):
//  - kSoftmaxTopK (Qwen3-MoE, Mixtral): cpu::route_top_k, top_k by the softmax, renormalised
//    when `renormalise`;
//  - kSigmoidNoauxTc (DeepSeek-V3, Kimi-K2): cpu::route_noaux_tc with the layer's
//    e_score_correction_bias, n_group / topk_group group selection, weights renormalised when
//    `renormalise`, times `scale` (routed_scaling_factor).
struct RouterRule {
  enum class Kind : std::uint8_t { kSoftmaxTopK, kSigmoidNoauxTc };
  Kind kind = Kind::kSoftmaxTopK;
  int top_k = 1;
  bool renormalise = false;
  int n_group = 1;
  int topk_group = 1;
  float scale = 1.0f;
};

// The shape of every KV block of a model on one rank: per layer, the keys [capacity][key_floats]
// then the values [capacity][value_floats].
struct KvShape {
  int layers = 0;
  int key_floats = 0;    // kv heads of this rank * key_dim
  int value_floats = 0;  // kv heads of this rank * value_dim
};

// The interface as a concept: a type is a backend when it has these members (CpuBackend and
// CudaBackend are checked against it where they are defined). The contracts are those of the
// CPU reference (kernels/cpu/ops.h) and are written at CpuBackend's declarations.
template <class B>
concept Backend = requires(B b, typename B::F f, typename B::CF cf, const typename B::Weight& w,
                           typename B::KvBlock& kv, const AttentionHeads& heads,
                           const typename B::Floats& floats, const HostTensor& h,
                           std::span<const SeqSpan<typename B::KvBlock>> seqs,
                           std::span<const int> idx, const std::int32_t* ids, float* host, int i,
                           float eps, std::size_t z, Communicator& comm) {
  { B::kKind } -> std::convertible_to<BackendKind>;
  typename B::LinearOut;  // {const Weight* w; const Weight* bias; F y}: an output of linear_multi
  // Weights and storage, at load.
  { b.weight_bytes(h, WeightUse::kLinear) } -> std::same_as<std::size_t>;
  b.reserve_weights(z);
  { b.prepare(h, WeightUse::kLinear) } -> std::same_as<typename B::Weight>;
  { b.prepare_pair(h, h) } -> std::same_as<typename B::Weight>;
  { b.prepare_tied(w) } -> std::same_as<typename B::Weight>;
  { b.upload_floats(std::vector<float>{}) } -> std::same_as<typename B::Floats>;
  { b.new_kv_block(KvShape{}, i) } -> std::same_as<typename B::KvBlock>;
  // A forward call and its plain ops.
  b.begin_forward(seqs, ids, ids, i);
  b.embed(w, i, f);
  b.rope_table(floats, i, f);
  b.rope_apply(f, i, i, i, std::int64_t{}, cf);
  b.linear(cf, i, w, &w, f);
  b.swiglu(cf, i, w, f);
  b.rmsnorm(cf, i, i, w, eps, f);
  b.add_inplace(f, cf, z);
  b.add_bias(f, w, i, i);
  { b.kv_rows(i, heads) } -> std::same_as<typename B::KvRows>;
  b.attend(i, cf, i, false, f, heads);
  b.keep_last_rows(f, z);
  b.gather_rows(cf, z, idx, f);
  b.copy_rows(f, z, cf, z, i, z);
  b.combine_rows(f, i, z, cf, idx, idx, std::span<const float>{});
  b.unshard_vocab(cf, i, i, i, f);
  b.all_reduce_sum(comm, f, z);
  b.all_gather(comm, cf, f, z);
  b.end_forward();
  // Outside a forward call.
  b.kv_keep(kv, i, i, idx);
  b.read(cf, z, host);
  b.read_kv(kv, i, i, i, host);
  b.synchronize();
  b.finish();
};

}  // namespace specrun
