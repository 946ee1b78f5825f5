#include "model/weight_schema.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/quant_weights.h"

namespace specrun {

namespace {

constexpr std::string_view kLayerPrefix = "model.layers.";

// The scopes of the tables' rows.
constexpr Scope kModel = Scope::model();
constexpr Scope kLayer = Scope::every_layer();
constexpr Scope kGqa = Scope::in(AttentionKind::kGqa);
constexpr Scope kSwiGlu = Scope::in(MlpKind::kDenseSwiGlu);
constexpr Scope kMoe = Scope::in(MlpKind::kMoe);
constexpr Presence kQwenMoe = Presence::kMlpExperts;
constexpr Presence kMixtral = Presence::kBlockSparseMoe;
constexpr Scope kMla = Scope::in(AttentionKind::kMla);

// clang-format off
// Model-level rows of the decoders (Llama family, DeepSeek-V3 family).
constexpr TensorSpec kModelRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kLmHead,       "lm_head.weight",                     kModel,  Dim::kVocab,         Dim::kHidden,  Split::kRows,       Part::kVocab,        Presence::kAlways,   WeightUse::kLinear,    false,
   "model.embed_tokens.weight"},
  {Role::kEmbed,        "model.embed_tokens.weight",          kModel,  Dim::kVocab,         Dim::kHidden,  Split::kRows,       Part::kVocab,        Presence::kAlways,   WeightUse::kEmbedding, false},
  {Role::kFinalNorm,    "model.norm.weight",                  kModel,  Dim::kHidden,        Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kVector,    false},
};
// Every decoder layer's two norms.
constexpr TensorSpec kLayerNormRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kInputNorm,    "input_layernorm.weight",             kLayer,  Dim::kHidden,        Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kVector,    false},
  {Role::kPostAttentionNorm, "post_attention_layernorm.weight", kLayer,  Dim::kHidden,       Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kVector,    false},
};
// GQA attention (the Llama family).
constexpr TensorSpec kGqaRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kQ,            "self_attn.q_proj.weight",            kGqa,    Dim::kQWidth,        Dim::kHidden,  Split::kRows,       Part::kQHeads,       Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kK,            "self_attn.k_proj.weight",            kGqa,    Dim::kKvWidth,       Dim::kHidden,  Split::kRows,       Part::kKvHeads,      Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kV,            "self_attn.v_proj.weight",            kGqa,    Dim::kKvWidth,       Dim::kHidden,  Split::kRows,       Part::kKvHeads,      Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kO,            "self_attn.o_proj.weight",            kGqa,    Dim::kHidden,        Dim::kQWidth,  Split::kCols,       Part::kQHeads,       Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kQBias,        "self_attn.q_proj.bias",              kGqa,    Dim::kQWidth,        Dim::kNone,    Split::kRows,       Part::kQHeads,       Presence::kQkvBias,  WeightUse::kVector,    true},
  {Role::kKBias,        "self_attn.k_proj.bias",              kGqa,    Dim::kKvWidth,       Dim::kNone,    Split::kRows,       Part::kKvHeads,      Presence::kQkvBias,  WeightUse::kVector,    true},
  {Role::kVBias,        "self_attn.v_proj.bias",              kGqa,    Dim::kKvWidth,       Dim::kNone,    Split::kRows,       Part::kKvHeads,      Presence::kQkvBias,  WeightUse::kVector,    true},
  {Role::kOBias,        "self_attn.o_proj.bias",              kGqa,    Dim::kHidden,        Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kOBias,    WeightUse::kVector,    true},
  {Role::kQNorm,        "self_attn.q_norm.weight",            kGqa,    Dim::kHeadDim,       Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kQkNorm,   WeightUse::kVector,    false},
  {Role::kKNorm,        "self_attn.k_norm.weight",            kGqa,    Dim::kHeadDim,       Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kQkNorm,   WeightUse::kVector,    false},
};
// A dense SwiGLU MLP.
constexpr TensorSpec kDenseMlpRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kGate,         "mlp.gate_proj.weight",               kSwiGlu, Dim::kIntermediate,  Dim::kHidden,  Split::kRows,       Part::kIntermediate, Presence::kAlways,   WeightUse::kGateUp,    false},
  {Role::kUp,           "mlp.up_proj.weight",                 kSwiGlu, Dim::kIntermediate,  Dim::kHidden,  Split::kRows,       Part::kIntermediate, Presence::kAlways,   WeightUse::kGateUp,    false},
  {Role::kDown,         "mlp.down_proj.weight",               kSwiGlu, Dim::kHidden,        Dim::kIntermediate, Split::kCols,  Part::kIntermediate, Presence::kAlways,   WeightUse::kLinear,    false},
};
// Mixture of experts named mlp.* (Qwen3-MoE, DeepSeek-V3): the router, and every routed expert's gate,
// up and down ({e}: the expert).
constexpr TensorSpec kMlpExpertRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kRouter,       "mlp.gate.weight",                    kMoe,    Dim::kExperts,       Dim::kHidden,  Split::kReplicated, Part::kNone,         kQwenMoe,            WeightUse::kLinear,    false},
  {Role::kExpertGate,   "mlp.experts.{e}.gate_proj.weight",   kMoe,    Dim::kMoeIntermediate, Dim::kHidden, Split::kRows,      Part::kExpertIntermediate, kQwenMoe,      WeightUse::kGateUp,    false},
  {Role::kExpertUp,     "mlp.experts.{e}.up_proj.weight",     kMoe,    Dim::kMoeIntermediate, Dim::kHidden, Split::kRows,      Part::kExpertIntermediate, kQwenMoe,      WeightUse::kGateUp,    false},
  {Role::kExpertDown,   "mlp.experts.{e}.down_proj.weight",   kMoe,    Dim::kHidden,        Dim::kMoeIntermediate, Split::kCols, Part::kExpertIntermediate, kQwenMoe,    WeightUse::kLinear,    false},
};
// Mixture of experts named as Mixtral names them.
constexpr TensorSpec kBlockSparseMoeRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kRouter,       "block_sparse_moe.gate.weight",       kMoe,    Dim::kExperts,       Dim::kHidden,  Split::kReplicated, Part::kNone,         kMixtral,            WeightUse::kLinear,    false},
  {Role::kExpertGate,   "block_sparse_moe.experts.{e}.w1.weight", kMoe, Dim::kMoeIntermediate, Dim::kHidden, Split::kRows,     Part::kExpertIntermediate, kMixtral,      WeightUse::kGateUp,    false},
  {Role::kExpertUp,     "block_sparse_moe.experts.{e}.w3.weight", kMoe, Dim::kMoeIntermediate, Dim::kHidden, Split::kRows,     Part::kExpertIntermediate, kMixtral,      WeightUse::kGateUp,    false},
  {Role::kExpertDown,   "block_sparse_moe.experts.{e}.w2.weight", kMoe, Dim::kHidden,       Dim::kMoeIntermediate, Split::kCols, Part::kExpertIntermediate, kMixtral,    WeightUse::kLinear,    false},
};
// MLA attention (the DeepSeek-V3 family): the latent path replicated, the heads split.
constexpr TensorSpec kMlaRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kQA,           "self_attn.q_a_proj.weight",          kMla,    Dim::kQLoraRank,     Dim::kHidden,  Split::kReplicated, Part::kNone,         Presence::kQLora,    WeightUse::kLinear,    false},
  {Role::kQANorm,       "self_attn.q_a_layernorm.weight",     kMla,    Dim::kQLoraRank,     Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kQLora,    WeightUse::kVector,    false},
  {Role::kQB,           "self_attn.q_b_proj.weight",          kMla,    Dim::kMlaQWidth,     Dim::kQLoraRank, Split::kRows,     Part::kMlaQHeads,    Presence::kQLora,    WeightUse::kLinear,    false},
  {Role::kQ,            "self_attn.q_proj.weight",            kMla,    Dim::kMlaQWidth,     Dim::kHidden,  Split::kRows,       Part::kMlaQHeads,    Presence::kNoQLora,  WeightUse::kLinear,    false},
  {Role::kKvA,          "self_attn.kv_a_proj_with_mqa.weight", kMla,   Dim::kKvAWidth,      Dim::kHidden,  Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kKvANorm,      "self_attn.kv_a_layernorm.weight",    kMla,    Dim::kKvLoraRank,    Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kVector,    false},
  {Role::kKvB,          "self_attn.kv_b_proj.weight",         kMla,    Dim::kMlaKvBWidth,   Dim::kKvLoraRank, Split::kRows,    Part::kMlaKvBHeads,  Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kO,            "self_attn.o_proj.weight",            kMla,    Dim::kHidden,        Dim::kMlaOWidth, Split::kCols,     Part::kMlaOHeads,    Presence::kAlways,   WeightUse::kLinear,    false},
};
// DeepSeek-V3's router bias and shared experts.
constexpr TensorSpec kDeepseekMoeRows[] = {
  // role               name                                  scope    rows                 cols           split               part                 presence             use                   widen
  {Role::kRouterBias,   "mlp.gate.e_score_correction_bias",   kMoe,    Dim::kExperts,       Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kNoauxTcBias, WeightUse::kVector, true},
  {Role::kSharedGate,   "mlp.shared_experts.gate_proj.weight", kMoe,   Dim::kSharedIntermediate, Dim::kHidden, Split::kRows,   Part::kSharedIntermediate, Presence::kSharedExperts, WeightUse::kGateUp, false},
  {Role::kSharedUp,     "mlp.shared_experts.up_proj.weight",  kMoe,    Dim::kSharedIntermediate, Dim::kHidden, Split::kRows,   Part::kSharedIntermediate, Presence::kSharedExperts, WeightUse::kGateUp, false},
  {Role::kSharedDown,   "mlp.shared_experts.down_proj.weight", kMoe,   Dim::kHidden,        Dim::kSharedIntermediate, Split::kCols, Part::kSharedIntermediate, Presence::kSharedExperts, WeightUse::kLinear, false},
};
// clang-format on

