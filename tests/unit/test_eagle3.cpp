// EAGLE-3 heads: every config.json variant the loader accepts (SGLang and vLLM capture-layer
// conventions, the reference default, the flat LlamaForCausalLM layout) and every one it refuses
// with the field named; and the head's weights in F32, BF16 and F16 giving the same drafts
// (../shared/models/code-eagle3 converted to F16 here).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "dist/communicator.h"
#include "kernels/cpu/dtype.h"
#include "model/checkpoint.h"
#include "model/eagle3_config.h"
#include "model/model_factory.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "single_rank_comm.h"

using namespace specrun;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A target like code-target: 6 layers, hidden 256, 8/4 heads, vocab 2048.
ModelConfig target_config(int layers = 6) {
  SyntheticSpec s;
  s.layers = layers;
  s.hidden = 256;
  s.heads = 8;
  s.kv_heads = 4;
  s.intermediate = 768;
  s.vocab = 2048;
  return synthetic_config(s, false);
}

// code-eagle3's config.json.
json head_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 32, "num_hidden_layers": 1, "vocab_size": 2048,
    "draft_vocab_size": 1024, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "rope_scaling": null, "max_position_embeddings": 1024, "tie_word_embeddings": false,
    "attention_bias": false, "mlp_bias": false, "bos_token_id": 1, "eos_token_id": 2,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "use_aux_hidden_state": true}
  })");
}

Eagle3Config parse(const json& j, const ModelConfig& target = target_config()) {
  return Eagle3Config::from_json_text(j.dump(), "head/config.json", target);
}

// The message of the error parse() throws, "" when it accepts.
std::string refusal(const json& j, const ModelConfig& target = target_config()) {
  try {
    parse(j, target);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Eagle3Config, SglangIdsNameLayerOutputs) {
  const Eagle3Config c = parse(head_config());
  EXPECT_EQ(c.capture, (std::vector<int>{2, 3, 4}));  // inputs of layers 2, 3, 4
  EXPECT_EQ(c.target_vocab, 2048);
  EXPECT_EQ(c.head.vocab_size, 1024);
  EXPECT_EQ(c.head.num_layers, 1);
  EXPECT_EQ(c.head.target_hidden_size, 256);
  EXPECT_FALSE(c.norm_before_residual);
}

TEST(Eagle3Config, VllmIdsNameLayerInputsAndTheDefaultIsTheReferences) {
  json j = head_config();
  j.erase("eagle_config");
  j["eagle_aux_hidden_state_layer_ids"] = {1, 3, 5};
  EXPECT_EQ(parse(j).capture, (std::vector<int>{1, 3, 5}));
  j.erase("eagle_aux_hidden_state_layer_ids");
  // {2, N/2, N-3}: for 8 layers 2, 4, 5.
  EXPECT_EQ(parse(j, target_config(8)).capture, (std::vector<int>{2, 4, 5}));
  // For 6 layers it repeats layer 3: refused with the way out named.
  const std::string msg = refusal(j);
  EXPECT_NE(msg.find("repeats a layer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("eagle_config.eagle_aux_hidden_state_layer_ids"), std::string::npos) << msg;
}

TEST(Eagle3Config, FlatLlamaConfigWithDraftVocabularyAndNormBeforeResidual) {
  json j = head_config();
  j["architectures"] = {"LlamaForCausalLM"};
  j["norm_before_residual"] = true;
  const Eagle3Config c = parse(j);
  EXPECT_TRUE(c.norm_before_residual);
  EXPECT_EQ(c.head.vocab_size, 1024);
  j.erase("draft_vocab_size");  // a plain Llama config is not a head
  EXPECT_NE(refusal(j).find("is not an EAGLE-3 head"), std::string::npos);
}

TEST(Eagle3Config, EveryUnsupportedVariantNamesItsField) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"EAGLE-1/2 architecture", [](json& j) { j["architectures"] = {"EagleForCausalLM"}; },
       "EAGLE-1/2 heads"},
      {"fc bias", [](json& j) { j["bias"] = true; }, "\"bias\": true"},
      {"two layers", [](json& j) { j["num_hidden_layers"] = 2; }, "\"num_hidden_layers\" = 2"},
      {"tied lm_head", [](json& j) { j["tie_word_embeddings"] = true; }, "tie_word_embeddings"},
      {"attention bias", [](json& j) { j["attention_bias"] = true; }, "attention_bias"},
      {"target_hidden_size", [](json& j) { j["target_hidden_size"] = 512; },
       "\"target_hidden_size\" = 512 but the target's hidden_size is 256"},
      {"another width",
       [](json& j) {
         j["hidden_size"] = 128;
         j["head_dim"] = 16;
       },
       "\"hidden_size\" = 128 differs from the target's 256"},
      {"another target", [](json& j) { j["vocab_size"] = 4096; },
       "\"vocab_size\" = 4096 but the target has 2048 tokens"},
      {"draft vocabulary too large", [](json& j) { j["draft_vocab_size"] = 4096; },
       "\"draft_vocab_size\" = 4096 must be in 1..2048"},
      {"both conventions",
       [](json& j) {
         j["eagle_aux_hidden_state_layer_ids"] = {2, 3, 4};
       },
       "both \"eagle_config.eagle_aux_hidden_state_layer_ids\""},
      {"two ids",
       [](json& j) {
         j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {1, 2};
       },
       "must list three layer ids"},
      {"descending ids",
       [](json& j) {
         j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {3, 2, 1};
       },
       "which are not three ascending layers of the target's 6"},
      {"id past the last layer",
       [](json& j) {
         j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {1, 2, 5};
       },
       "inputs of target layers 2, 3, 6"},
      {"norm_before_residual", [](json& j) { j["norm_before_residual"] = "yes"; },
       "\"norm_before_residual\" must be true or false"},
  };
  for (const Case& c : cases) {
    json j = head_config();
    c.edit(j);
    const std::string msg = refusal(j);
    EXPECT_NE(msg.find("head/config.json"), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
  }
  try {
    Eagle3Config::from_json_text("{\"architectures\": [", "h.json", target_config());
    FAIL() << "invalid JSON accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.json: not valid JSON"), std::string::npos);
  }
}

