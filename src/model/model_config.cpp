// config.json parsing. Anything that would change the numbers and that we do not implement is
// rejected by name: running it anyway would give silently wrong logits.
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "model/config_json.h"

namespace specrun {

using namespace config_json;

namespace {

// rope_scaling (legacy) or rope_parameters (transformers v5): the rope type and its values.
// yarn_allowed: the architecture's graph applies YaRN (the DeepSeek-V3 family's).
void parse_rope_dict(const json& r, const std::string& field, const Reader& rd, ModelConfig& c,
                     bool yarn_allowed) {
  SPEC_INPUT_CHECK(r.is_object(),
                   rd.src << ": \"" << field << "\" must be null or an object, got " << r.dump());
  std::string type = "default";
  if (r.contains("rope_type") && !r["rope_type"].is_null()) {
    SPEC_INPUT_CHECK(r["rope_type"].is_string(),
                     rd.src << ": \"" << field << ".rope_type\" must be a string");
    type = r["rope_type"].get<std::string>();
  } else if (r.contains("type") && !r["type"].is_null()) {
    SPEC_INPUT_CHECK(r["type"].is_string(),
                     rd.src << ": \"" << field << ".type\" must be a string");
    type = r["type"].get<std::string>();
  }
  const std::string prefix = field + ".";
  if (r.contains("rope_theta")) c.rope_theta = rd.get_double(r, prefix, "rope_theta", true, 0);
  if (r.contains("partial_rotary_factor")) {
    double f = rd.get_double(r, prefix, "partial_rotary_factor", true, 1.0);
    SPEC_INPUT_CHECK(f == 1.0, rd.src << ": \"" << field << ".partial_rotary_factor\" = " << f
                                      << " is not supported (only full rotary embeddings, 1.0)");
  }
  if (type == "default") return;
  if (type == "yarn") {
    SPEC_INPUT_CHECK(yarn_allowed, rd.src << ": \"" << field
                                          << "\" rope type \"yarn\" is supported for the "
                                             "DeepSeek-V3 family only, not for "
                                          << c.architecture);
    parse_yarn(r, field, rd, c);
    return;
  }
  SPEC_INPUT_CHECK(type == "llama3",
                   rd.src << ": \"" << field << "\" rope type \"" << type
                          << "\" is not supported (supported: default, llama3, yarn); running it "
                             "with another rope type would give wrong results");
  c.rope_type = "llama3";
  c.rope_factor = rd.get_double(r, prefix, "factor", true, 0);
  c.rope_low_freq_factor = rd.get_double(r, prefix, "low_freq_factor", true, 0);
  c.rope_high_freq_factor = rd.get_double(r, prefix, "high_freq_factor", true, 0);
  double omp = rd.get_double(r, prefix, "original_max_position_embeddings", true, 0);
  SPEC_INPUT_CHECK(c.rope_factor > 0 && c.rope_low_freq_factor > 0 &&
                       c.rope_high_freq_factor > c.rope_low_freq_factor && omp >= 1 &&
                       omp == std::floor(omp) && omp <= kMaxPositions,
                   rd.src << ": \"" << field
                          << "\" llama3 values are inconsistent: need factor > 0, 0 < "
                             "low_freq_factor < high_freq_factor and an integer "
                             "original_max_position_embeddings in [1, "
                          << kMaxPositions << "]");
  c.rope_original_max_position = static_cast<int>(omp);
}

// Adds `e` (an id or a list of ids, each in [0, vocab_size)) to c.eos_token_ids, skipping ids
// already there.
void add_eos_ids(ModelConfig& c, const json& e, const std::string& source_name) {
  std::vector<json> ids =
      e.is_array() ? std::vector<json>(e.begin(), e.end()) : std::vector<json>{e};
  for (const json& id : ids) {
    SPEC_INPUT_CHECK(
        id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
            id.get<std::int64_t>() < c.vocab_size,
        source_name << ": \"eos_token_id\" " << e.dump()
                    << " must be an id or list of ids in [0, vocab_size=" << c.vocab_size << ")");
    if (!c.is_eos(id.get<int>())) c.eos_token_ids.push_back(id.get<int>());
  }
}

// The mixture-of-experts fields of Qwen3-MoE and Mixtral (as Hugging Face's Qwen3MoeConfig and
// MixtralConfig name them). What would change the numbers and is not implemented is refused by
// name; fields that only matter for training (output_router_logits, router_aux_loss_coef,
// router_jitter_noise: applied in training mode only) are accepted.
void parse_moe(const Reader& rd, ModelConfig& c) {
  const std::string& src = rd.src;
  // Shared experts (Qwen2-MoE, DeepSeek) are not part of these architectures: a config.json that
  // has them describes another model.
  for (const char* field :
       {"shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts"}) {
    if (!rd.present(field)) continue;
    SPEC_INPUT_CHECK(rd.j[field].is_number() && rd.j[field].get<double>() == 0,
                     src << ": \"" << field << "\" = " << rd.j[field].dump()
                         << ": shared experts are not part of " << c.architecture
                         << " and are not supported");
  }
  if (c.model_type == "mixtral") {
    c.num_experts = rd.get_int("num_local_experts", true, 0, 1, kMaxExperts);
    c.moe_intermediate_size = c.intermediate_size;  // Mixtral's experts are intermediate_size wide
    c.norm_topk_prob = true;                        // always renormalised
    c.moe_naming = ModelConfig::MoeNaming::kBlockSparseMoe;
  } else if (c.model_type == "qwen3_moe") {
    c.num_experts = rd.get_int("num_experts", true, 0, 0, kMaxExperts);
    c.moe_intermediate_size =
        rd.get_int("moe_intermediate_size", c.num_experts > 0, 0, 1, kMaxIntermediateSize);
    c.norm_topk_prob = rd.get_bool("norm_topk_prob", false);
    c.decoder_sparse_step = rd.get_int("decoder_sparse_step", false, 1, 1, kMaxLayers);
    if (rd.present("mlp_only_layers")) {
      const json& m = rd.j["mlp_only_layers"];
      SPEC_INPUT_CHECK(
          m.is_array(),
          src << ": \"mlp_only_layers\" must be a list of layer ids, got " << m.dump());
      for (const json& id : m) {
        SPEC_INPUT_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                             id.get<std::int64_t>() < c.num_layers,
                         src << ": \"mlp_only_layers\" entry " << id.dump()
                             << " is not a layer id in [0, num_hidden_layers=" << c.num_layers
                             << ")");
        c.mlp_only_layers.push_back(id.get<int>());
      }
    }
    c.moe_naming = ModelConfig::MoeNaming::kMlpExperts;
  } else {
    return;  // a dense architecture: its MoE-looking fields, if any, mean nothing to it
  }
  if (c.num_experts == 0) return;
  c.num_experts_per_tok = rd.get_int("num_experts_per_tok", true, 0, 1, c.num_experts);
  if (rd.present("topk_method") || rd.present("scoring_func")) {
    SPEC_INPUT_FAIL(src << ": \"" << (rd.present("topk_method") ? "topk_method" : "scoring_func")
                        << "\" is not a field of " << c.architecture
                        << ": its router is a softmax over all experts, then the top-k (DeepSeek's "
                           "routers are not supported)");
  }
}

}  // namespace

