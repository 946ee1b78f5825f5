// Model hyperparameters from a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3, the
// mixture-of-experts Qwen3-MoE and Mixtral, and the DeepSeek-V3 family: DeepSeek-V3, Kimi-K2 and
// the text model of Kimi-K2.5).
// The fields and their defaults: docs/reference.md, "Hugging Face Llama-family checkpoints" and
// "Llama 3 RoPE scaling".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/quant_config.h"

namespace specrun {

// What a layer's attention computes. The weight schema's per-layer rows and a graph's blocks are
// chosen by it (weight_schema.h's Scope, llama_model.h).
enum class AttentionKind : std::uint8_t {
  // Grouped-query attention: q, k, v, o projections, RoPE over whole heads, one head_dim for
  // queries, keys and values (AttentionHeads with key_dim = value_dim).
  kGqa,
  // Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): q through a low-rank q_a/q_b pair (or
  // one q_proj), keys and values from a shared latent (kv_a_proj_with_mqa, kv_a_layernorm,
  // kv_b_proj), RoPE on a qk_rope_head_dim part of q and k only (model/deepseek_model.h).
  kMla,
};
// What a layer's MLP computes.
enum class MlpKind : std::uint8_t {
  kDenseSwiGlu,  // down(silu(gate(x)) * up(x)), gate and up prepared as one pair
  // Mixture of experts (Qwen3-MoE, Mixtral): a router picks num_experts_per_tok of num_experts
  // SwiGLU experts per token (moe_intermediate_size wide) and the block's output is their
  // weighted sum (model/moe_block.h).
  kMoe,
};
// A layer's kind: its attention and its MLP. A model is a table of them (ModelConfig::layer_kind),
// so that a model whose first layers are dense and the rest mixture-of-experts, or whose
// attention is MLA, is a table of kinds and not model-wide flags.
struct LayerKind {
  AttentionKind attention = AttentionKind::kGqa;
  MlpKind mlp = MlpKind::kDenseSwiGlu;
  friend bool operator==(const LayerKind&, const LayerKind&) = default;
};
// YaRN's magnitude scale: 1 for factor <= 1, else 0.1 * mscale * ln(factor) + 1 (Hugging Face's
// yarn_get_mscale / get_mscale).
double yarn_mscale(double factor, double mscale);

// "GQA attention + dense SwiGLU MLP", for messages.
std::string layer_kind_name(LayerKind kind);

// How a mixture-of-experts layer's router picks and weights its experts (model/moe_block.h).
struct MoeRouterConfig {
  enum Kind : std::uint8_t {
    // softmax over all experts, then the top-k (Qwen3-MoE, Mixtral)
    kSoftmaxTopK,
    // DeepSeek-V3's noaux_tc: sigmoid scores, the top-k chosen on scores plus the float32
    // e_score_correction_bias among the topk_group best of n_group groups, weighted by the
    // unbiased scores (normalised when norm_topk_prob) times routed_scaling_factor
    kSigmoidNoauxTc,
  };
  Kind kind = kSoftmaxTopK;
  int n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  // Shared experts (each moe_intermediate_size wide, run as one MLP n_shared_experts times
  // as wide) added unweighted to every token's routed output.
  int n_shared_experts = 0;
};

// The DeepSeek-V3 family's multi-head latent attention (AttentionKind::kMla), from config.json.
struct MlaConfig {
  int q_lora_rank = 0;  // 0: config.json's null, one q_proj [heads * qk_head_dim, hidden]
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // rope_interleave (default true, as DeepSeek's reference): the rope part's pairs are
  // (2i, 2i + 1); false: (i, i + d/2) as Llama's.
  bool rope_interleave = true;
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Floats of one token's latent cache row per layer: the normed c_kv and the roped k_pe.
  int cache_floats() const { return kv_lora_rank + qk_rope_head_dim; }
};

struct ModelConfig {
  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
  // "Qwen3MoeForCausalLM", "MixtralForCausalLM", "DeepseekV3ForCausalLM",
  // "KimiK25ForConditionalGeneration" (its text_config is what the rest of this struct holds)
  std::string architecture;
  // "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "kimi_k2"
  // (KimiK25: text_config's model_type)
  std::string model_type;
  // Prefix of every tensor name in the checkpoint: "" or, for KimiK25ForConditionalGeneration,
  // "language_model." (its text model's tensors; the vision tower's are not read).
  std::string tensor_prefix;
  // quantization_config (model/quant_config.h; method kNone when absent): parsed and checked
  // here; the weight loader refuses the modules it quantizes (not supported yet, issue 44).
  QuantConfig quant;
  int hidden_size = 0;
  int intermediate_size = 0;  // the dense MLP's (Mixtral: each expert's, = moe_intermediate_size)
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // = num_heads when absent
  int head_dim = 0;      // config head_dim, else hidden_size / num_heads
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  // rope scaling: "default" (none), "llama3" or "yarn" (others are rejected naming the field)
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int rope_original_max_position = 8192;
  // YaRN (rope_type "yarn"): the ramp's rotation bounds, the magnitude scales (0: absent) and
  // an explicit attention_factor (0: absent, derived as Hugging Face's _compute_yarn_parameters).
  double rope_beta_fast = 32.0, rope_beta_slow = 1.0;
  double rope_mscale = 0.0, rope_mscale_all_dim = 0.0;
  double rope_attention_factor = 0.0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2, or attention_bias = true (then o_proj has a bias too)
  bool o_bias = false;
  bool qk_norm = false;  // Qwen3: per-head RMSNorm of q and k before RoPE
  // Mixture of experts (Qwen3-MoE: num_experts, Mixtral: num_local_experts; 0 = a dense model).
  // A layer is MoE by layer_kind's rule; the checkpoint names of its tensors follow moe_naming.
  int num_experts = 0;
  int num_experts_per_tok = 0;       // top-k of the router
  int moe_intermediate_size = 0;     // each expert's intermediate width
  bool norm_topk_prob = false;       // the top-k weights renormalised to sum 1 (Mixtral: always)
  int decoder_sparse_step = 1;       // Qwen3-MoE: a layer is MoE when (layer + 1) % step == 0 ...
  std::vector<int> mlp_only_layers;  // ... and it is not listed here (dense layers)
  enum class MoeNaming : std::uint8_t {
    kMlpExperts,      // mlp.gate, mlp.experts.{e}.{gate,up,down}_proj (Qwen3-MoE)
    kBlockSparseMoe,  // block_sparse_moe.gate, block_sparse_moe.experts.{e}.w1/w3/w2 (Mixtral)
  };
  MoeNaming moe_naming = MoeNaming::kMlpExperts;
  MoeRouterConfig router;
  // DeepSeek-V3 family: MLA (mla.kv_lora_rank > 0 for these architectures), the dense layers
  // below first_k_dense_replace, MoE at the others with layer % moe_layer_freq == 0; the MTP
  // layers after the decoder (num_nextn_predict_layers, not read by the target).
  MlaConfig mla;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int num_nextn_predict_layers = 0;
  // EAGLE-3 heads only (eagle3_config.h): the target's hidden size; fc's input is 3x it.
  int target_hidden_size = 0;
  int bos_token_id = 1;
  std::vector<int> eos_token_ids;  // may be empty

