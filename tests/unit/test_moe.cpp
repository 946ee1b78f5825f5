// Mixture-of-experts targets (Qwen3-MoE, Mixtral) on the CPU:
//  - config.json: the fields, the layer kinds by Hugging Face's rule (mlp_only_layers,
//    decoder_sparse_step), and the refusal of what is not supported, naming the field;
//  - the router's rule (cpu::route_top_k: softmax, top-k, ties to the lower expert index,
//    renormalisation), the grouping of tokens by expert and the weighted combination;
//  - the weight schema's expert rows: shapes, names, and the expert-parallel shard plan;
//  - batch invariance, bitwise: a token's logits do not depend on the other tokens of its pass
//    (a batch of sequences, a token tree, each sequence's last logits only), the property the
//    greedy speculative == baseline guarantee rests on;
//  - LanguageModel::routing(): filled on every forward.
// The model's logits against an independent float64 reference: tests/e2e/moe_reference.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "common/error.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/model_factory.h"
#include "model/moe_block.h"
#include "model/synthetic.h"
#include "model/weight_schema.h"
#include "single_rank_comm.h"
#include "temp_dir.h"

using namespace specrun;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ModelConfig parse(const std::string& text) {
  return ModelConfig::from_json_text(text, "cfg.json");
}

// A Qwen3-MoE config.json as Hugging Face writes one, with `extra` fields appended.
std::string qwen3_moe(const std::string& extra = "") {
  return R"({"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe",
    "hidden_size":128,"intermediate_size":256,"num_hidden_layers":6,"num_attention_heads":4,
    "num_key_value_heads":2,"head_dim":32,"vocab_size":512,"num_experts":8,
    "num_experts_per_tok":2,"moe_intermediate_size":64,"norm_topk_prob":true,
    "decoder_sparse_step":1,"mlp_only_layers":[],"output_router_logits":false,
    "router_aux_loss_coef":0.001)" +
         extra + "}";
}

std::string mixtral(const std::string& extra = "") {
  return R"({"architectures":["MixtralForCausalLM"],"model_type":"mixtral","hidden_size":128,
    "intermediate_size":96,"num_hidden_layers":2,"num_attention_heads":4,
    "num_key_value_heads":2,"vocab_size":512,"num_local_experts":4,"num_experts_per_tok":2,
    "output_router_logits":false,"router_aux_loss_coef":0.02,"router_jitter_noise":0.0,
    "sliding_window":null)" +
         extra + "}";
}

std::vector<MlpKind> mlp_kinds(const ModelConfig& c) {
  std::vector<MlpKind> kinds;
  for (int layer = 0; layer < c.num_layers; ++layer) kinds.push_back(c.layer_kind(layer).mlp);
  return kinds;
}

constexpr MlpKind kD = MlpKind::kDenseSwiGlu;
constexpr MlpKind kM = MlpKind::kMoe;

}  // namespace

