// The one weight schema of the Llama family (Llama, Mistral, Qwen2, Qwen3): a table that says,
// for every tensor, its checkpoint name, the shape config.json implies, when it is present, how
// tensor parallelism splits it and how a backend uses it. Loading and slicing a rank's shard
// (load_host_weights), counting bytes, preparing the weights on a backend (model_weights.h),
// the shapes in Checkpoint's error messages and `schema_shape` for tests are all driven by it:
// a new tensor is one new row. Which layers hold a per-layer tensor follows each layer's kind
// (ModelConfig::layer_kind): attention tensors are in the layers whose attention is of their
// kind, MLP tensors likewise, so a model with mixed layers is one table.
//
// Tensor parallelism (Megatron style): q/k/v and gate/up are column-parallel (a rank holds the
// output rows of its heads / its slice of the intermediate dimension); o and down are
// row-parallel (the matching input columns; partial outputs are summed by an all-reduce);
// embedding and lm_head are vocab-parallel (a contiguous range of vocabulary rows). Query heads
// split evenly; a rank keeps the kv heads its query heads read, so kv heads are replicated when
// tp > num_key_value_heads. Norm weights (and Qwen3's per-head q/k norms) are replicated.
//
// Mixture-of-experts layers (MlpKind::kMoe): the router (`mlp.gate` [experts, hidden]) is
// replicated; each routed expert's gate, up and down are rows of the table whose name holds the
// expert index ("mlp.experts.{e}.gate_proj.weight"), loaded for the rank's experts and kept per
// layer as one stacked tensor per role (the experts in index order). Expert parallelism is the
// rank's part of that stack: with ep = tp, experts [rank * E / tp, (rank + 1) * E / tp) whole;
// with ep = 1, every expert, each cut like a dense MLP (gate/up rows and down columns of the
// rank's slice of moe_intermediate_size). Either way each rank's MoE output is a partial sum
// that the tensor-parallel all-reduce after the block completes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"

namespace specrun {

class Checkpoint;

// Which part of the model a rank holds. Pure arithmetic on the config, tested without MPI.
struct ShardPlan {
  int tp = 1, tp_rank = 0;
  int q_heads = 0, q_head_begin = 0;    // this rank's query heads
  int kv_heads = 0, kv_head_begin = 0;  // the kv heads they read
  int intermediate = 0, intermediate_begin = 0;
  int vocab = 0, vocab_begin = 0;
  // Mixture of experts: expert-parallel ranks (1 or tp; 1 for a dense model), this rank's
  // routed experts [expert_begin, expert_begin + experts) and its slice of each one's
  // intermediate dimension (the whole of it when ep = tp).
  int ep = 1;
  int experts = 0, expert_begin = 0;
  int expert_intermediate = 0, expert_intermediate_begin = 0;
  // DeepSeek-V3's shared experts: this rank's slice of their intermediate dimension
  // (moe_intermediate_size * n_shared_experts / tp), cut like a dense MLP's.
  int shared_intermediate = 0, shared_intermediate_begin = 0;

  // The rank's local index of expert e, or -1 when another rank holds it.
  int local_expert(int e) const {
    return e >= expert_begin && e < expert_begin + experts ? e - expert_begin : -1;
  }

