// The DeepSeek-V3 family's config.json (DeepseekV3ForCausalLM: DeepSeek-V3, Kimi-K2; Kimi-K2.5's
// text_config): its fields read and written, YaRN's rope values. docs/reference.md has the table.
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/config_json.h"
#include "model/model_config.h"

namespace specrun::config_json {

// YaRN's values (rope_type "yarn"), as Hugging Face's _compute_yarn_parameters reads them.
// Only the DeepSeek-V3 family's graph applies YaRN's magnitude scaling: other architectures
// refuse it (parse_rope_dict, naming the field).
void parse_yarn(const json& r, const std::string& field, const Reader& rd, ModelConfig& c) {
  const std::string prefix = field + ".";
  c.rope_type = "yarn";
  c.rope_factor = rd.get_double(r, prefix, "factor", true, 0);
  SPEC_INPUT_CHECK(c.rope_factor > 0, rd.src << ": \"" << field << ".factor\" = " << c.rope_factor
                                             << " must be positive");
  const double omp = rd.get_double(r, prefix, "original_max_position_embeddings", false, 0);
  SPEC_INPUT_CHECK(omp == 0 || (omp >= 1 && omp == std::floor(omp) && omp <= kMaxPositions),
                   rd.src << ": \"" << field << ".original_max_position_embeddings\" = " << omp
                          << " must be an integer in [1, " << kMaxPositions << "]");
  c.rope_original_max_position = static_cast<int>(omp);  // 0: max_position_embeddings (later)
  c.rope_beta_fast = rd.get_double(r, prefix, "beta_fast", false, 32.0);
  c.rope_beta_slow = rd.get_double(r, prefix, "beta_slow", false, 1.0);
  c.rope_mscale = rd.get_double(r, prefix, "mscale", false, 0.0);
  c.rope_mscale_all_dim = rd.get_double(r, prefix, "mscale_all_dim", false, 0.0);
  c.rope_attention_factor = rd.get_double(r, prefix, "attention_factor", false, 0.0);
  SPEC_INPUT_CHECK(c.rope_beta_fast > 0 && c.rope_beta_slow > 0,
                   rd.src << ": \"" << field << "\" beta_fast and beta_slow must be positive");
  SPEC_INPUT_CHECK(c.rope_attention_factor >= 0,
                   rd.src << ": \"" << field << ".attention_factor\" must be positive");
  if (r.contains("truncate") && !r["truncate"].is_null()) {
    SPEC_INPUT_CHECK(r["truncate"] == true,
                     rd.src << ": \"" << field << ".truncate\" = " << r["truncate"].dump()
                            << " is not supported (only true: the correction range rounded to "
                               "whole dimensions, as DeepSeek's reference does)");
  }
}

// transformers v5's per-layer MLP table ("dense" / "sparse"): it must be the table that
// first_k_dense_replace and moe_layer_freq give (layer_kind), else it is refused by name.
void check_mlp_layer_types(const json& types, const Reader& rd, const ModelConfig& c) {
  SPEC_INPUT_CHECK(types.is_array() && static_cast<int>(types.size()) == c.num_layers,
                   rd.src << ": \"mlp_layer_types\" must be a list of num_hidden_layers = "
                          << c.num_layers << " entries");
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const bool moe = c.layer_kind(layer).mlp == MlpKind::kMoe;
    SPEC_INPUT_CHECK(types[layer] == (moe ? "sparse" : "dense"),
                     rd.src << ": \"mlp_layer_types\"[" << layer << "] = " << types[layer].dump()
                            << " disagrees with first_k_dense_replace = " << c.first_k_dense_replace
                            << " and moe_layer_freq = " << c.moe_layer_freq << " (layer " << layer
                            << " is " << (moe ? "sparse" : "dense") << " by them)");
  }
}

bool is_deepseek_type(const std::string& model_type) {
  return model_type == "deepseek_v3" || model_type == "kimi_k2";
}