TEST(MoeConfig, Qwen3MoeFieldsAndLayerKindsFollowHuggingFacesRule) {
  const ModelConfig c = parse(qwen3_moe());
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 64);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(mlp_kinds(c), (std::vector<MlpKind>{kM, kM, kM, kM, kM, kM}));
  EXPECT_EQ(layer_kind_name(c.layer_kind(0)), "GQA attention + mixture-of-experts MLP");
  EXPECT_FALSE(c.has_dense_layers());
  // Qwen3MoeDecoderLayer: MoE when not in mlp_only_layers, num_experts > 0 and
  // (layer + 1) % decoder_sparse_step == 0.
  const ModelConfig step = parse(qwen3_moe(R"(,"decoder_sparse_step":2,"mlp_only_layers":[3])"));
  EXPECT_EQ(mlp_kinds(step), (std::vector<MlpKind>{kD, kM, kD, kD, kD, kM}));
  EXPECT_TRUE(step.has_dense_layers() && step.has_moe_layers());
  const ModelConfig none = parse(R"({"architectures":["Qwen3MoeForCausalLM"],"hidden_size":128,
    "intermediate_size":256,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512,
    "num_experts":0})");
  EXPECT_EQ(mlp_kinds(none), (std::vector<MlpKind>{kD, kD}));
  EXPECT_FALSE(none.has_moe_layers());
  // norm_topk_prob defaults to false (Qwen3MoeConfig), mlp_only_layers may be null.
  const ModelConfig defaults = parse(R"({"architectures":["Qwen3MoeForCausalLM"],
    "hidden_size":128,"intermediate_size":256,"num_hidden_layers":2,"num_attention_heads":4,
    "vocab_size":512,"num_experts":4,"num_experts_per_tok":1,"moe_intermediate_size":32,
    "mlp_only_layers":null})");
  EXPECT_FALSE(defaults.norm_topk_prob);
  EXPECT_EQ(mlp_kinds(defaults), (std::vector<MlpKind>{kM, kM}));
}

TEST(MoeConfig, MixtralIsAllMoeAndAlwaysRenormalised) {
  const ModelConfig c = parse(mixtral());
  EXPECT_EQ(c.model_type, "mixtral");
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.moe_intermediate_size, 96);  // intermediate_size: each expert's width
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.moe_naming, ModelConfig::MoeNaming::kBlockSparseMoe);
  EXPECT_EQ(mlp_kinds(c), (std::vector<MlpKind>{kM, kM}));
}

TEST(MoeConfig, JsonTextRoundTrips) {
  for (const std::string& text :
       {qwen3_moe(R"(,"decoder_sparse_step":2,"mlp_only_layers":[3],"norm_topk_prob":false)"),
        mixtral()}) {
    const ModelConfig a = parse(text);
    const ModelConfig b = parse(a.to_json_text());
    EXPECT_EQ(b.architecture, a.architecture);
    EXPECT_EQ(b.num_experts, a.num_experts);
    EXPECT_EQ(b.num_experts_per_tok, a.num_experts_per_tok);
    EXPECT_EQ(b.moe_intermediate_size, a.moe_intermediate_size);
    EXPECT_EQ(b.norm_topk_prob, a.norm_topk_prob);
    EXPECT_EQ(mlp_kinds(b), mlp_kinds(a));
  }
}

TEST(MoeConfig, UnsupportedFieldsAreRefusedByName) {
  struct Case {
    std::string text, field;
  };
  const std::vector<Case> cases = {
      {qwen3_moe(R"(,"shared_expert_intermediate_size":512)"), "shared_expert_intermediate_size"},
      {mixtral(R"(,"n_shared_experts":1)"), "n_shared_experts"},
      {qwen3_moe(R"(,"topk_method":"noaux_tc")"), "topk_method"},
      {R"({"architectures":["Qwen3MoeForCausalLM"],"hidden_size":128,"intermediate_size":256,
          "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512,"num_experts":8,
          "moe_intermediate_size":64})",
       "num_experts_per_tok"},
      {R"({"architectures":["Qwen3MoeForCausalLM"],"hidden_size":128,"intermediate_size":256,
          "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512})",
       "num_experts"},
      {R"({"architectures":["MixtralForCausalLM"],"hidden_size":128,"intermediate_size":96,
          "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512,
          "num_experts_per_tok":2})",
       "num_local_experts"},
      {qwen3_moe().substr(0, qwen3_moe().size() - 1) + R"(,"num_experts_per_tok":9})",
       "num_experts_per_tok"},
      {qwen3_moe(R"(,"decoder_sparse_step":0)"), "decoder_sparse_step"},
      {qwen3_moe(R"(,"mlp_only_layers":[6])"), "mlp_only_layers"},
      {qwen3_moe(R"(,"mlp_only_layers":"0")"), "mlp_only_layers"},
      {qwen3_moe(R"(,"use_sliding_window":true)"), "use_sliding_window"},
      {mixtral(R"(,"sliding_window":64)"), "sliding_window"},
  };
  for (const Case& c : cases) {
    const std::string what = error_of([&] { parse(c.text); });
    EXPECT_NE(what.find("cfg.json"), std::string::npos) << c.field << ": " << what;
    EXPECT_NE(what.find(c.field), std::string::npos) << c.field << ": " << what;
  }
  // Training-only fields are accepted.
  EXPECT_NO_THROW(parse(mixtral(R"(,"router_jitter_noise":0.1)")));
}