// The rows of `parts`, in order, as one table.
template <std::size_t... N>
constexpr auto join(const TensorSpec (&... parts)[N]) {
  std::array<TensorSpec, (N + ...)> out{};
  std::size_t at = 0;
  ((std::copy(std::begin(parts), std::end(parts), out.begin() + at), at += N), ...);
  return out;
}

// The Llama family's table; the DeepSeek-V3 family's.
constexpr auto kLlamaSchema =
    join(kModelRows, kLayerNormRows, kGqaRows, kDenseMlpRows, kMlpExpertRows, kBlockSparseMoeRows);
constexpr auto kDeepseekSchema =
    join(kModelRows, kLayerNormRows, kMlaRows, kDenseMlpRows, kMlpExpertRows, kDeepseekMoeRows);

// clang-format off
constexpr TensorSpec kEagle3Schema[] = {
  {Role::kFc,           "fc.weight",                          kModel,  Dim::kHidden,        Dim::kFcIn,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kInputNorm,    "midlayer.input_layernorm.weight",    kModel,  Dim::kHidden,        Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kVector,    false},
  {Role::kHiddenNorm,   "midlayer.hidden_norm.weight",        kModel,  Dim::kHidden,        Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kVector,    false},
  {Role::kQ,            "midlayer.self_attn.q_proj.weight",   kModel,  Dim::kQWidth,        Dim::kTwoHidden, Split::kRows,    Part::kQHeads,     Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kK,            "midlayer.self_attn.k_proj.weight",   kModel,  Dim::kKvWidth,       Dim::kTwoHidden, Split::kRows,    Part::kKvHeads,    Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kV,            "midlayer.self_attn.v_proj.weight",   kModel,  Dim::kKvWidth,       Dim::kTwoHidden, Split::kRows,    Part::kKvHeads,    Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kO,            "midlayer.self_attn.o_proj.weight",   kModel,  Dim::kHidden,        Dim::kQWidth,  Split::kCols,       Part::kQHeads,       Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kPostAttentionNorm, "midlayer.post_attention_layernorm.weight", kModel,  Dim::kHidden, Dim::kNone, Split::kReplicated, Part::kNone,        Presence::kAlways,   WeightUse::kVector,    false},
  {Role::kGate,         "midlayer.mlp.gate_proj.weight",      kModel,  Dim::kIntermediate,  Dim::kHidden,  Split::kRows,       Part::kIntermediate,  Presence::kAlways,   WeightUse::kGateUp,    false},
  {Role::kUp,           "midlayer.mlp.up_proj.weight",        kModel,  Dim::kIntermediate,  Dim::kHidden,  Split::kRows,       Part::kIntermediate,  Presence::kAlways,   WeightUse::kGateUp,    false},
  {Role::kDown,         "midlayer.mlp.down_proj.weight",      kModel,  Dim::kHidden,        Dim::kIntermediate, Split::kCols,  Part::kIntermediate,  Presence::kAlways,   WeightUse::kLinear,    false},
  {Role::kFinalNorm,    "norm.weight",                        kModel,  Dim::kHidden,        Dim::kNone,    Split::kReplicated, Part::kNone,         Presence::kAlways,   WeightUse::kVector,    false},
  {Role::kLmHead,       "lm_head.weight",                     kModel,  Dim::kVocab,         Dim::kHidden,  Split::kRows,       Part::kVocab,        Presence::kAlways,   WeightUse::kLinear,    false},
};
// clang-format on

