// Internal to src/model: config.json's reader (bounds, typed fields naming the key) shared by
// model_config.cpp (every architecture) and deepseek_config.cpp (the DeepSeek-V3 family's fields
// and its config.json writer).
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/model_config.h"

namespace specrun::config_json {

using json = nlohmann::json;

// Upper bounds of config.json's sizes, far above any real model (the largest in parentheses) and
// low enough that nothing sized by them before the weights are checked (per-layer tables, the
// KV cache's shape) is absurd: num_hidden_layers = 1e9 ended in std::bad_alloc naming nothing.
inline constexpr int kMaxLayers = 4096;               // num_hidden_layers (126: Llama 3.1 405B)
inline constexpr int kMaxHiddenSize = 1 << 18;        // hidden_size (16384)
inline constexpr int kMaxIntermediateSize = 1 << 20;  // intermediate_size (53248)
inline constexpr int kMaxHeads = 4096;                // attention and key-value heads (128)
inline constexpr int kMaxHeadDim = 8192;              // head_dim (256)
inline constexpr int kMaxVocabSize = 1 << 24;         // vocab_size (262144: Gemma 3)
inline constexpr int kMaxPositions = 1 << 28;         // max_position_embeddings (10485760: Llama 4)
inline constexpr int kMaxExperts = 1 << 14;           // num_experts (384: Kimi K2)
inline constexpr int kMaxInt = 1'000'000'000;         // any other integer field

struct Reader {
  const json& j;
  const std::string& src;

  bool present(const char* key) const { return j.contains(key) && !j[key].is_null(); }

  int get_int(const char* key, bool required, int fallback, int min_value,
              int max_value = kMaxInt) const {
    if (!present(key)) {
      SPEC_INPUT_CHECK(!required, src << ": required field \"" << key << "\" is missing");
      return fallback;
    }
    const json& v = j[key];
    SPEC_INPUT_CHECK(v.is_number_integer(),
                     src << ": field \"" << key << "\" must be an integer, got " << v.dump());
    std::int64_t x = v.get<std::int64_t>();
    SPEC_INPUT_CHECK(x >= min_value && x <= max_value,
                     src << ": field \"" << key << "\" = " << x << " is out of range [" << min_value
                         << ", " << max_value << "]"
                         << (max_value < kMaxInt ? " (far above any real model)" : ""));
    return static_cast<int>(x);
  }
  double get_double(const json& obj, const std::string& path, const char* key, bool required,
                    double fallback) const {
    if (!obj.contains(key) || obj[key].is_null()) {
      SPEC_INPUT_CHECK(!required, src << ": required field \"" << path << key << "\" is missing");
      return fallback;
    }
    SPEC_INPUT_CHECK(obj[key].is_number(), src << ": field \"" << path << key
                                               << "\" must be a number, got " << obj[key].dump());
    const double v = obj[key].get<double>();
    SPEC_INPUT_CHECK(std::isfinite(v) && std::fabs(v) <= 1e12,
                     src << ": field \"" << path << key << "\" = " << v
                         << " is not a plausible value (finite, at most 1e12 in size)");
    return v;
  }
  bool get_bool(const char* key, bool fallback) const {
    if (!present(key)) return fallback;
    SPEC_INPUT_CHECK(j[key].is_boolean(), src << ": field \"" << key
                                              << "\" must be true or false, got " << j[key].dump());
    return j[key].get<bool>();
  }
};

// YaRN's values of the rope dict `r` (its key `field`), into c.
void parse_yarn(const json& r, const std::string& field, const Reader& rd, ModelConfig& c);
// True for the DeepSeek-V3 family's model types (DeepseekV3ForCausalLM).
bool is_deepseek_type(const std::string& model_type);
// The DeepSeek-V3 family's fields: MLA shapes, dense and MoE layers, the noaux_tc router.
void parse_deepseek(const Reader& rd, ModelConfig& c);
// transformers v5's mlp_layer_types, checked against first_k_dense_replace / moe_layer_freq.
void check_mlp_layer_types(const json& types, const Reader& rd, const ModelConfig& c);
// config.json's eos_token_id: an id, null or a list.
nlohmann::ordered_json eos_json(const std::vector<int>& ids);
// The DeepSeek-V3 family's config.json (the text config for Kimi-K2.5).
nlohmann::ordered_json deepseek_json(const ModelConfig& c);

}  // namespace specrun::config_json