TEST(MoeRouting, TopKFollowsTheSoftmaxWithTiesToTheLowerIndex) {
  // Row 0: distinct logits; row 1: experts 1, 2 and 3 tie for the second place; row 2: all tie.
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f,  //
                                     3.0f, 1.0f, 1.0f,  1.0f,  //
                                     0.0f, 0.0f, 0.0f,  0.0f};
  std::vector<std::int32_t> ids(6);
  std::vector<float> w(6);
  cpu::route_top_k(logits.data(), 3, 4, 2, false, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 3, 0, 1, 0, 1}));
  // The probabilities themselves, the softmax over all four experts.
  double z = std::exp(0.5) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(w[1], std::exp(1.0) / z, 1e-7);
  EXPECT_FLOAT_EQ(w[4], 0.25f);
  EXPECT_FLOAT_EQ(w[5], 0.25f);
  // Renormalised: the chosen weights sum to 1 in their ratio.
  cpu::route_top_k(logits.data(), 3, 4, 2, true, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 3, 0, 1, 0, 1}));
  EXPECT_NEAR(w[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-7);
  EXPECT_FLOAT_EQ(w[4], 0.5f);
  // top_k = every expert: all of them by descending probability.
  std::vector<std::int32_t> all(4);
  std::vector<float> wa(4);
  cpu::route_top_k(logits.data(), 1, 4, 4, false, all.data(), wa.data());
  EXPECT_EQ(all, (std::vector<std::int32_t>{1, 3, 0, 2}));
}

TEST(MoeRouting, TokensAreGroupedByExpertAndCombinedInExpertOrder) {
  // Four tokens, top-2 over 6 experts; this rank holds experts 2..4 (ep: 3 of 6).
  const std::vector<std::int32_t> chosen = {4, 2, 0, 1, 3, 4, 2, 5};
  const std::vector<float> weights = {0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f};
  ExpertGrouping grouping;
  grouping.build(chosen.data(), weights.data(), 4, 2, 2, 3);
  const ExpertGroups g = grouping.groups();
  // Expert 2: tokens 0 and 3; expert 3: token 2; expert 4: tokens 0 and 2.
  EXPECT_EQ(std::vector<int>(g.first.begin(), g.first.end()), (std::vector<int>{0, 2, 3, 5}));
  EXPECT_EQ(std::vector<int>(g.token.begin(), g.token.end()), (std::vector<int>{0, 3, 2, 0, 2}));
  // Token 0: expert 2 (pair 0, 0.4) then expert 4 (pair 3, 0.6); token 1: none here; token 2:
  // experts 3 and 4; token 3: expert 2.
  EXPECT_EQ(std::vector<int>(g.token_first.begin(), g.token_first.end()),
            (std::vector<int>{0, 2, 2, 4, 5}));
  EXPECT_EQ(std::vector<int>(g.by_token.begin(), g.by_token.end()),
            (std::vector<int>{0, 3, 2, 4, 1}));
  EXPECT_EQ(std::vector<float>(g.weight.begin(), g.weight.end()),
            (std::vector<float>{0.4f, 0.6f, 0.5f, 0.5f, 0.9f}));

  // The combination: y[t] = sum of weight * x[pair] in that order, zeros without a pair.
  const int width = 3;
  std::vector<float> x(5 * width);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 1.0f;
  std::vector<float> y(4 * width, -7.0f);
  CpuBackend b(1);
  b.combine_rows(CpuBackend::F(y.data()), 4, width, CpuBackend::CF(x.data()), g.token_first,
                 g.by_token, g.weight);
  for (int c = 0; c < width; ++c) {
    EXPECT_EQ(y[0 * width + c], 0.0f + 0.4f * x[0 * width + c] + 0.6f * x[3 * width + c]);
    EXPECT_EQ(y[1 * width + c], 0.0f);
    EXPECT_EQ(y[2 * width + c], 0.0f + 0.5f * x[2 * width + c] + 0.5f * x[4 * width + c]);
    EXPECT_EQ(y[3 * width + c], 0.0f + 0.9f * x[1 * width + c]);
  }
}