std::int64_t dim_value(Dim d, const ModelConfig& c) {
  switch (d) {
    case Dim::kNone:
      return 0;
    case Dim::kHidden:
      return c.hidden_size;
    case Dim::kIntermediate:
      return c.intermediate_size;
    case Dim::kVocab:
      return c.vocab_size;
    case Dim::kQWidth:
      return static_cast<std::int64_t>(c.num_heads) * c.head_dim;
    case Dim::kKvWidth:
      return static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
    case Dim::kHeadDim:
      return c.head_dim;
    case Dim::kTwoHidden:
      return 2 * static_cast<std::int64_t>(c.hidden_size);
    case Dim::kFcIn:
      return 3 * static_cast<std::int64_t>(c.target_hidden_size);
    case Dim::kExperts:
      return c.num_experts;
    case Dim::kMoeIntermediate:
      return c.moe_intermediate_size;
    case Dim::kQLoraRank:
      return c.mla.q_lora_rank;
    case Dim::kKvLoraRank:
      return c.mla.kv_lora_rank;
    case Dim::kKvAWidth:
      return c.mla.cache_floats();
    case Dim::kMlaQWidth:
      return static_cast<std::int64_t>(c.num_heads) * c.mla.qk_head_dim();
    case Dim::kMlaKvBWidth:
      return static_cast<std::int64_t>(c.num_heads) * (c.mla.qk_nope_head_dim + c.mla.v_head_dim);
    case Dim::kMlaOWidth:
      return static_cast<std::int64_t>(c.num_heads) * c.mla.v_head_dim;
    case Dim::kSharedIntermediate:
      return static_cast<std::int64_t>(c.moe_intermediate_size) * c.router.n_shared_experts;
  }
  return 0;
}

