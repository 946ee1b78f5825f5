// Model hyperparameters from a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3, and the
// mixture-of-experts Qwen3-MoE and Mixtral).
// The fields and their defaults: docs/reference.md, "Hugging Face Llama-family checkpoints" and
// "Llama 3 RoPE scaling".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specrun {

// What a layer's attention computes. The weight schema's per-layer rows and a graph's blocks are
// chosen by it (weight_schema.h's Scope, llama_model.h).
enum class AttentionKind : std::uint8_t {
  // Grouped-query attention: q, k, v, o projections, RoPE over whole heads, one head_dim for
  // queries, keys and values (AttentionHeads with key_dim = value_dim).
  kGqa,
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
// "GQA attention + dense SwiGLU MLP", for messages.
std::string layer_kind_name(LayerKind kind);

struct ModelConfig {
  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
  // "Qwen3MoeForCausalLM", "MixtralForCausalLM"
  std::string architecture;
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral"
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
  // rope scaling: "default" (none) or "llama3" (others are rejected naming the field)
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int rope_original_max_position = 8192;
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

  // RoPE inverse frequencies, head_dim/2 values, after rope scaling (computed in double).
  std::vector<float> rope_inv_freq() const;
  bool is_eos(int token) const;
};

}  // namespace specrun