// cpu::matmul_grouped (the CPU's moe_experts: every expert's projection over its own tokens in
// one parallel region) gives each group bitwise what matmul_multi gives it alone, for group
// sizes on every tile path (1, 3-6, 7-12 tokens, and the prefill tiles above 12), plain and
// SwiGLU outputs, F32 and BF16 weights.
TEST(MoeRouting, GroupedMatmulIsBitwiseEachGroupAlone) {
  const int in = 160, out = 72;
  const std::vector<int> sizes = {1, 5, 9, 13, 30, 2};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool swiglu : {false, true}) {
      std::vector<std::vector<std::byte>> packed;
      std::vector<std::vector<float>> xs, want, got;
      std::vector<cpu::MatmulGroup> groups;
      for (std::size_t g = 0; g < sizes.size(); ++g) {
        const int n = sizes[g];
        std::vector<float> w(static_cast<std::size_t>(out) * in * 2);
        for (std::size_t i = 0; i < w.size(); ++i)
          w[i] = static_cast<float>(((i * 2654435761u + g * 97) % 2001) / 1000.0 - 1.0);
        std::vector<std::byte> raw(w.size() * dtype_size(dtype));
        for (std::size_t i = 0; i < w.size(); ++i) {
          if (dtype == DType::kF32) {
            std::memcpy(raw.data() + 4 * i, &w[i], 4);
          } else {
            const std::uint16_t h = f32_to_bf16(w[i]);
            std::memcpy(raw.data() + 2 * i, &h, 2);
          }
        }
        const std::size_t half = raw.size() / 2;
        packed.emplace_back(2 * cpu::packed_weight_bytes(dtype, out, in));
        if (swiglu)
          cpu::pack_weight_pairs(raw.data(), raw.data() + half, dtype, out, in,
                                 packed.back().data());
        else
          cpu::pack_weights(raw.data(), dtype, out, in, packed.back().data());
        xs.emplace_back(static_cast<std::size_t>(n) * in);
        for (std::size_t i = 0; i < xs.back().size(); ++i)
          xs.back()[i] = static_cast<float>(((i * 40503u + g) % 1001) / 500.0 - 1.0);
        want.emplace_back(static_cast<std::size_t>(n) * out);
        got.emplace_back(static_cast<std::size_t>(n) * out, -1.0f);
      }
      for (std::size_t g = 0; g < sizes.size(); ++g) {
        cpu::MatmulOutput alone{{packed[g].data(), dtype, out, in}, nullptr, want[g].data()};
        alone.swiglu = swiglu;
        cpu::matmul_multi(xs[g].data(), sizes[g], &alone, 1);
        cpu::MatmulOutput o{{packed[g].data(), dtype, out, in}, nullptr, got[g].data()};
        o.swiglu = swiglu;
        groups.push_back({xs[g].data(), sizes[g], o});
      }
      cpu::matmul_grouped(groups.data(), static_cast<int>(groups.size()));
      for (std::size_t g = 0; g < sizes.size(); ++g)
        EXPECT_EQ(std::memcmp(got[g].data(), want[g].data(), want[g].size() * sizeof(float)), 0)
            << dtype_name(dtype) << (swiglu ? " swiglu" : "") << ": group of " << sizes[g]
            << " tokens";
    }
  }
}

