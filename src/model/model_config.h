// Model hyperparameters from a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3).
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
  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"
  std::string architecture;
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3"
  int hidden_size = 0;
  int intermediate_size = 0;
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
  // layer of the Llama family is {kGqa, kDenseSwiGlu} (config.json's layer_types must be all
  // full_attention). A family with mixed layers derives its table here from its own fields.
  LayerKind layer_kind(int layer) const;

  // RoPE inverse frequencies, head_dim/2 values, after rope scaling (computed in double).
  std::vector<float> rope_inv_freq() const;
  bool is_eos(int token) const;
};

}  // namespace specrun