  // Parses and validates; throws naming the file and field for anything unsupported
  // (architecture, hidden_act, rope type, quantization_config, sliding window in use, ...).
  static ModelConfig from_file(const std::string& config_json_path);
  static ModelConfig from_json_text(const std::string& text, const std::string& source_name);
  // generation_config.json's eos_token_id (an id or a list; Llama 3 and Qwen instruct models keep
  // their end-of-turn ids there) joins config.json's: from_file reads it when it is beside
  // config.json. Throws (exit code 2) naming the file when it is malformed.
  static void add_generation_eos(ModelConfig& c, const std::string& path);
  // Writes config.json text for this configuration (used by make-model and import-llama2c).
  std::string to_json_text() const;

  // The kind of layer `layer` (0 <= layer < num_layers), derived from the fields above: every
  // layer of the Llama family has GQA attention (config.json's layer_types must be all
  // full_attention); its MLP is dense SwiGLU, or MoE where the family says so (Mixtral: every
  // layer; Qwen3-MoE, as Hugging Face's Qwen3MoeDecoderLayer: a layer not in mlp_only_layers
  // with num_experts > 0 and (layer + 1) % decoder_sparse_step == 0). A family with mixed
  // layers derives its table here from its own fields.
  LayerKind layer_kind(int layer) const;
  // True when some layer is MoE, or some layer is dense.
  bool has_moe_layers() const;
  bool has_dense_layers() const;

  // True for an MLA model (the DeepSeek-V3 family).
  bool is_mla() const { return mla.kv_lora_rank > 0; }

  // RoPE inverse frequencies, head_dim/2 values, after rope scaling (computed in double; MLA:
  // head_dim is qk_rope_head_dim, as Hugging Face's DeepseekV3Config sets it).
  std::vector<float> rope_inv_freq() const;
  // YaRN's magnitude factor of the cos/sin table (Hugging Face's attention_factor: given, or
  // mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else
  // mscale(factor, 1)); 1 without YaRN.
  double rope_attention_scaling() const;
  // The attention softmax scale: 1/sqrt(key width) (MLA: qk_head_dim), for MLA with YaRN and
  // mscale_all_dim set times mscale(factor, mscale_all_dim)^2 (DeepseekV3Attention.scaling).
  double attention_softmax_scale() const;
  bool is_eos(int token) const;
};

}  // namespace specrun