TEST(MoeSchema, ExpertTensorsHaveTheirShapesAndTheShardPlanSplitsExperts) {
  const ModelConfig c = parse(qwen3_moe(R"(,"mlp_only_layers":[1])"));
  std::string why;
  EXPECT_EQ(schema_shape(c, "model.layers.0.mlp.gate.weight", &why),
            (std::vector<std::int64_t>{8, 128}));
  EXPECT_EQ(why, "[num_experts = 8, hidden_size = 128]");
  EXPECT_EQ(schema_shape(c, "model.layers.0.mlp.experts.7.up_proj.weight"),
            (std::vector<std::int64_t>{64, 128}));
  EXPECT_EQ(schema_shape(c, "model.layers.2.mlp.experts.3.down_proj.weight", &why),
            (std::vector<std::int64_t>{128, 64}));
  EXPECT_EQ(why, "[hidden_size = 128, moe_intermediate_size = 64]");
  EXPECT_TRUE(schema_shape(c, "model.layers.0.mlp.experts.8.up_proj.weight").empty());
  EXPECT_TRUE(schema_shape(c, "model.layers.1.mlp.experts.0.up_proj.weight").empty());  // dense
  EXPECT_EQ(schema_shape(c, "model.layers.1.mlp.up_proj.weight"),
            (std::vector<std::int64_t>{256, 128}));
  EXPECT_EQ(schema_shape(parse(mixtral()), "model.layers.1.block_sparse_moe.experts.3.w2.weight"),
            (std::vector<std::int64_t>{128, 96}));

  // ep = tp: whole experts, split over the ranks; ep = 1: every expert, each cut by tp.
  const ShardPlan a = ShardPlan::make(c, 2, 1, "cfg.json");
  EXPECT_EQ(a.ep, 2);
  EXPECT_EQ(a.experts, 4);
  EXPECT_EQ(a.expert_begin, 4);
  EXPECT_EQ(a.expert_intermediate, 64);
  EXPECT_EQ(a.local_expert(5), 1);
  EXPECT_EQ(a.local_expert(3), -1);
  const ShardPlan b = ShardPlan::make(c, 2, 1, "cfg.json", 1);
  EXPECT_EQ(b.ep, 1);
  EXPECT_EQ(b.experts, 8);
  EXPECT_EQ(b.expert_begin, 0);
  EXPECT_EQ(b.expert_intermediate, 32);
  EXPECT_EQ(b.expert_intermediate_begin, 32);
  // A dense model's plan has no experts.
  EXPECT_EQ(ShardPlan::make(parse(qwen3_moe(R"(,"num_experts":0)")), 2, 0).experts, 0);
}

TEST(MoeSchema, ExpertParallelismThatDoesNotFitNamesTheFieldOrTheKey) {
  const ModelConfig c = parse(qwen3_moe());
  std::string what = error_of([&] { ShardPlan::make(c, 4, 0, "cfg.json", 2); });
  EXPECT_NE(what.find("parallel.ep = 2"), std::string::npos) << what;
  // 8 experts over 4... fine; over tp = 4 with 6 experts: not evenly.
  const ModelConfig six = parse(qwen3_moe(R"(,"num_experts":6)"));
  what = error_of([&] { ShardPlan::make(six, 4, 0, "cfg.json"); });
  EXPECT_NE(what.find("cfg.json: num_experts = 6 is not divisible by parallel.ep = 4"),
            std::string::npos)
      << what;
  EXPECT_NO_THROW(ShardPlan::make(six, 4, 0, "cfg.json", 1));  // every expert, cut in 4
  // ep = 1 cuts each expert's intermediate dimension by tp.
  const ModelConfig narrow = parse(qwen3_moe(R"(,"moe_intermediate_size":66)"));
  what = error_of([&] { ShardPlan::make(narrow, 4, 0, "cfg.json", 1); });
  EXPECT_NE(what.find("moe_intermediate_size = 66 is not divisible by tp = 4"), std::string::npos)
      << what;
  // Mixtral's intermediate_size is its experts' width: only ep = 1 cuts it, naming that field.
  const ModelConfig mx = parse(mixtral(R"(,"intermediate_size":90)"));
  EXPECT_NO_THROW(ShardPlan::make(mx, 4, 0, "cfg.json"));
  what = error_of([&] { ShardPlan::make(mx, 4, 0, "cfg.json", 1); });
  EXPECT_NE(what.find("intermediate_size = 90 is not divisible by tp = 4"), std::string::npos)
      << what;
}