  // Throws (exit code 2) naming the config.json field when tp does not divide
  // num_attention_heads, num_key_value_heads (tp <= kv heads) or is not a multiple of it
  // (tp > kv heads), intermediate_size (when some layer is dense) or vocab_size; for a model
  // with MoE layers, when ep (0: the default, tp) is neither 1 nor tp, does not divide the
  // expert count, or (ep = 1) tp does not divide moe_intermediate_size. `source` names the
  // config file.
  static ShardPlan make(const ModelConfig& config, int tp, int tp_rank,
                        const std::string& source = "config.json", int ep = 0);
};

// What a tensor is in the graph. Model-level roles first, then per-layer ones.
enum class Role : std::uint8_t {
  kEmbed,
  kLmHead,
  kFinalNorm,
  kInputNorm,
  kPostAttentionNorm,
  kQ,
  kK,
  kV,
  kO,
  kQBias,
  kKBias,
  kVBias,
  kOBias,
  kQNorm,
  kKNorm,
  kGate,  // gate and up are prepared together (WeightUse::kGateUp) and stored under kGate
  kUp,
  kDown,
  kFc,          // EAGLE-3: the projection of the target's three hidden states
  kHiddenNorm,  // EAGLE-3: the norm of the hidden input
  kRouter,      // MoE: the router [experts, hidden]
  kExpertGate,  // MoE: each expert's gate and up, prepared as one pair per expert (kExpertGate)
  kExpertUp,
  kExpertDown,  // MoE: each expert's down projection
  // MLA (DeepSeek-V3 family; q_proj and o_proj are kQ and kO):
  kQA,       // q_a_proj [q_lora_rank, hidden]
  kQANorm,   // q_a_layernorm [q_lora_rank]
  kQB,       // q_b_proj [heads * qk_head_dim, q_lora_rank]
  kKvA,      // kv_a_proj_with_mqa [kv_lora_rank + qk_rope_head_dim, hidden]
  kKvANorm,  // kv_a_layernorm [kv_lora_rank]
  kKvB,      // kv_b_proj [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
  // Derived from kv_b_proj at load (not checkpoint tensors; deepseek_model.h): per local head,
  // its key part transposed [kv_lora_rank, qk_nope_head_dim] and its value part [v_head_dim,
  // kv_lora_rank], the absorbed attention's two projections.
  kMlaKeyAbsorb,
  kMlaValueAbsorb,
  // DeepSeek-V3's router bias and shared experts:
  kRouterBias,  // mlp.gate.e_score_correction_bias [experts], float32
  kSharedGate,  // mlp.shared_experts.gate_proj and up_proj, prepared as one pair (kSharedGate)
  kSharedUp,
  kSharedDown,
};
inline constexpr int kNumRoles = static_cast<int>(Role::kSharedDown) + 1;
// The role prepared together with `gate` as its gate/up pair (kUp for kGate, kExpertUp for
// kExpertGate, kSharedUp for kSharedGate); is_up: one of those.
Role up_of(Role gate);
bool is_up(Role r);

// A dimension of a tensor, as config.json gives it.
enum class Dim : std::uint8_t {
  kNone,             // (second dimension of a vector)
  kHidden,           // hidden_size
  kIntermediate,     // intermediate_size
  kVocab,            // vocab_size
  kQWidth,           // num_attention_heads * head_dim
  kKvWidth,          // num_key_value_heads * head_dim
  kHeadDim,          // head_dim
  kTwoHidden,        // 2 * hidden_size (an EAGLE-3 head's attention input)
  kFcIn,             // 3 * target_hidden_size (an EAGLE-3 head's fc input)
  kExperts,          // num_experts (Mixtral: num_local_experts)
  kMoeIntermediate,  // moe_intermediate_size (Mixtral: intermediate_size)
  // MLA:
  kQLoraRank,           // q_lora_rank
  kKvLoraRank,          // kv_lora_rank
  kKvAWidth,            // kv_lora_rank + qk_rope_head_dim
  kMlaQWidth,           // num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)
  kMlaKvBWidth,         // num_attention_heads * (qk_nope_head_dim + v_head_dim)
  kMlaOWidth,           // num_attention_heads * v_head_dim
  kSharedIntermediate,  // moe_intermediate_size * n_shared_experts
};

// How a rank's shard is cut from the full tensor.
enum class Split : std::uint8_t {
  kReplicated,  // the whole tensor on every rank
  kRows,        // a range of rows (of elements, for a vector)
  kCols,        // a range of columns (copied)
};
// Which range: the rank's query heads' rows, its kv heads', its intermediate slice, its vocab,
// its slice of an expert's intermediate dimension (ShardPlan::expert_intermediate*).
enum class Part : std::uint8_t {
  kNone,
  kQHeads,
  kKvHeads,
  kIntermediate,
  kVocab,
  kExpertIntermediate,
  // MLA: the rank's query heads' rows of q_b_proj / q_proj (qk_head_dim per head), of kv_b_proj
  // (qk_nope_head_dim + v_head_dim per head), its columns of o_proj (v_head_dim per head)
  kMlaQHeads,
  kMlaKvBHeads,
  kMlaOHeads,
  kSharedIntermediate,  // the rank's slice of the shared experts' intermediate dimension
};

// Which layers hold a tensor: none (a model-level tensor), every layer (a layer's own norms), or
// the layers whose attention, or whose MLP, is of one kind (ModelConfig::layer_kind).
struct Scope {
  enum class Of : std::uint8_t { kModel, kEveryLayer, kAttention, kMlp };
  Of of = Of::kModel;
  AttentionKind attention = AttentionKind::kGqa;  // of == kAttention
  MlpKind mlp = MlpKind::kDenseSwiGlu;            // of == kMlp

  static constexpr Scope model() { return {Of::kModel}; }
  static constexpr Scope every_layer() { return {Of::kEveryLayer}; }
  static constexpr Scope in(AttentionKind kind) { return {Of::kAttention, kind}; }
  static constexpr Scope in(MlpKind kind) { return {Of::kMlp, AttentionKind::kGqa, kind}; }
  bool per_layer() const { return of != Of::kModel; }
  // True when a layer of this kind holds the tensor (false for a model-level one).
  bool holds(LayerKind kind) const;
};

// When a tensor is in the checkpoint (besides its scope).
enum class Presence : std::uint8_t {
  kAlways,
  kQkvBias,         // Qwen2, or attention_bias = true
  kOBias,           // attention_bias = true
  kQkNorm,          // Qwen3: per-head RMSNorm of q and k
  kMlpExperts,      // MoE tensors named as Qwen3-MoE names them (ModelConfig::MoeNaming)
  kBlockSparseMoe,  // ... as Mixtral names them
  kQLora,           // MLA with q_lora_rank set: q_a_proj, q_a_layernorm, q_b_proj
  kNoQLora,         // MLA with q_lora_rank null: q_proj
  kNoauxTcBias,     // DeepSeek-V3's router (MoeRouterConfig::kSigmoidNoauxTc)
  kSharedExperts,   // n_shared_experts > 0
};

struct TensorSpec {
  Role role;
  std::string_view name;  // full name, or the suffix after "model.layers.{i}." when per-layer
  Scope scope;
  Dim rows, cols;  // cols = kNone: a vector [rows]
  Split split;
  Part part;
  Presence presence;
  WeightUse use;
  bool widen_f32;  // biases are widened to float32 at load
  // Read from this tensor instead when tie_word_embeddings is true (lm_head: the embedding).
  std::string_view tied_source = {};