ModelConfig ModelConfig::from_file(const std::string& config_json_path) {
  SPEC_INPUT_CHECK(
      input_exists(config_json_path),
      "cannot open " << config_json_path << ": is this a Hugging Face model directory?");
  ModelConfig c =
      from_json_text(read_input_file(config_json_path, kModelConfigFile), config_json_path);
  // Instruct models (Llama 3, Qwen2/3) keep their end-of-turn ids in generation_config.json.
  const std::string gen =
      (std::filesystem::path(config_json_path).parent_path() / "generation_config.json").string();
  if (input_exists(gen)) add_generation_eos(c, gen);
  return c;
}

void ModelConfig::add_generation_eos(ModelConfig& c, const std::string& path) {
  const std::string text = read_input_file(path, kGenerationConfigFile);
  const std::string too_deep = json_depth_error(text, path);
  SPEC_INPUT_CHECK(too_deep.empty(), too_deep);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    SPEC_INPUT_FAIL(path << " is not valid JSON: " << e.what());
  }
  SPEC_INPUT_CHECK(j.is_object(), path << " must hold a JSON object");
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null())
    add_eos_ids(c, j["eos_token_id"], path);
}

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& source_name) {
  json j;
  const std::string too_deep = json_depth_error(text, source_name);
  SPEC_INPUT_CHECK(too_deep.empty(), too_deep);
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    SPEC_INPUT_FAIL(source_name << ": not valid JSON: " << e.what());
  }
  SPEC_INPUT_CHECK(j.is_object(), source_name << ": expected a JSON object");
  const Reader rd{j, source_name};
  // Kimi-K2.5: a vision tower and a DeepSeek-V3-architecture text model (text_config), whose
  // tensors are named "language_model.*". The vision tower is not read (image inputs are not
  // supported; the job log says it was ignored).
  if (rd.present("architectures") && j["architectures"].is_array() &&
      j["architectures"].size() == 1 &&
      j["architectures"][0] == "KimiK25ForConditionalGeneration") {
    SPEC_INPUT_CHECK(rd.present("text_config") && j["text_config"].is_object(),
                     source_name << ": KimiK25ForConditionalGeneration needs a \"text_config\" "
                                    "object (its text model)");
    ModelConfig c = from_json_text(j["text_config"].dump(), source_name + " (text_config)");
    SPEC_INPUT_CHECK(is_deepseek_type(c.model_type),
                     source_name << ": text_config's model_type \"" << c.model_type
                                 << "\" is not supported for KimiK25ForConditionalGeneration "
                                    "(supported: deepseek_v3, kimi_k2)");
    c.architecture = "KimiK25ForConditionalGeneration";
    c.tensor_prefix = "language_model.";
    if (rd.present("eos_token_id")) add_eos_ids(c, j["eos_token_id"], source_name);
    c.tie_word_embeddings = rd.get_bool("tie_word_embeddings", c.tie_word_embeddings);
    // Kimi-K2.5 keeps its quantization_config in the outer object; one of the two, not both.
    if (rd.present("quantization_config")) {
      SPEC_INPUT_CHECK(!c.quant.quantized(),
                       source_name << ": \"quantization_config\" is both in the outer config and "
                                      "in text_config: which one applies is ambiguous");
      c.quant = QuantConfig::parse(j["quantization_config"], source_name);
    }
    return c;
  }
  ModelConfig c;

  // Architecture: from "architectures", else from "model_type".
  static const std::vector<std::pair<std::string, std::string>> kArch = {
      {"LlamaForCausalLM", "llama"},           {"MistralForCausalLM", "mistral"},
      {"Qwen2ForCausalLM", "qwen2"},           {"Qwen3ForCausalLM", "qwen3"},
      {"Qwen3MoeForCausalLM", "qwen3_moe"},    {"MixtralForCausalLM", "mixtral"},
      {"DeepseekV3ForCausalLM", "deepseek_v3"}};
  if (rd.present("architectures")) {
    const json& a = j["architectures"];
    SPEC_INPUT_CHECK(
        a.is_array() && a.size() == 1 && a[0].is_string(),
        source_name << ": \"architectures\" must be a list of one name, got " << a.dump());
    c.architecture = a[0].get<std::string>();
    for (const auto& [arch, type] : kArch)
      if (arch == c.architecture) c.model_type = type;
    SPEC_INPUT_CHECK(!c.model_type.empty(),
                     source_name << ": architecture \"" << c.architecture
                                 << "\" is not supported (supported: LlamaForCausalLM, "
                                    "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                                    "Qwen3MoeForCausalLM, MixtralForCausalLM, "
                                    "DeepseekV3ForCausalLM, KimiK25ForConditionalGeneration)"
                                 << (c.architecture.find("Eagle3") != std::string::npos
                                         ? ": it is an EAGLE-3 draft head, which runs beside a "
                                           "target as draft.kind = \"eagle3\""
                                         : ""));
  } else {
    SPEC_INPUT_CHECK(rd.present("model_type") && j["model_type"].is_string(),
                     source_name << ": neither \"architectures\" nor \"model_type\" is given");
    std::string type = j["model_type"].get<std::string>();
    if (type == "kimi_k2") type = "deepseek_v3";  // Kimi-K2: DeepseekV3ForCausalLM
    for (const auto& [arch, t] : kArch)
      if (t == type) c.architecture = arch, c.model_type = t;
    SPEC_INPUT_CHECK(!c.model_type.empty(), source_name << ": model_type \"" << type
                                                        << "\" is not supported (supported: "
                                                           "llama, mistral, qwen2, qwen3, "
                                                           "qwen3_moe, mixtral, deepseek_v3, "
                                                           "kimi_k2)");
  }
  // Kimi-K2 names DeepseekV3ForCausalLM's model_type "kimi_k2".
  if (c.model_type == "deepseek_v3" && rd.present("model_type") && j["model_type"] == "kimi_k2")
    c.model_type = "kimi_k2";
  const bool deepseek = is_deepseek_type(c.model_type);
  if (rd.present("model_type")) {
    SPEC_INPUT_CHECK(
        j["model_type"].is_string() && j["model_type"].get<std::string>() == c.model_type,
        source_name << ": model_type " << j["model_type"].dump() << " does not match architecture "
                    << c.architecture);
  }

  c.hidden_size = rd.get_int("hidden_size", true, 0, 1, kMaxHiddenSize);
  c.intermediate_size = rd.get_int("intermediate_size", true, 0, 1, kMaxIntermediateSize);
  c.num_layers = rd.get_int("num_hidden_layers", true, 0, 1, kMaxLayers);
  c.num_heads = rd.get_int("num_attention_heads", true, 0, 1, kMaxHeads);
  c.num_kv_heads = rd.get_int("num_key_value_heads", false, c.num_heads, 1, kMaxHeads);
  c.vocab_size = rd.get_int("vocab_size", true, 0, 1, kMaxVocabSize);
  c.max_position_embeddings = rd.get_int("max_position_embeddings", false, 2048, 1, kMaxPositions);
  SPEC_INPUT_CHECK(c.num_heads % c.num_kv_heads == 0,
                   source_name << ": num_attention_heads=" << c.num_heads
                               << " is not a multiple of num_key_value_heads=" << c.num_kv_heads);
  if (deepseek) {
    // MLA: the head widths are qk_nope/qk_rope/v_head_dim (parse_deepseek sets head_dim).
  } else if (rd.present("head_dim")) {
    c.head_dim = rd.get_int("head_dim", true, 0, 1, kMaxHeadDim);
  } else {
    SPEC_INPUT_CHECK(c.hidden_size % c.num_heads == 0,
                     source_name << ": hidden_size=" << c.hidden_size
                                 << " is not divisible by num_attention_heads=" << c.num_heads
                                 << " and no head_dim is given");
    c.head_dim = c.hidden_size / c.num_heads;
    SPEC_INPUT_CHECK(c.head_dim <= kMaxHeadDim,
                     source_name << ": hidden_size / num_attention_heads = " << c.head_dim
                                 << " is out of range [1, " << kMaxHeadDim
                                 << "] for a head dimension (far above any real model)");
  }
  SPEC_INPUT_CHECK(deepseek || c.head_dim % 2 == 0, source_name
                                                        << ": head_dim=" << c.head_dim
                                                        << " must be even for rotary embeddings");
  // Checked as the float32 it is kept as: 0.1 is 0.100000001 in float32, and to_json_text
  // writes that value, which must read back as accepted.
  // (The double is cast only once it is known to fit a float.)
  const double eps = rd.get_double(j, "", "rms_norm_eps", false, 1e-6);
  SPEC_INPUT_CHECK(eps >= 1e-13 && eps <= 1.0 && static_cast<float>(eps) >= 1e-12f &&
                       static_cast<float>(eps) <= 0.1f,
                   source_name << ": rms_norm_eps = " << eps
                               << " is out of range [1e-12, 0.1] (real models use 1e-6 .. 1e-5)");
  c.rms_norm_eps = static_cast<float>(eps);

  // Activation.
  if (rd.present("hidden_act")) {
    SPEC_INPUT_CHECK(j["hidden_act"].is_string() && j["hidden_act"].get<std::string>() == "silu",
                     source_name << ": hidden_act " << j["hidden_act"].dump()
                                 << " is not supported (only \"silu\")");
  }
  if (rd.present("quantization_config"))
    c.quant = QuantConfig::parse(j["quantization_config"], source_name);
  SPEC_INPUT_CHECK(!rd.get_bool("mlp_bias", false),
                   source_name << ": \"mlp_bias\": true is not supported");

  // Rotary embeddings.
  c.rope_theta = rd.get_double(j, "", "rope_theta", false, 10000.0);
  if (rd.present("partial_rotary_factor")) {
    double f = rd.get_double(j, "", "partial_rotary_factor", true, 1.0);
    SPEC_INPUT_CHECK(f == 1.0, source_name << ": \"partial_rotary_factor\" = " << f
                                           << " is not supported (only 1.0)");
  }
  if (rd.present("rope_scaling"))
    parse_rope_dict(j["rope_scaling"], "rope_scaling", rd, c, deepseek);
  if (rd.present("rope_parameters")) {
    const json& rp = j["rope_parameters"];
    SPEC_INPUT_CHECK(
        rp.is_object() && (rp.contains("rope_type") || rp.contains("rope_theta")),
        source_name << ": \"rope_parameters\" must be an object with rope_type / "
                       "rope_theta (per-layer-type rope parameters are not supported)");
    parse_rope_dict(rp, "rope_parameters", rd, c, deepseek);
  }
  SPEC_INPUT_CHECK(c.rope_theta > 0, source_name << ": rope_theta must be positive");

  // Sliding-window attention is not implemented: reject it when it would actually apply.
  if (c.model_type == "qwen2" || c.model_type == "qwen3" || c.model_type == "qwen3_moe") {
    SPEC_INPUT_CHECK(!rd.get_bool("use_sliding_window", false),
                     source_name << ": \"use_sliding_window\": true is not supported "
                                    "(only full attention)");
  }
  if ((c.model_type == "mistral" || c.model_type == "mixtral") && rd.present("sliding_window")) {
    int w = rd.get_int("sliding_window", true, 0, 0);
    SPEC_INPUT_CHECK(w >= c.max_position_embeddings,
                     source_name << ": \"sliding_window\" = " << w << " is smaller than "
                                 << "max_position_embeddings=" << c.max_position_embeddings
                                 << ": sliding-window attention is not supported");
  }
  if (rd.present("layer_types")) {
    SPEC_INPUT_CHECK(j["layer_types"].is_array(),
                     source_name << ": \"layer_types\" must be a list");
    for (const json& t : j["layer_types"]) {
      SPEC_INPUT_CHECK(t == "full_attention", source_name << ": \"layer_types\" contains "
                                                          << t.dump()
                                                          << "; only full_attention is supported");
    }
  }

  // Biases.
  c.o_bias = rd.get_bool("attention_bias", false);
  c.qkv_bias = c.o_bias;
  if (c.model_type == "qwen2") c.qkv_bias = true, c.o_bias = false;
  // Qwen3 (and Qwen3-MoE): RMSNorm over each head of q and k (q_norm, k_norm, [head_dim]) before
  // RoPE.
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  if (deepseek) {
    c.o_bias = c.qkv_bias = false;
    parse_deepseek(rd, c);
  } else {
    parse_moe(rd, c);
  }
  if (deepseek && rd.present("mlp_layer_types")) check_mlp_layer_types(j["mlp_layer_types"], rd, c);
  if (c.rope_type == "yarn") {
    if (c.rope_original_max_position == 0) c.rope_original_max_position = c.max_position_embeddings;
  }

  c.tie_word_embeddings = rd.get_bool("tie_word_embeddings", false);
  c.bos_token_id = rd.get_int("bos_token_id", false, 1, 0);
  if (rd.present("eos_token_id")) add_eos_ids(c, j["eos_token_id"], source_name);
  return c;
}