namespace {

// A synthetic MoE target in a temporary directory.
struct MoeModel {
  test::TempDir dir;
  std::unique_ptr<Checkpoint> checkpoint;
  test::SingleRankComm comm;
  std::unique_ptr<LanguageModel> model;

  MoeModel(const std::string& arch, DType dtype, int threads = 2) {
    SyntheticSpec spec;
    spec.architecture = arch;
    spec.hidden = 128;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.layers = 3;
    spec.intermediate = 96;
    spec.vocab = 512;
    spec.experts = 8;
    spec.experts_per_tok = 2;
    spec.dtype = dtype;
    if (arch == "qwen3_moe") spec.mlp_only_layers = {1};
    make_model_pair(spec, dir.path());
    checkpoint = std::make_unique<Checkpoint>(dir.file("target"));
    model = load_cpu_model(*checkpoint, comm, threads);
  }
};

std::vector<float> logits_of(LanguageModel& m, std::span<const SeqChunk> batch, bool all) {
  std::vector<float> logits;
  m.forward(batch, all, logits);
  return logits;
}

std::vector<std::int32_t> tokens(int n, int seed) {
  std::vector<std::int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + (seed * 131 + i * 71) % 509);
  return t;
}

}  // namespace

// A token's logits are bitwise the same whatever else is in its pass: alone, in a batch of
// sequences of other lengths (whose tokens go to other experts and change how many tokens each
// expert runs over), as one node of a token tree, and with only each sequence's last logits.
TEST(MoeBatchInvariance, ATokensLogitsDoNotDependOnTheOtherTokensOfItsPass) {
  for (const char* arch : {"qwen3_moe", "mixtral"}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      MoeModel m(arch, dtype);
      LanguageModel& lm = *m.model;
      const int V = lm.config().vocab_size;
      const auto a = tokens(21, 1), b = tokens(9, 2), c = tokens(14, 3);
      // Alone: a prefill of all but 3 tokens, then a verify window of 3.
      auto alone = [&](const std::vector<std::int32_t>& t) {
        auto cache = lm.new_cache(64);
        const SeqChunk pre{cache.get(), t.data(), static_cast<int>(t.size()) - 3};
        const auto p = logits_of(lm, {&pre, 1}, true);
        const SeqChunk win{cache.get(), t.data() + t.size() - 3, 3};
        auto w = logits_of(lm, {&win, 1}, true);
        std::vector<float> all(p);
        all.insert(all.end(), w.begin(), w.end());
        return all;
      };
      const auto want_a = alone(a), want_b = alone(b), want_c = alone(c);
      // Together: the three prefills in one pass, then the three windows in one pass.
      std::vector<std::unique_ptr<KvCache>> caches;
      for (int i = 0; i < 3; ++i) caches.push_back(lm.new_cache(64));
      const std::vector<std::int32_t>* seqs[3] = {&a, &b, &c};
      const std::vector<float>* wants[3] = {&want_a, &want_b, &want_c};
      std::vector<SeqChunk> pre, win;
      for (int i = 0; i < 3; ++i) {
        const auto& t = *seqs[i];
        pre.push_back({caches[i].get(), t.data(), static_cast<int>(t.size()) - 3});
        win.push_back({caches[i].get(), t.data() + t.size() - 3, 3});
      }
      const auto got_pre = logits_of(lm, pre, true);
      const auto got_win = logits_of(lm, win, true);
      std::size_t row_pre = 0;
      for (int i = 0; i < 3; ++i) {
        const std::size_t n = seqs[i]->size() - 3;
        EXPECT_EQ(std::memcmp(&got_pre[row_pre * V], wants[i]->data(), n * V * sizeof(float)), 0)
            << arch << " " << dtype_name(dtype) << ": prefill of sequence " << i;
        EXPECT_EQ(std::memcmp(&got_win[static_cast<std::size_t>(i) * 3 * V], &(*wants[i])[n * V],
                              3 * V * sizeof(float)),
                  0)
            << arch << " " << dtype_name(dtype) << ": verify window of sequence " << i;
        row_pre += n;
      }
      // Each sequence's last logits only: bitwise the all-logits rows.
      std::vector<std::unique_ptr<KvCache>> last_caches;
      std::vector<SeqChunk> last;
      for (int i = 0; i < 3; ++i) {
        last_caches.push_back(lm.new_cache(64));
        last.push_back({last_caches[i].get(), seqs[i]->data(), static_cast<int>(seqs[i]->size())});
      }
      const auto got_last = logits_of(lm, last, false);
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(std::memcmp(&got_last[static_cast<std::size_t>(i) * V],
                              &(*wants[i])[(seqs[i]->size() - 1) * V], V * sizeof(float)),
                  0)
            << arch << " " << dtype_name(dtype) << ": last logits of sequence " << i;
    }
  }
}