  bool per_layer() const { return scope.per_layer(); }
  // One tensor per routed expert: the name holds the expert index as "{e}".
  bool per_expert() const { return name.find("{e}") != std::string_view::npos; }
};

// The Llama family's table, model-level entries first; the lm_head entry precedes the embedding
// (a tied embedding is prepared from lm_head's prepared copy).
std::span<const TensorSpec> llama_schema();
// The DeepSeek-V3 family's table (MLA attention, dense and MoE MLPs with the router bias and
// the shared experts), the Llama table's model-level rows and naming; with
// ModelConfig::tensor_prefix before every name (Kimi-K2.5: "language_model.").
std::span<const TensorSpec> deepseek_schema();
// The table that describes `config`'s checkpoint: deepseek_schema() for an MLA model, else
// llama_schema().
std::span<const TensorSpec> target_schema(const ModelConfig& config);
// An EAGLE-3 head's table (SafeAILab / SGLang names: fc, midlayer.*, norm, lm_head over the
// draft vocabulary; all model-level). The midlayer and lm_head split like the target's layers
// when the head is sharded (draft.placement = "sharded"); loaded with tp = 1 it is whole (the
// replicated head). fc and the norms are always whole. Its embedding is the target's and
// d2t / t2d are not float tensors: neither is in the table (eagle3_model.h loads them).
std::span<const TensorSpec> eagle3_schema();

// True when config.json implies the tensor: its presence rule holds and, for a per-layer one,
// layer `layer`'s kind holds it (`layer` is ignored for a model-level tensor).
bool present(const TensorSpec& spec, const ModelConfig& config, int layer);
// The full checkpoint name of an entry ("model.layers.3.self_attn.k_proj.weight"; expert
// `expert` of a per-expert one: "model.layers.3.mlp.experts.17.up_proj.weight").
std::string tensor_name(const TensorSpec& spec, int layer, int expert = -1);

// The full checkpoint name of the token embedding (with ModelConfig::tensor_prefix:
// "language_model.model.embed_tokens.weight" for Kimi-K2.5).
std::string embedding_tensor(const ModelConfig& config);

// The shape config.json implies for a tensor name of the schema ({} for names it does not
// know, a layer past num_hidden_layers, or a layer whose kind has no such tensor); `why` gets
// the fields, e.g.
// "[num_key_value_heads*head_dim = 4*32 = 128, hidden_size = 256]".
std::vector<std::int64_t> schema_shape(const ModelConfig& config, const std::string& name,
                                       std::string* why = nullptr);

// One line naming a model's quantization (the result file's provenance, `compare`): "none", or
// the config's description and, per kind, the schema rows stored so ("compressed-tensors
// pack-quantized: group_0 int4 group 32 symmetric; 4 ignore entries; int4:
// mlp.experts.{e}.down_proj, ..."), a row quantized in only some layers with "(k of n layers)".
std::string quantization_summary(const ModelConfig& config);

// One rank's shard on the host, as the schema cuts it: row ranges view the mapped checkpoint,
// column ranges and widened biases are copies owned here. The Checkpoint must outlive it.
struct HostWeights {
  ShardPlan plan;
  std::array<HostTensor, kNumRoles> model{};              // model-level roles
  std::vector<std::array<HostTensor, kNumRoles>> layers;  // per-layer roles
  // Per layer and per-expert role: the stack of the rank's experts (plan.experts of them, in
  // index order), each one's shard.
  std::vector<std::array<std::vector<HostTensor>, kNumRoles>> experts;
  std::vector<std::vector<std::byte>> owned;  // the copies

  const HostTensor& get(const TensorSpec& spec, int layer) const {
    return spec.per_layer() ? layers[layer][static_cast<int>(spec.role)]
                            : model[static_cast<int>(spec.role)];
  }
  const std::vector<HostTensor>& stack(const TensorSpec& spec, int layer) const {
    return experts[layer][static_cast<int>(spec.role)];
  }
  // Bytes of every tensor held (what a device upload needs).
  std::size_t bytes() const;
};

// Loads this rank's shard of `checkpoint` for tensor parallelism tp (rank tp_rank) and expert
// parallelism ep (0: the default, ShardPlan::make); every tensor is checked against the shape
// config.json implies (errors name the tensor, the file and the config fields). Per-layer row
// `layer` is read from the checkpoint's layer first_layer + layer (an MTP module: its one
// layer past the decoder's, docs/mtp-design.md).
HostWeights load_host_weights(const Checkpoint& checkpoint, int tp, int tp_rank,
                              std::span<const TensorSpec> schema = llama_schema(), int ep = 0,
                              int first_layer = 0);

}  // namespace specrun