namespace {

std::string shared_models() {
  if (const char* env = std::getenv("SPECRUN_SHARED_DIR")) return std::string(env) + "/models";
  return std::string(SPECRUN_SOURCE_DIR) + "/../shared/models";
}

// Writes `dir` with the head of `src` converted to F16 (d2t and t2d copied as they are).
void write_f16_copy(const std::string& src, const std::string& dir) {
  fs::create_directories(dir);
  fs::copy_file(src + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
  SafetensorsFile in(src + "/model.safetensors");
  std::vector<TensorToWrite> out;
  for (const std::string& name : in.names()) {
    if (name == "d2t" || name == "t2d") {
      const TensorView& t = in.get_other(name, name == "d2t" ? "I64" : "BOOL");
      TensorToWrite w{name, DType::kF32, t.shape, {}};
      w.bytes.assign(t.data, t.data + t.nbytes);
      w.other_dtype = name == "d2t" ? "I64" : "BOOL";
      w.other_size = name == "d2t" ? 8 : 1;
      out.push_back(std::move(w));
      continue;
    }
    const TensorView& t = in.get(name);
    ASSERT_EQ(t.dtype, DType::kF32) << name;
    TensorToWrite w{name, DType::kF16, t.shape, {}};
    w.bytes.resize(static_cast<std::size_t>(t.numel()) * 2);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      float v;
      std::memcpy(&v, t.data + 4 * i, 4);
      const std::uint16_t h = f32_to_f16(v);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    }
    out.push_back(std::move(w));
  }
  write_safetensors(dir + "/model.safetensors", out);
}

}  // namespace

// The same inputs through the F32, BF16 and F16 copies of code-eagle3: logits agree to the
// precision of the weights, and the top token of almost every row is the same.
TEST(Eagle3Head, F32Bf16AndF16WeightsDraftAlike) {
  const std::string models = shared_models();
  if (!fs::exists(models + "/code-eagle3/config.json"))
    GTEST_SKIP() << "shared models not found at " << models;
  char tmpl[] = "/tmp/specrun-eagle3-XXXXXX";
  const std::string tmp = mkdtemp(tmpl);
  write_f16_copy(models + "/code-eagle3", tmp + "/f16");
  const Checkpoint target(models + "/code-target-f32");
  auto load = [&](const std::string& dir) {
    const Eagle3Config cfg = Eagle3Config::from_file(dir + "/config.json", target.config());
    const Checkpoint head(dir, [&](const std::string&) { return cfg.head; });
    return load_cpu_head(head, target, cfg, 1);
  };
  auto f32 = load(models + "/code-eagle3");
  auto bf16 = load(models + "/code-eagle3-bf16");
  auto f16 = load(tmp + "/f16");
  // The target's features of a real prompt, then one extend pass through each head.
  test::SingleRankComm comm;
  auto model = load_cpu_model(target, comm, 1);
  std::vector<std::int32_t> prompt = {1, 822, 903, 1012, 309, 421, 288, 1300, 77, 9, 640, 12};
  auto tcache = model->new_cache(64);
  const SeqChunk tchunk{tcache.get(), prompt.data(), static_cast<int>(prompt.size())};
  const ForwardResult t =
      model->forward({&tchunk, 1}, ForwardRequest{false, f32->target_capture()});
  const int n = static_cast<int>(prompt.size()) - 1;
  std::vector<int> rows(n);
  for (int i = 0; i < n; ++i) rows[i] = i;
  const int V =
      Eagle3Config::from_file(models + "/code-eagle3/config.json", target.config()).head.vocab_size;
  std::vector<std::vector<float>> logits;
  for (DraftHead* h : {f32.get(), bf16.get(), f16.get()}) {
    auto cache = h->new_cache(64);
    const SeqChunk chunk{cache.get(), prompt.data() + 1, n};
    const ForwardResult r = h->forward({&chunk, 1}, t.hidden, rows, true);
    ASSERT_EQ(r.logits.rows, n);
    ASSERT_EQ(r.logits.width, V);
    logits.emplace_back(r.logits.data, r.logits.data + static_cast<std::size_t>(n) * V);
  }
  auto compare = [&](int which, double tolerance, const char* what) {
    int same_top = 0;
    double worst = 0;
    for (int r = 0; r < n; ++r) {
      const float* a = logits[0].data() + static_cast<std::size_t>(r) * V;
      const float* b = logits[which].data() + static_cast<std::size_t>(r) * V;
      double scale = 0;
      for (int v = 0; v < V; ++v) scale = std::max(scale, std::fabs(double{a[v]}));
      for (int v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double{a[v]} - b[v]) / scale);
      same_top += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
    }
    std::printf("  %s vs F32: worst |diff| / max|logit| %.2e, top token equal in %d / %d rows\n",
                what, worst, same_top, n);
    EXPECT_LT(worst, tolerance) << what;
    EXPECT_GE(same_top, n - 1) << what;
  };
  compare(1, 0.05, "BF16");
  compare(2, 0.01, "F16");
  fs::remove_all(tmp);
}