TEST(MoeBatchInvariance, EveryTreeNodeGetsTheLogitsOfItsPathDecodedAlone) {
  MoeModel m("qwen3_moe", DType::kBF16);
  LanguageModel& lm = *m.model;
  const int V = lm.config().vocab_size;
  const auto prompt = tokens(12, 4);
  const int P = static_cast<int>(prompt.size());
  // Root = the prompt's last token; nodes 0..5 with parents (node indices, -1 = root).
  const std::vector<std::int32_t> node_tokens = {40, 41, 42, 43, 44, 45};
  const std::vector<int> node_parent = {-1, -1, 0, 0, 2, 1};
  auto cache = lm.new_cache(P + 8);
  std::vector<float> logits;
  const SeqChunk pre{cache.get(), prompt.data(), P - 1};
  lm.forward({&pre, 1}, false, logits);
  std::vector<std::int32_t> toks = {prompt.back()}, parents = {kChainParent};
  for (std::size_t i = 0; i < node_tokens.size(); ++i) {
    toks.push_back(node_tokens[i]);
    parents.push_back(node_parent[i] < 0 ? P - 1 : P + node_parent[i]);
  }
  const SeqChunk tree{cache.get(), toks.data(), static_cast<int>(toks.size()), parents.data()};
  const auto got = logits_of(lm, {&tree, 1}, true);
  for (std::size_t i = 1; i < toks.size(); ++i) {
    std::vector<std::int32_t> path;
    for (int at = static_cast<int>(i) - 1; at >= 0; at = node_parent[at])
      path.insert(path.begin(), node_tokens[at]);
    std::vector<std::int32_t> seq = prompt;
    seq.insert(seq.end(), path.begin(), path.end());
    auto c2 = lm.new_cache(static_cast<int>(seq.size()));
    const SeqChunk p2{c2.get(), seq.data(), P};
    lm.forward({&p2, 1}, false, logits);
    for (std::size_t j = P; j < seq.size(); ++j) {
      const SeqChunk step{c2.get(), &seq[j], 1};
      lm.forward({&step, 1}, false, logits);
    }
    EXPECT_EQ(std::memcmp(&got[i * V], logits.data(), V * sizeof(float)), 0) << "node " << i - 1;
  }
}

