// quantization_config (model/quant_config.h): Kimi-K2.5's compressed-tensors config and
// DeepSeek-V3's fp8 one parsed; the decision for real module names (patterns anchored at the
// start only, as Python's re.match; the class "Linear" not matching DeepSeek's router; ignore
// before the groups; two groups claiming one module refused); every unsupported key refused by
// its path.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/quant_config.h"
#include "model/synthetic.h"
#include "model/weight_schema.h"
#include "small_deepseek.h"
#include "temp_dir.h"

using namespace specrun;
using json = nlohmann::json;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// Kimi-K2.5's quantization_config (its outer config.json): only the routed experts are INT4.
json kimi_k25() {
  return json::parse(R"({
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "quantization_status": "compressed", "kv_cache_scheme": null,
    "global_compression_ratio": null, "sparsity_config": {},
    "config_groups": {"group_0": {
      "targets": ["Linear"], "input_activations": null, "output_activations": null,
      "weights": {"type": "int", "num_bits": 4, "strategy": "group", "group_size": 32,
                  "symmetric": true, "dynamic": false, "actorder": null, "observer": "minmax",
                  "observer_kwargs": {}, "block_structure": null}}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]})");
}

json deepseek_v3() {
  return json::parse(R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                         "weight_block_size": [128, 128]})");
}

QuantConfig parse(const json& j) {
  return QuantConfig::parse(j, "cfg.json");
}

}  // namespace

TEST(QuantConfig, KimiK25QuantizesOnlyTheRoutedExperts) {
  const QuantConfig c = parse(kimi_k25());
  ASSERT_EQ(c.method, QuantMethod::kCompressedTensors);
  ASSERT_EQ(c.groups.size(), 1u);
  EXPECT_EQ(c.groups[0].bits, 4);
  EXPECT_EQ(c.groups[0].group_size, 32);
  EXPECT_TRUE(c.groups[0].symmetric);
  EXPECT_FALSE(c.groups[0].channel);
  const std::string L = "language_model.model.layers.7.";
  const QuantDecision expert = c.decide(L + "mlp.experts.17.down_proj", ModuleClass::kLinear);
  EXPECT_EQ(expert.kind, QuantKind::kInt4);
  EXPECT_EQ(expert.group, &c.groups[0]);
  EXPECT_NE(expert.why.find("config_groups.group_0.targets[0] \"Linear\""), std::string::npos)
      << expert.why;
  const QuantDecision attn = c.decide(L + "self_attn.kv_b_proj", ModuleClass::kLinear);
  EXPECT_EQ(attn.kind, QuantKind::kNone);
  EXPECT_NE(attn.why.find("ignore[1] \"re:.*self_attn.*\""), std::string::npos) << attn.why;
  EXPECT_EQ(c.decide(L + "mlp.shared_experts.up_proj", ModuleClass::kLinear).kind,
            QuantKind::kNone);
  // The dense first layer's MLP: ignore[3] (the pattern is anchored at the start only).
  const QuantDecision dense =
      c.decide("language_model.model.layers.0.mlp.gate_proj", ModuleClass::kLinear);
  EXPECT_EQ(dense.kind, QuantKind::kNone);
  EXPECT_NE(dense.why.find("ignore[3]"), std::string::npos) << dense.why;
  // An expert's gate_proj is ".experts.N.gate_proj", not "mlp.gate_proj": quantized.
  EXPECT_EQ(c.decide(L + "mlp.experts.0.gate_proj", ModuleClass::kLinear).kind, QuantKind::kInt4);
  // "lm_head" is an exact name: the text model's is language_model.lm_head, which the class
  // target would quantize; Kimi's file keeps it BF16 by ignoring the name the module has there.
  EXPECT_EQ(c.decide("lm_head", ModuleClass::kLinear).kind, QuantKind::kNone);
  EXPECT_EQ(c.decide("language_model.lm_head", ModuleClass::kLinear).kind, QuantKind::kInt4);
  // DeepSeek's router (MoEGate) is not a Linear: the class target does not take it.
  EXPECT_EQ(c.decide(L + "mlp.gate", ModuleClass::kRouter).kind, QuantKind::kNone);
  EXPECT_EQ(c.decide("language_model.model.embed_tokens", ModuleClass::kEmbedding).kind,
            QuantKind::kNone);
  EXPECT_NE(c.describe().find("group_0 int4 group 32 symmetric"), std::string::npos)
      << c.describe();
}