// "hidden_size = 256", "num_key_value_heads*head_dim = 4*32 = 128".
std::string dim_text(Dim d, const ModelConfig& c) {
  std::ostringstream os;
  switch (d) {
    case Dim::kNone:
      break;
    case Dim::kHidden:
      os << "hidden_size = " << c.hidden_size;
      break;
    case Dim::kIntermediate:
      os << "intermediate_size = " << c.intermediate_size;
      break;
    case Dim::kVocab:
      os << "vocab_size = " << c.vocab_size;
      break;
    case Dim::kQWidth:
      os << "num_attention_heads*head_dim = " << c.num_heads << "*" << c.head_dim << " = "
         << dim_value(d, c);
      break;
    case Dim::kKvWidth:
      os << "num_key_value_heads*head_dim = " << c.num_kv_heads << "*" << c.head_dim << " = "
         << dim_value(d, c);
      break;
    case Dim::kHeadDim:
      os << "head_dim = " << c.head_dim;
      break;
    case Dim::kTwoHidden:
      os << "2*hidden_size = " << dim_value(d, c);
      break;
    case Dim::kFcIn:
      os << "3*target hidden_size = " << dim_value(d, c);
      break;
    case Dim::kExperts:
      os << (c.model_type == "mixtral" ? "num_local_experts"
             : c.is_mla()              ? "n_routed_experts"
                                       : "num_experts")
         << " = " << c.num_experts;
      break;
    case Dim::kMoeIntermediate:
      os << (c.model_type == "mixtral" ? "intermediate_size" : "moe_intermediate_size") << " = "
         << c.moe_intermediate_size;
      break;
    case Dim::kQLoraRank:
      os << "q_lora_rank = " << c.mla.q_lora_rank;
      break;
    case Dim::kKvLoraRank:
      os << "kv_lora_rank = " << c.mla.kv_lora_rank;
      break;
    case Dim::kKvAWidth:
      os << "kv_lora_rank+qk_rope_head_dim = " << c.mla.kv_lora_rank << "+"
         << c.mla.qk_rope_head_dim << " = " << dim_value(d, c);
      break;
    case Dim::kMlaQWidth:
      os << "num_attention_heads*(qk_nope_head_dim+qk_rope_head_dim) = " << c.num_heads << "*("
         << c.mla.qk_nope_head_dim << "+" << c.mla.qk_rope_head_dim << ") = " << dim_value(d, c);
      break;
    case Dim::kMlaKvBWidth:
      os << "num_attention_heads*(qk_nope_head_dim+v_head_dim) = " << c.num_heads << "*("
         << c.mla.qk_nope_head_dim << "+" << c.mla.v_head_dim << ") = " << dim_value(d, c);
      break;
    case Dim::kMlaOWidth:
      os << "num_attention_heads*v_head_dim = " << c.num_heads << "*" << c.mla.v_head_dim << " = "
         << dim_value(d, c);
      break;
    case Dim::kSharedIntermediate:
      os << "moe_intermediate_size*n_shared_experts = " << c.moe_intermediate_size << "*"
         << c.router.n_shared_experts << " = " << dim_value(d, c);
      break;
  }
  return os.str();
}