TEST(MoeRoutingRecord, EveryForwardRecordsEachTokensExpertsInEveryMoeLayer) {
  MoeModel m("qwen3_moe", DType::kBF16);
  LanguageModel& lm = *m.model;
  const ExpertRouting* r = lm.routing();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->layers, (std::vector<int>{0, 2}));  // layer 1 is dense (mlp_only_layers)
  EXPECT_EQ(r->top_k, 2);
  EXPECT_EQ(r->n_experts, 8);
  EXPECT_EQ(r->ep, 1);
  EXPECT_EQ(r->expert_bytes, 3 * 128 * 96 * 2);  // gate, up, down in BF16
  const auto a = tokens(10, 5), b = tokens(7, 6);
  auto ca = lm.new_cache(32), cb = lm.new_cache(32);
  const SeqChunk batch[2] = {{ca.get(), a.data(), 10}, {cb.get(), b.data(), 7}};
  logits_of(lm, batch, false);  // last logits only: the routing still covers every token
  ASSERT_EQ(r->n_tokens, 17);
  ASSERT_EQ(r->experts.size(), static_cast<std::size_t>(2 * 17 * 2));
  const std::vector<std::int32_t> together = r->experts;
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < 17; ++t) {
      EXPECT_NE(r->expert(l, t, 0), r->expert(l, t, 1));
      for (int j = 0; j < 2; ++j) EXPECT_TRUE(r->expert(l, t, j) >= 0 && r->expert(l, t, j) < 8);
    }
  // The same tokens alone are routed the same way (batch invariance of the routing), and a
  // decode step of one token records one token.
  auto c2 = lm.new_cache(32);
  const SeqChunk only_b{c2.get(), b.data(), 7};
  logits_of(lm, {&only_b, 1}, true);
  ASSERT_EQ(r->n_tokens, 7);
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < 7; ++t)
      for (int j = 0; j < 2; ++j)
        EXPECT_EQ(r->expert(l, t, j),
                  together[(static_cast<std::size_t>(l) * 17 + 10 + t) * 2 + j]);
  const std::int32_t next = 77;
  const SeqChunk step{c2.get(), &next, 1};
  logits_of(lm, {&step, 1}, false);
  EXPECT_EQ(r->n_tokens, 1);
  EXPECT_EQ(r->experts.size(), 4u);
  // A dense model has none.
  test::TempDir dense;
  SyntheticSpec spec;
  spec.hidden = 64;
  spec.layers = 1;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.intermediate = 64;
  spec.vocab = 64;
  make_model_pair(spec, dense.path());
  const Checkpoint ck(dense.file("target"));
  test::SingleRankComm comm;
  EXPECT_EQ(load_cpu_model(ck, comm, 1)->routing(), nullptr);
}

TEST(MoeCheckpoint, AMissingExpertIsNamed) {
  test::TempDir dir;
  SyntheticSpec spec;
  spec.architecture = "mixtral";
  spec.hidden = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.layers = 1;
  spec.intermediate = 32;
  spec.vocab = 64;
  spec.experts = 4;
  make_model_pair(spec, dir.path());
  // A config.json that says 5 experts for a checkpoint of 4.
  const std::string config = dir.file("target/config.json");
  ModelConfig c = ModelConfig::from_file(config);
  c.num_experts = 5;
  {
    std::ofstream out(config);
    out << c.to_json_text();
  }
  const Checkpoint ck(dir.file("target"));
  test::SingleRankComm comm;
  const std::string what = error_of([&] { load_cpu_model(ck, comm, 1); });
  EXPECT_NE(what.find("model.layers.0.block_sparse_moe.gate.weight"), std::string::npos) << what;
  EXPECT_NE(what.find("num_local_experts = 5"), std::string::npos) << what;
}