namespace config_json {

// config.json's eos_token_id: an id, null or a list.
nlohmann::ordered_json eos_json(const std::vector<int>& ids) {
  if (ids.size() == 1) return ids[0];
  if (ids.empty()) return nullptr;
  return ids;
}

}  // namespace config_json

std::string ModelConfig::to_json_text() const {
  if (is_deepseek_type(model_type)) {
    nlohmann::ordered_json text = deepseek_json(*this);
    if (architecture != "KimiK25ForConditionalGeneration") return text.dump(2) + "\n";
    nlohmann::ordered_json j;
    j["architectures"] = {"KimiK25ForConditionalGeneration"};
    j["model_type"] = "kimi_k25";
    j["text_config"] = text;
    // A vision tower the text model does not read (its shape only; no tensors are written).
    j["vision_config"] = {{"model_type", "kimi_k25_vision"},
                          {"hidden_size", 64},
                          {"num_hidden_layers", 1},
                          {"num_attention_heads", 2},
                          {"patch_size", 14}};
    j["media_placeholder_token_id"] = vocab_size - 1;
    j["tie_word_embeddings"] = tie_word_embeddings;
    return j.dump(2) + "\n";
  }
  nlohmann::ordered_json j;
  j["architectures"] = {architecture};
  j["model_type"] = model_type;
  j["hidden_act"] = "silu";
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = static_cast<double>(rms_norm_eps);
  j["rope_theta"] = rope_theta;
  if (rope_type == "llama3") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_factor},
                         {"low_freq_factor", rope_low_freq_factor},
                         {"high_freq_factor", rope_high_freq_factor},
                         {"original_max_position_embeddings", rope_original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  // attention_bias means q/k/v/o biases; Qwen2's q/k/v-only biases come from its architecture.
  j["attention_bias"] = model_type != "qwen2" && o_bias;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_json(eos_token_ids);
  if (model_type == "qwen2" || model_type == "qwen3" || model_type == "qwen3_moe")
    j["use_sliding_window"] = false;
  // The mixture-of-experts fields as Hugging Face's Qwen3MoeConfig and MixtralConfig write them.
  if (model_type == "qwen3_moe") {
    j["num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["norm_topk_prob"] = norm_topk_prob;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.001;
  } else if (model_type == "mixtral") {
    j["num_local_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.02;
    j["router_jitter_noise"] = 0.0;
    j["sliding_window"] = nullptr;
  }
  return j.dump(2) + "\n";
}

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

double ModelConfig::rope_attention_scaling() const {
  if (rope_type != "yarn") return 1.0;
  if (rope_attention_factor != 0) return rope_attention_factor;
  if (rope_mscale != 0 && rope_mscale_all_dim != 0)
    return yarn_mscale(rope_factor, rope_mscale) / yarn_mscale(rope_factor, rope_mscale_all_dim);
  return yarn_mscale(rope_factor, 1.0);
}

double ModelConfig::attention_softmax_scale() const {
  const int key_width = is_mla() ? mla.qk_head_dim() : head_dim;
  double scale = 1.0 / std::sqrt(static_cast<double>(key_width));
  if (is_mla() && rope_type == "yarn" && rope_mscale_all_dim != 0) {
    const double m = yarn_mscale(rope_factor, rope_mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int half = head_dim / 2;
  std::vector<float> out(static_cast<std::size_t>(half));
  const double kPi = 3.14159265358979323846;
  // YaRN: frequencies between the correction range's bounds (in dimension pairs, rounded down
  // and up, clamped to [0, head_dim - 1]) are blended linearly from extrapolated (unchanged) to
  // interpolated (divided by factor).
  double yarn_low = 0, yarn_high = 0;
  if (rope_type == "yarn") {
    auto correction_dim = [&](double rotations) {
      return head_dim * std::log(rope_original_max_position / (rotations * 2.0 * kPi)) /
             (2.0 * std::log(rope_theta));
    };
    yarn_low = std::max(0.0, std::floor(correction_dim(rope_beta_fast)));
    yarn_high =
        std::min(static_cast<double>(head_dim - 1), std::ceil(correction_dim(rope_beta_slow)));
    if (yarn_low == yarn_high) yarn_high += 0.001;
  }
  for (int j = 0; j < half; ++j) {
    double f = 1.0 / std::pow(rope_theta, (2.0 * j) / head_dim);
    if (rope_type == "llama3") {
      const double lo_wl = rope_original_max_position / rope_low_freq_factor;
      const double hi_wl = rope_original_max_position / rope_high_freq_factor;
      const double wl = 2.0 * kPi / f;
      if (wl < hi_wl) {
        // high-frequency band: unchanged
      } else if (wl > lo_wl) {
        f = f / rope_factor;
      } else {
        double s = (rope_original_max_position / wl - rope_low_freq_factor) /
                   (rope_high_freq_factor - rope_low_freq_factor);
        f = (1.0 - s) * f / rope_factor + s * f;
      }
    } else if (rope_type == "yarn") {
      const double ramp = std::clamp((j - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;  // the share of the unchanged frequency
      f = f / rope_factor * (1.0 - extrapolation) + f * extrapolation;
    }
    out[static_cast<std::size_t>(j)] = static_cast<float>(f);
  }
  return out;
}

std::string layer_kind_name(LayerKind kind) {
  std::string name;
  switch (kind.attention) {
    case AttentionKind::kGqa:
      name = "GQA attention";
      break;
    case AttentionKind::kMla:
      name = "MLA attention";
      break;
  }
  switch (kind.mlp) {
    case MlpKind::kDenseSwiGlu:
      name += " + dense SwiGLU MLP";
      break;
    case MlpKind::kMoe:
      name += " + mixture-of-experts MLP";
      break;
  }
  return name;
}

LayerKind ModelConfig::layer_kind(int layer) const {
  SPEC_CHECK(layer >= 0 && layer < num_layers,
             "layer_kind: layer " << layer << " of a model of " << num_layers << " layers");
  if (is_mla()) {  // DeepSeek-V3 family (its modeling code's DeepseekV3DecoderLayer)
    const bool moe =
        num_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
    return LayerKind{AttentionKind::kMla, moe ? MlpKind::kMoe : MlpKind::kDenseSwiGlu};
  }
  const bool moe =
      num_experts > 0 && (layer + 1) % decoder_sparse_step == 0 &&
      std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
  return LayerKind{AttentionKind::kGqa, moe ? MlpKind::kMoe : MlpKind::kDenseSwiGlu};
}

bool ModelConfig::has_moe_layers() const {
  for (int layer = 0; layer < num_layers; ++layer)
    if (layer_kind(layer).mlp == MlpKind::kMoe) return true;
  return false;
}

bool ModelConfig::has_dense_layers() const {
  for (int layer = 0; layer < num_layers; ++layer)
    if (layer_kind(layer).mlp == MlpKind::kDenseSwiGlu) return true;
  return false;
}

bool ModelConfig::is_eos(int token) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

}  // namespace specrun