// True when `suffix` (a name after "model.layers.{i}.") is the entry's: equal, or for a
// per-expert entry equal with "{e}" an expert index of the model.
bool names_match(const TensorSpec& s, const std::string& suffix, const ModelConfig& c) {
  if (!s.per_expert()) return s.name == suffix;
  const std::size_t at = s.name.find("{e}");
  const std::string_view head = s.name.substr(0, at), tail = s.name.substr(at + 3);
  if (suffix.size() <= head.size() + tail.size() || suffix.compare(0, head.size(), head) != 0 ||
      suffix.compare(suffix.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = suffix.substr(head.size(), suffix.size() - head.size() - tail.size());
  return digits.size() <= 6 &&
         std::all_of(digits.begin(), digits.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; }) &&
         std::stoi(digits) < c.num_experts;
}

std::vector<std::int64_t> spec_shape(const TensorSpec& s, const ModelConfig& c) {
  if (s.cols == Dim::kNone) return {dim_value(s.rows, c)};
  return {dim_value(s.rows, c), dim_value(s.cols, c)};
}

// The first index and count of a rank's range.
std::pair<std::int64_t, std::int64_t> part_range(Part part, const ShardPlan& p,
                                                 const ModelConfig& c) {
  const int head_dim = c.head_dim;
  // A range of the rank's query heads, `width` rows (or columns) each.
  auto heads = [&](int width) {
    return std::pair<std::int64_t, std::int64_t>{static_cast<std::int64_t>(p.q_head_begin) * width,
                                                 static_cast<std::int64_t>(p.q_heads) * width};
  };
  switch (part) {
    case Part::kMlaQHeads:
      return heads(c.mla.qk_head_dim());
    case Part::kMlaKvBHeads:
      return heads(c.mla.qk_nope_head_dim + c.mla.v_head_dim);
    case Part::kMlaOHeads:
      return heads(c.mla.v_head_dim);
    case Part::kSharedIntermediate:
      return {p.shared_intermediate_begin, p.shared_intermediate};
    case Part::kNone:
      return {0, 0};
    case Part::kQHeads:
      return {static_cast<std::int64_t>(p.q_head_begin) * head_dim,
              static_cast<std::int64_t>(p.q_heads) * head_dim};
    case Part::kKvHeads:
      return {static_cast<std::int64_t>(p.kv_head_begin) * head_dim,
              static_cast<std::int64_t>(p.kv_heads) * head_dim};
    case Part::kIntermediate:
      return {p.intermediate_begin, p.intermediate};
    case Part::kVocab:
      return {p.vocab_begin, p.vocab};
    case Part::kExpertIntermediate:
      return {p.expert_intermediate_begin, p.expert_intermediate};
  }
  return {0, 0};
}

void check_divides(int value, int tp, const char* field, const std::string& source) {
  SPEC_INPUT_CHECK(value % tp == 0, source << ": " << field << " = " << value
                                           << " is not divisible by tp = " << tp
                                           << ": choose a tensor-parallel size that "
                                              "divides it");
}

// Cuts a rank's shard of tensor `t` by `spec`; copies go to w.owned.
HostTensor cut(const TensorView& t, const TensorSpec& spec, const ShardPlan& plan,
               const ModelConfig& config, HostWeights& w) {
  const std::size_t es = dtype_size(t.dtype);
  const bool vector = spec.cols == Dim::kNone;
  const std::int64_t rows = vector ? 1 : t.dim(0);
  const std::int64_t cols = vector ? t.dim(0) : t.dim(1);
  auto [begin, count] = part_range(spec.part, plan, config);
  HostTensor h{t.data, t.dtype, static_cast<int>(rows), static_cast<int>(cols)};
  if (spec.split == Split::kRows && !vector) {  // a view of the rank's rows
    h.data = t.data + static_cast<std::size_t>(begin) * static_cast<std::size_t>(cols) * es;
    h.rows = static_cast<int>(count);
  } else if (spec.split == Split::kRows || (spec.split == Split::kCols && count != cols)) {
    // Columns (elements of a vector): copied unless all of them.
    std::vector<std::byte> copy(static_cast<std::size_t>(rows) * count * es);
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(copy.data() + static_cast<std::size_t>(r * count) * es,
                  t.data + static_cast<std::size_t>(r * cols + begin) * es,
                  static_cast<std::size_t>(count) * es);
    w.owned.push_back(std::move(copy));
    h.data = w.owned.back().data();
    h.cols = static_cast<int>(count);
  }
  if (spec.widen_f32 && h.dtype != DType::kF32) {
    std::vector<std::byte> wide(static_cast<std::size_t>(h.rows) * h.cols * sizeof(float));
    for (std::size_t i = 0; i < static_cast<std::size_t>(h.rows) * h.cols; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, h.data + i * 2, 2);
      const float f = h.dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
      std::memcpy(wide.data() + i * sizeof(float), &f, sizeof(float));
    }
    w.owned.push_back(std::move(wide));
    h.data = w.owned.back().data();
    h.dtype = DType::kF32;
  }
  return h;
}

}  // namespace