TEST(QuantConfig, PatternsAreAnchoredAtTheStartOnly) {
  json j = kimi_k25();
  j["ignore"] = {"re:layers\\.1\\."};
  const QuantConfig c = parse(j);
  // re.match: "layers.1." must start the name; it is not searched inside it.
  EXPECT_EQ(c.decide("model.layers.1.mlp.experts.0.up_proj", ModuleClass::kLinear).kind,
            QuantKind::kInt4);
  EXPECT_EQ(c.decide("layers.1.mlp.experts.0.up_proj", ModuleClass::kLinear).kind,
            QuantKind::kNone);
  // Not anchored at the end: a prefix match is enough.
  EXPECT_EQ(c.decide("layers.10.x", ModuleClass::kLinear).kind, QuantKind::kInt4);
  EXPECT_EQ(c.decide("layers.1.x", ModuleClass::kLinear).kind, QuantKind::kNone);
}

TEST(QuantConfig, GroupsByNameAndChannelAndEightBits) {
  json j = kimi_k25();
  j["config_groups"]["group_1"] = json::parse(R"({"targets": ["re:.*self_attn\\.o_proj$"],
      "weights": {"type": "int", "num_bits": 8, "strategy": "channel", "symmetric": false}})");
  j["ignore"] = {"lm_head"};
  j["config_groups"]["group_0"]["targets"] = {"re:.*experts.*"};
  const QuantConfig c = parse(j);
  const QuantDecision o = c.decide("model.layers.3.self_attn.o_proj", ModuleClass::kLinear);
  EXPECT_EQ(o.kind, QuantKind::kInt8);
  ASSERT_NE(o.group, nullptr);
  EXPECT_TRUE(o.group->channel);
  EXPECT_FALSE(o.group->symmetric);
  EXPECT_EQ(c.decide("model.layers.3.self_attn.q_proj", ModuleClass::kLinear).kind,
            QuantKind::kNone);
  // Two groups claiming one module: refused naming both entries.
  j["config_groups"]["group_1"]["targets"] = {"re:.*experts\\.0\\..*"};
  const QuantConfig both = parse(j);
  const std::string e =
      error_of([&] { both.decide("model.layers.3.mlp.experts.0.up_proj", ModuleClass::kLinear); });
  EXPECT_NE(e.find("group_0.targets[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("group_1.targets[0]"), std::string::npos) << e;
}

TEST(QuantConfig, Fp8BlocksAndModulesNotConverted) {
  json j = deepseek_v3();
  const QuantConfig c = parse(j);
  ASSERT_EQ(c.method, QuantMethod::kFp8Block);
  EXPECT_EQ(c.block_rows, 128);
  EXPECT_EQ(c.block_cols, 128);
  EXPECT_EQ(c.decide("model.layers.3.mlp.experts.5.down_proj", ModuleClass::kLinear).kind,
            QuantKind::kFp8E4M3);
  EXPECT_EQ(c.decide("model.layers.3.mlp.gate", ModuleClass::kRouter).kind, QuantKind::kNone);
  j["modules_to_not_convert"] = {"lm_head"};
  j["ignored_layers"] = {"model.layers.61.eh_proj"};
  const QuantConfig skip = parse(j);
  EXPECT_EQ(skip.decide("lm_head", ModuleClass::kLinear).kind, QuantKind::kNone);
  EXPECT_EQ(skip.decide("model.layers.61.eh_proj", ModuleClass::kLinear).kind, QuantKind::kNone);
  EXPECT_EQ(skip.decide("model.layers.60.self_attn.o_proj", ModuleClass::kLinear).kind,
            QuantKind::kFp8E4M3);
}

TEST(QuantConfig, UnsupportedKeysAreRefusedByTheirPath) {
  struct Case {
    std::function<void(json&)> edit;
    std::string want;
  };
  const std::string g = "quantization_config.config_groups.group_0";
  const std::vector<Case> kimi = {
      {[](json& j) { j["quant_method"] = "awq"; }, "quantization_config.quant_method"},
      {[](json& j) { j["format"] = "float-quantized"; }, "quantization_config.format"},
      {[](json& j) { j["quantization_status"] = "frozen"; }, "quantization_status"},
      {[](json& j) {
         j["kv_cache_scheme"] = {{"num_bits", 8}};
       },
       "kv_cache_scheme"},
      {[](json& j) {
         j["transform_config"] = {{"x", 1}};
       },
       "transform_config"},
      {[](json& j) { j.erase("config_groups"); }, "quantization_config.config_groups"},
      {[&](json& j) { j["config_groups"]["group_0"]["weights"]["num_bits"] = 3; },
       g + ".weights.num_bits"},
      {[&](json& j) { j["config_groups"]["group_0"]["weights"]["type"] = "float"; },
       g + ".weights.type"},
      {[&](json& j) { j["config_groups"]["group_0"]["weights"]["strategy"] = "block"; },
       g + ".weights.strategy"},
      {[&](json& j) { j["config_groups"]["group_0"]["weights"]["group_size"] = 12; },
       g + ".weights.group_size"},
      {[&](json& j) { j["config_groups"]["group_0"]["weights"]["dynamic"] = true; },
       g + ".weights.dynamic"},
      {[&](json& j) { j["config_groups"]["group_0"]["weights"]["actorder"] = "group"; },
       g + ".weights.actorder"},
      {[&](json& j) {
         j["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}};
       },
       g + ".input_activations"},
      {[&](json& j) { j["config_groups"]["group_0"]["targets"] = {"Embedding"}; },
       g + ".targets[0]"},
      {[&](json& j) { j["config_groups"]["group_0"]["targets"] = json::array(); }, g + ".targets"},
      {[](json& j) {
         j["ignore"] = {"lm_head", "re:(?P<x>a)"};
       },
       "quantization_config.ignore[1]"},
      {[](json& j) { j["ignore"] = {"re:a("}; }, "quantization_config.ignore[0]"},
  };
  for (const Case& k : kimi) {
    json j = kimi_k25();
    k.edit(j);
    const std::string e = error_of([&] { parse(j); });
    EXPECT_NE(e.find(k.want), std::string::npos) << k.want << ": " << e;
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
  }
  const std::vector<Case> fp8 = {
      {[](json& j) { j["fmt"] = "e5m2"; }, "quantization_config.fmt"},
      {[](json& j) { j.erase("weight_block_size"); }, "quantization_config.weight_block_size"},
      {[](json& j) {
         j["weight_block_size"] = {128, 100};
       },
       "quantization_config.weight_block_size"},
      {[](json& j) { j["activation_scheme"] = "static"; }, "quantization_config.activation_scheme"},
      {[](json& j) { j["modules_to_not_convert"] = "lm_head"; },
       "quantization_config.modules_to_not_convert"},
  };
  for (const Case& k : fp8) {
    json j = deepseek_v3();
    k.edit(j);
    const std::string e = error_of([&] { parse(j); });
    EXPECT_NE(e.find(k.want), std::string::npos) << k.want << ": " << e;
  }
}

// A float checkpoint whose quantization_config quantizes a module of the schema is refused at
// load naming the module and the config entry; one that leaves every module unquantized loads
// as the float checkpoint it is.
TEST(QuantConfig, TheLoaderRefusesQuantizedModulesNamingTheEntry) {
  test::TempDir dir;
  make_model_pair(test::small_deepseek_spec("deepseek_v3", /*first_k_dense=*/1, /*q_lora=*/32),
                  dir.path());
  const std::string target = dir.path() + "/target";
  auto with_quant = [&](const json& q) {
    std::ifstream in(target + "/config.json");
    json cfg = json::parse(in);
    cfg["quantization_config"] = q;
    std::ofstream(target + "/config.json") << cfg.dump(2);
    return Checkpoint(target);
  };
  json q = kimi_k25();
  q["ignore"].push_back("re:.*embed_tokens$");
  const Checkpoint quantized = with_quant(q);
  const std::string e = error_of([&] { load_host_weights(quantized, 1, 0, deepseek_schema()); });
  // lm_head is ignored by name, attention and the dense MLP by patterns: layer 1's routed
  // experts are the first modules the class target "Linear" quantizes, and the file holds them
  // as float (tests/unit/test_quant_schema.cpp: the other disagreements).
  EXPECT_NE(e.find("tensor 'model.layers.1.mlp.experts.0.gate_proj.weight' in "), std::string::npos)
      << e;
  EXPECT_NE(e.find("is F32, but quantization_config.config_groups.group_0.targets[0] \"Linear\" "
                   "makes module model.layers.1.mlp.experts.0.gate_proj int4"),
            std::string::npos)
      << e;
  // The same config with the experts ignored too: nothing quantized, the float weights load.
  q["ignore"].push_back("re:.*experts.*");
  const Checkpoint float_only = with_quant(q);
  const HostWeights w = load_host_weights(float_only, 1, 0, deepseek_schema());
  EXPECT_EQ(w.experts[1][static_cast<int>(Role::kExpertGate)].size(), 8u);
}