// The DeepSeek-V3 family's fields (Hugging Face's DeepseekV3Config, DeepSeek's and Moonshot's
// config.json): MLA shapes, the dense and MoE layers, the noaux_tc router. What would change
// the numbers and is not implemented is refused by name.
void parse_deepseek(const Reader& rd, ModelConfig& c) {
  const std::string& src = rd.src;
  MlaConfig& m = c.mla;
  SPEC_INPUT_CHECK(rd.j.contains("q_lora_rank"),
                   src << ": required field \"q_lora_rank\" is missing (null for a plain q_proj)");
  m.q_lora_rank = rd.get_int("q_lora_rank", false, 0, 1, kMaxHiddenSize);
  m.kv_lora_rank = rd.get_int("kv_lora_rank", true, 0, 1, kMaxHiddenSize);
  m.qk_nope_head_dim = rd.get_int("qk_nope_head_dim", true, 0, 1, kMaxHeadDim);
  m.qk_rope_head_dim = rd.get_int("qk_rope_head_dim", true, 0, 2, kMaxHeadDim);
  m.v_head_dim = rd.get_int("v_head_dim", true, 0, 1, kMaxHeadDim);
  SPEC_INPUT_CHECK(m.qk_rope_head_dim % 2 == 0, src << ": qk_rope_head_dim = " << m.qk_rope_head_dim
                                                    << " must be even for rotary embeddings");
  m.rope_interleave = rd.get_bool("rope_interleave", true);
  // Hugging Face's DeepseekV3Config: head_dim is the rope part's width (the RoPE table's).
  c.head_dim = m.qk_rope_head_dim;
  SPEC_INPUT_CHECK(c.num_kv_heads == c.num_heads,
                   src << ": num_key_value_heads = " << c.num_kv_heads
                       << " differs from num_attention_heads = " << c.num_heads
                       << ": MLA's keys and values have one head per query head");
  SPEC_INPUT_CHECK(!rd.get_bool("attention_bias", false),
                   src << ": \"attention_bias\": true is not supported for " << c.architecture
                       << " (biases of q_a_proj, kv_a_proj_with_mqa and o_proj)");

  // Layers: dense below first_k_dense_replace, MoE at the others with layer % moe_layer_freq ==
  // 0 (when n_routed_experts is not null).
  SPEC_INPUT_CHECK(rd.j.contains("n_routed_experts"),
                   src << ": required field \"n_routed_experts\" is missing (null for a dense "
                          "model)");
  c.num_experts = rd.get_int("n_routed_experts", false, 0, 1, kMaxExperts);
  c.first_k_dense_replace = rd.get_int("first_k_dense_replace", false, 0, 0, kMaxLayers);
  c.moe_layer_freq = rd.get_int("moe_layer_freq", false, 1, 1, kMaxLayers);
  c.num_nextn_predict_layers = rd.get_int("num_nextn_predict_layers", false, 0, 0, 16);
  c.moe_naming = ModelConfig::MoeNaming::kMlpExperts;
  if (c.num_experts == 0) return;
  c.num_experts_per_tok = rd.get_int("num_experts_per_tok", true, 0, 1, c.num_experts);
  c.moe_intermediate_size = rd.get_int("moe_intermediate_size", true, 0, 1, kMaxIntermediateSize);
  c.norm_topk_prob = rd.get_bool("norm_topk_prob", true);
  for (const auto& [field, want] : {std::pair<const char*, const char*>{"topk_method", "noaux_tc"},
                                    {"scoring_func", "sigmoid"}}) {
    if (!rd.present(field)) continue;
    const json& v = rd.j[field];
    SPEC_INPUT_CHECK(v.is_string() && v.get<std::string>() == want,
                     src << ": \"" << field << "\" = " << v.dump() << " is not supported for "
                         << c.architecture << " (only \"" << want
                         << "\": DeepSeek-V3's biased sigmoid router)");
  }
  MoeRouterConfig& r = c.router;
  r.kind = MoeRouterConfig::kSigmoidNoauxTc;
  r.n_group = rd.get_int("n_group", false, 1, 1, c.num_experts);
  r.topk_group = rd.get_int("topk_group", false, 1, 1, r.n_group);
  r.routed_scaling_factor = rd.get_double(rd.j, "", "routed_scaling_factor", false, 1.0);
  r.n_shared_experts = rd.get_int("n_shared_experts", false, 0, 0, kMaxExperts);
  SPEC_INPUT_CHECK(c.num_experts % r.n_group == 0,
                   src << ": n_routed_experts = " << c.num_experts
                       << " is not divisible by n_group = " << r.n_group);
  SPEC_INPUT_CHECK(r.n_group == 1 || c.num_experts / r.n_group >= 2,
                   src << ": n_group = " << r.n_group
                       << " leaves fewer than 2 experts per group (a group's score is the sum of "
                          "its two best)");
  SPEC_INPUT_CHECK(c.num_experts_per_tok <= r.topk_group * (c.num_experts / r.n_group),
                   src << ": num_experts_per_tok = " << c.num_experts_per_tok
                       << " exceeds the experts of topk_group = " << r.topk_group << " groups");
  SPEC_INPUT_CHECK(
      r.routed_scaling_factor > 0,
      src << ": routed_scaling_factor = " << r.routed_scaling_factor << " must be positive");
}

// The DeepSeek-V3 family's config.json (DeepseekV3Config's fields, as DeepSeek-V3's and
// Kimi-K2's files write them); Kimi-K2.5's is the outer KimiK25 layout with it as text_config.
nlohmann::ordered_json deepseek_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV3ForCausalLM"};
  j["model_type"] = c.model_type;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = static_cast<double>(c.rms_norm_eps);
  j["rope_theta"] = c.rope_theta;
  if (c.rope_type == "yarn") {
    nlohmann::ordered_json r;
    r["type"] = "yarn";
    r["factor"] = c.rope_factor;
    r["original_max_position_embeddings"] = c.rope_original_max_position;
    r["beta_fast"] = c.rope_beta_fast;
    r["beta_slow"] = c.rope_beta_slow;
    if (c.rope_mscale != 0) r["mscale"] = c.rope_mscale;
    if (c.rope_mscale_all_dim != 0) r["mscale_all_dim"] = c.rope_mscale_all_dim;
    if (c.rope_attention_factor != 0) r["attention_factor"] = c.rope_attention_factor;
    j["rope_scaling"] = r;
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["rope_interleave"] = c.mla.rope_interleave;
  if (c.mla.q_lora_rank > 0)
    j["q_lora_rank"] = c.mla.q_lora_rank;
  else
    j["q_lora_rank"] = nullptr;
  j["kv_lora_rank"] = c.mla.kv_lora_rank;
  j["qk_nope_head_dim"] = c.mla.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.mla.qk_rope_head_dim;
  j["v_head_dim"] = c.mla.v_head_dim;
  j["attention_bias"] = false;
  if (c.num_experts > 0)
    j["n_routed_experts"] = c.num_experts;
  else
    j["n_routed_experts"] = nullptr;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["n_shared_experts"] = c.router.n_shared_experts;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["moe_layer_freq"] = c.moe_layer_freq;
  j["routed_scaling_factor"] = c.router.routed_scaling_factor;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["n_group"] = c.router.n_group;
  j["topk_group"] = c.router.topk_group;
  j["topk_method"] = "noaux_tc";
  j["scoring_func"] = "sigmoid";
  j["seq_aux"] = true;
  j["aux_loss_alpha"] = 0.001;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = eos_json(c.eos_token_ids);
  return j;
}

}  // namespace specrun::config_json