ShardPlan ShardPlan::make(const ModelConfig& c, int tp, int tp_rank, const std::string& source,
                          int ep) {
  SPEC_INPUT_CHECK(tp >= 1, "tensor-parallel size must be at least 1, got " << tp);
  SPEC_CHECK(tp_rank >= 0 && tp_rank < tp, "tp rank " << tp_rank << " outside 0.." << tp - 1);
  check_divides(c.num_heads, tp, "num_attention_heads", source);
  if (tp <= c.num_kv_heads) {
    check_divides(c.num_kv_heads, tp, "num_key_value_heads", source);
  } else {
    SPEC_INPUT_CHECK(tp % c.num_kv_heads == 0,
                     source << ": num_key_value_heads = " << c.num_kv_heads
                            << " is smaller than tp = " << tp
                            << " and does not divide it, so kv heads cannot be replicated evenly: "
                               "choose a tp that divides or is a multiple of num_key_value_heads");
  }
  // Mixtral's intermediate_size is its experts' width: only dense layers split it by tp.
  const bool all_moe = c.num_layers > 0 && !c.has_dense_layers();
  if (!all_moe) check_divides(c.intermediate_size, tp, "intermediate_size", source);
  check_divides(c.vocab_size, tp, "vocab_size", source);

  ShardPlan p;
  p.tp = tp;
  p.tp_rank = tp_rank;
  p.q_heads = c.num_heads / tp;
  p.q_head_begin = tp_rank * p.q_heads;
  const int group = c.num_heads / c.num_kv_heads;  // query heads per kv head
  p.kv_heads = std::max(1, c.num_kv_heads / tp);
  p.kv_head_begin = p.q_head_begin / group;
  p.intermediate = c.intermediate_size / tp;
  p.intermediate_begin = tp_rank * p.intermediate;
  p.vocab = c.vocab_size / tp;
  p.vocab_begin = tp_rank * p.vocab;
  if (!c.has_moe_layers()) return p;
  if (c.router.n_shared_experts > 0) {
    const int shared = c.moe_intermediate_size * c.router.n_shared_experts;
    check_divides(shared, tp, "moe_intermediate_size * n_shared_experts", source);
    p.shared_intermediate = shared / tp;
    p.shared_intermediate_begin = tp_rank * p.shared_intermediate;
  }

  p.ep = ep == 0 ? tp : ep;
  SPEC_INPUT_CHECK(p.ep == 1 || p.ep == tp,
                   "expert parallelism parallel.ep = "
                       << p.ep << " is not supported with tp = " << tp
                       << ": use 1 (every expert on every rank, each expert's intermediate "
                          "dimension split by tp) or "
                       << tp << " (= tp: the experts split over the tensor-parallel ranks)");
  const char* experts_field = c.model_type == "mixtral" ? "num_local_experts" : "num_experts";
  SPEC_INPUT_CHECK(c.num_experts % p.ep == 0,
                   source << ": " << experts_field << " = " << c.num_experts
                          << " is not divisible by parallel.ep = " << p.ep
                          << ": the experts cannot be split evenly over the expert-parallel "
                             "ranks; choose a tp (or parallel.ep = 1) that divides it");
  p.experts = c.num_experts / p.ep;
  p.expert_begin = p.ep == 1 ? 0 : tp_rank * p.experts;
  const int split = p.ep == 1 ? tp : 1;  // how many ways each expert is cut
  check_divides(c.moe_intermediate_size, split,
                c.model_type == "mixtral" ? "intermediate_size" : "moe_intermediate_size", source);
  p.expert_intermediate = c.moe_intermediate_size / split;
  p.expert_intermediate_begin = p.ep == 1 ? tp_rank * p.expert_intermediate : 0;
  return p;
}

std::span<const TensorSpec> llama_schema() {
  return kLlamaSchema;
}

std::span<const TensorSpec> deepseek_schema() {
  return kDeepseekSchema;
}

std::span<const TensorSpec> target_schema(const ModelConfig& config) {
  return config.is_mla() ? deepseek_schema() : llama_schema();
}

std::span<const TensorSpec> eagle3_schema() {
  return kEagle3Schema;
}

Role up_of(Role gate) {
  switch (gate) {
    case Role::kGate:
      return Role::kUp;
    case Role::kExpertGate:
      return Role::kExpertUp;
    case Role::kSharedGate:
      return Role::kSharedUp;
    default:
      SPEC_FAIL("up_of: not a gate role");
  }
}

bool is_up(Role r) {
  return r == Role::kUp || r == Role::kExpertUp || r == Role::kSharedUp;
}

bool Scope::holds(LayerKind kind) const {
  switch (of) {
    case Of::kModel:
      return false;
    case Of::kEveryLayer:
      return true;
    case Of::kAttention:
      return kind.attention == attention;
    case Of::kMlp:
      return kind.mlp == mlp;
  }
  return false;
}

bool present(const TensorSpec& spec, const ModelConfig& c, int layer) {
  if (spec.per_layer() && !spec.scope.holds(c.layer_kind(layer))) return false;
  switch (spec.presence) {
    case Presence::kAlways:
      return true;
    case Presence::kQkvBias:
      return c.qkv_bias;
    case Presence::kOBias:
      return c.o_bias;
    case Presence::kQkNorm:
      return c.qk_norm;
    case Presence::kMlpExperts:
      return c.moe_naming == ModelConfig::MoeNaming::kMlpExperts;
    case Presence::kBlockSparseMoe:
      return c.moe_naming == ModelConfig::MoeNaming::kBlockSparseMoe;
    case Presence::kQLora:
      return c.mla.q_lora_rank > 0;
    case Presence::kNoQLora:
      return c.mla.q_lora_rank == 0;
    case Presence::kNoauxTcBias:
      return c.router.kind == MoeRouterConfig::kSigmoidNoauxTc;
    case Presence::kSharedExperts:
      return c.router.n_shared_experts > 0;
  }
  return false;
}

std::string embedding_tensor(const ModelConfig& config) {
  return config.tensor_prefix + "model.embed_tokens.weight";
}

std::string tensor_name(const TensorSpec& spec, int layer, int expert) {
  std::string name(spec.name);
  if (spec.per_expert()) {
    SPEC_CHECK(expert >= 0, "tensor_name: " << spec.name << " needs an expert index");
    name.replace(name.find("{e}"), 3, std::to_string(expert));
  }
  if (!spec.per_layer()) return name;
  return std::string(kLayerPrefix) + std::to_string(layer) + "." + name;
}

std::vector<std::int64_t> schema_shape(const ModelConfig& c, const std::string& full_name,
                                       std::string* why) {
  const TensorSpec* found = nullptr;
  if (full_name.rfind(c.tensor_prefix, 0) != 0) return {};
  const std::string name = full_name.substr(c.tensor_prefix.size());
  const std::span<const TensorSpec> schema = target_schema(c);
  if (name.rfind(kLayerPrefix, 0) == 0) {
    const std::string rest = name.substr(kLayerPrefix.size());
    const std::size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0) return {};
    const std::string digits = rest.substr(0, dot);
    if (!std::all_of(digits.begin(), digits.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; }) ||
        digits.size() > 6 || std::stoi(digits) >= c.num_layers)
      return {};
    const std::string suffix = rest.substr(dot + 1);
    const LayerKind kind = c.layer_kind(std::stoi(digits));
    for (const TensorSpec& s : schema)
      if (s.per_layer() && s.scope.holds(kind) && names_match(s, suffix, c)) found = &s;
  } else {
    for (const TensorSpec& s : schema)
      if (!s.per_layer() && s.name == name) found = &s;
  }
  if (found == nullptr) return {};
  if (why != nullptr) {
    *why = "[" + dim_text(found->rows, c);
    if (found->cols != Dim::kNone) *why += ", " + dim_text(found->cols, c);
    *why += "]";
  }
  return spec_shape(*found, c);
}

std::size_t HostWeights::bytes() const {
  std::size_t total = 0;
  for (const HostTensor& t : model) total += t.bytes();
  for (const auto& layer : layers)
    for (const HostTensor& t : layer) total += t.bytes();
  for (const auto& layer : experts)
    for (const std::vector<HostTensor>& stack : layer)
      for (const HostTensor& t : stack) total += t.bytes();
  return total;
}

namespace {

// What compressed-tensors' class targets see of a schema row: DeepSeek's router (MoEGate) is not
// an nn.Linear; Qwen3-MoE's and Mixtral's routers are.
ModuleClass module_class(const TensorSpec& s, const ModelConfig& c) {
  if (s.use == WeightUse::kEmbedding) return ModuleClass::kEmbedding;
  if (s.role == Role::kRouter) return c.is_mla() ? ModuleClass::kRouter : ModuleClass::kLinear;
  if (s.use == WeightUse::kLinear || s.use == WeightUse::kGateUp) return ModuleClass::kLinear;
  return ModuleClass::kOther;
}

// One schema row's tensor `name` on this rank: float as before, or kept packed when
// quantization_config and the file agree that its module is quantized (quant_weights.h).
HostTensor load_tensor(const Checkpoint& ckpt, const TensorSpec& s, const std::string& name,
                       bool tied_head, HostWeights& w) {
  const ModelConfig& c = ckpt.config();
  const QuantDecision d = resolve_storage(
      ckpt, s, name, tied_head ? ModuleClass::kEmbedding : module_class(s, c), tied_head);
  if (d.kind == QuantKind::kNone) return cut(ckpt.tensor(name, spec_shape(s, c)), s, w.plan, c, w);
  std::string why;
  const std::vector<std::int64_t> shape = spec_shape(s, c);
  schema_shape(c, name, &why);
  if (why.empty()) why = "[" + dim_text(s.rows, c) + ", " + dim_text(s.cols, c) + "]";
  const auto [begin, count] = part_range(s.part, w.plan, c);
  return load_quantized(ckpt, name, d, shape, why, s.split, begin, count, w.plan.tp, w.owned);
}

}  // namespace

std::string quantization_summary(const ModelConfig& c) {
  if (!c.quant.quantized()) return "none";
  // Per schema row: how many of its layers are stored as each kind (expert 0 stands for every
  // expert: a config that quantizes some experts of a layer and not others is not a release).
  std::map<std::string, std::map<std::string, int>> rows;
  std::map<std::string, int> layers;
  for (const TensorSpec& s : target_schema(c)) {
    if (module_class(s, c) == ModuleClass::kOther) continue;
    for (int layer = 0; layer < (s.per_layer() ? c.num_layers : 1); ++layer) {
      if (!present(s, c, layer)) continue;
      const std::string module =
          quant_module_name(c, c.tensor_prefix + tensor_name(s, layer, s.per_expert() ? 0 : -1));
      if (module.empty()) continue;
      const QuantDecision d = c.quant.decide(module, module_class(s, c));
      const bool float_anyway =
          c.quant.method == QuantMethod::kFp8Block && fp8_float_by_convention(s, module);
      std::string row(s.name);
      row = row.substr(0, row.size() - std::min<std::size_t>(row.size(), 7));  // ".weight"
      ++rows[row][float_anyway ? "none" : quant_kind_name(d.kind)];
      ++layers[row];
    }
  }
  std::map<std::string, std::vector<std::string>> by_kind;
  for (const auto& [row, kinds] : rows)
    for (const auto& [kind, n] : kinds) {
      if (kind == "none") continue;
      by_kind[kind].push_back(n == layers[row] ? row
                                               : row + " (" + std::to_string(n) + " of " +
                                                     std::to_string(layers[row]) + " layers)");
    }
  std::string out = c.quant.describe();
  for (const auto& [kind, names] : by_kind) {
    out += "; " + kind + ":";
    for (std::size_t i = 0; i < names.size(); ++i) out += (i == 0 ? " " : ", ") + names[i];
  }
  if (by_kind.empty()) out += "; no module of this model is quantized";
  return out;
}

HostWeights load_host_weights(const Checkpoint& ckpt, int tp, int tp_rank,
                              std::span<const TensorSpec> schema, int ep, int first_layer) {
  const ModelConfig& c = ckpt.config();
  SPEC_INPUT_CHECK(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0,
                   "config.json: num_attention_heads = " << c.num_heads
                                                         << " is not a multiple of "
                                                            "num_key_value_heads = "
                                                         << c.num_kv_heads);
  HostWeights w;
  w.plan = ShardPlan::make(c, tp, tp_rank,
                           (std::filesystem::path(ckpt.dir()) / "config.json").string(), ep);
  w.layers.resize(c.num_layers);
  w.experts.resize(c.num_layers);
  // Every copy is made before any view into `owned` is taken: reserve so that it never moves.
  std::size_t copies = 0;
  for (const TensorSpec& s : schema)
    for (int layer = 0; layer < (s.per_layer() ? c.num_layers : 1); ++layer)
      if (present(s, c, layer)) copies += 4 * (s.per_expert() ? w.plan.experts : 1);
  w.owned.reserve(copies);
  for (const TensorSpec& s : schema) {
    for (int layer = 0; layer < (s.per_layer() ? c.num_layers : 1); ++layer) {
      if (!present(s, c, layer)) continue;
      if (s.per_expert()) {  // the rank's experts, stacked in index order
        std::vector<HostTensor>& stack = w.experts[layer][static_cast<int>(s.role)];
        for (int e = 0; e < w.plan.experts; ++e) {
          const int expert = w.plan.expert_begin + e;
          stack.push_back(load_tensor(
              ckpt, s, c.tensor_prefix + tensor_name(s, first_layer + layer, expert), false, w));
        }
        continue;
      }
      const bool tied = c.tie_word_embeddings && !s.tied_source.empty();
      const std::string name = c.tensor_prefix + (tied ? std::string(s.tied_source)
                                                       : tensor_name(s, first_layer + layer));
      const HostTensor h = load_tensor(ckpt, s, name, tied, w);
      (s.per_layer() ? w.layers[layer][static_cast<int>(s.role)]
                     : w.model[static_cast<int>(s.role)]) = h;
    }
  }
  return w;
}

}  // namespace specrun
