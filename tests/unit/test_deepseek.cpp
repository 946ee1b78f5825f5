// The DeepSeek-V3 family (DeepseekV3ForCausalLM, Kimi-K2, Kimi-K2.5's text model) on the CPU:
//  - config.json: the fields, the layer kinds (dense below first_k_dense_replace, MoE at
//    layer % moe_layer_freq == 0), the Kimi-K2.5 outer layout, refusals naming the field;
//  - YaRN: the inverse frequencies' three bands, the cos/sin magnitude and the softmax scale;
//  - the weight schema's MLA, router-bias and shared-expert rows, their tp split;
//  - the latent attention (CpuBackend::attend with values inside the keys and an explicit
//    scale) against a float64 naive MLA (per-head keys and values expanded), at positions far
//    from 0: the absorbed form == the naive form;
//  - the model: the latent cache's size, batch and tree invariance (bitwise), keep on the latent
//    cache, MoE layers with the noaux_tc router (every token's experts within topk_group groups).
// The model's logits against an independent float64 reference: tests/e2e/deepseek_reference.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/model_factory.h"
#include "model/model_weights.h"
#include "model/synthetic.h"
#include "model/weight_schema.h"
#include "single_rank_comm.h"
#include "small_deepseek.h"
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

// Kimi-K2's config.json field set (its real fields, tiny sizes), `extra` appended, and
// `q_lora` as q_lora_rank's value.
std::string kimi_k2(const std::string& extra = "", const std::string& q_lora = "32") {
  return R"({"architectures":["DeepseekV3ForCausalLM"],"model_type":"kimi_k2",
    "auto_map":{"AutoConfig":"configuration_deepseek.DeepseekV3Config"},"aux_loss_alpha":0.001,
    "bos_token_id":1,"eos_token_id":2,"ep_size":1,"first_k_dense_replace":1,"hidden_act":"silu",
    "hidden_size":64,"initializer_range":0.02,"intermediate_size":96,"kv_lora_rank":32,
    "max_position_embeddings":1024,"moe_intermediate_size":32,"moe_layer_freq":1,"n_group":2,
    "n_routed_experts":8,"n_shared_experts":1,"norm_topk_prob":true,"num_attention_heads":4,
    "num_experts_per_tok":2,"num_hidden_layers":4,"num_key_value_heads":4,
    "num_nextn_predict_layers":0,"pretraining_tp":1,"q_lora_rank":)" +
         q_lora + R"(,"qk_nope_head_dim":16,"qk_rope_head_dim":8,
    "rms_norm_eps":1e-06,"rope_scaling":{"beta_fast":1.0,"beta_slow":1.0,"factor":32.0,
    "mscale":1.0,"mscale_all_dim":1.0,"original_max_position_embeddings":32,"type":"yarn"},
    "rope_theta":50000.0,"routed_scaling_factor":2.827,"scoring_func":"sigmoid","seq_aux":true,
    "tie_word_embeddings":false,"topk_group":1,"topk_method":"noaux_tc","torch_dtype":"bfloat16",
    "use_cache":true,"v_head_dim":24,"vocab_size":256)" +
         extra + "}";
}

// `text` with its first `from` replaced by `to` (which must be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// `text` (a config.json object) as Kimi-K2.5's text_config, `outer` fields appended.
std::string kimi_k25(const std::string& text, const std::string& outer = "") {
  return R"({"architectures":["KimiK25ForConditionalGeneration"],"model_type":"kimi_k25",
    "media_placeholder_token_id":163605,"vision_config":{"model_type":"kimi_k25_vision",
    "hidden_size":1152},"text_config":)" +
         text + outer + "}";
}

}  // namespace

TEST(DeepseekConfig, KimiK2FieldsAreParsed) {
  const ModelConfig c = parse(kimi_k2());
  EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.mla.q_lora_rank, 32);
  EXPECT_EQ(c.mla.kv_lora_rank, 32);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 16);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 8);
  EXPECT_EQ(c.mla.v_head_dim, 24);
  EXPECT_EQ(c.mla.cache_floats(), 40);
  EXPECT_TRUE(c.mla.rope_interleave);
  EXPECT_EQ(c.head_dim, 8);  // the rope part's, as Hugging Face's DeepseekV3Config
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.router.kind, MoeRouterConfig::kSigmoidNoauxTc);
  EXPECT_EQ(c.router.n_group, 2);
  EXPECT_EQ(c.router.topk_group, 1);
  EXPECT_DOUBLE_EQ(c.router.routed_scaling_factor, 2.827);
  EXPECT_EQ(c.router.n_shared_experts, 1);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_factor, 32.0);
  EXPECT_EQ(c.rope_original_max_position, 32);
  EXPECT_DOUBLE_EQ(c.rope_beta_fast, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 50000.0);
  EXPECT_EQ(c.tensor_prefix, "");
  // q_lora_rank null: a plain q_proj (DeepSeek-V2-Lite).
  EXPECT_EQ(parse(kimi_k2("", "null")).mla.q_lora_rank, 0);
  // A round trip through to_json_text keeps every field.
  const ModelConfig back = parse(c.to_json_text());
  EXPECT_EQ(back.mla.q_lora_rank, 32);
  EXPECT_EQ(back.router.n_group, 2);
  EXPECT_DOUBLE_EQ(back.rope_mscale_all_dim, 1.0);
  EXPECT_EQ(back.first_k_dense_replace, 1);
}

TEST(DeepseekConfig, LayerKindsFollowFirstKDenseReplaceAndMoeLayerFreq) {
  const ModelConfig c =
      parse(replaced(kimi_k2(), R"("moe_layer_freq":1)", R"("moe_layer_freq":2)"));
  ASSERT_EQ(c.moe_layer_freq, 2);
  // Dense below first_k_dense_replace = 1; MoE at layers >= 1 with layer % 2 == 0.
  const MlpKind want[] = {MlpKind::kDenseSwiGlu, MlpKind::kDenseSwiGlu, MlpKind::kMoe,
                          MlpKind::kDenseSwiGlu};
  for (int layer = 0; layer < 4; ++layer) {
    EXPECT_EQ(c.layer_kind(layer).attention, AttentionKind::kMla) << layer;
    EXPECT_EQ(c.layer_kind(layer).mlp, want[layer]) << layer;
  }
  // n_routed_experts null: every layer dense.
  const ModelConfig dense =
      parse(replaced(kimi_k2(), R"("n_routed_experts":8)", R"("n_routed_experts":null)"));
  EXPECT_FALSE(dense.has_moe_layers());
  // transformers v5's mlp_layer_types, when it agrees.
  EXPECT_TRUE(parse(kimi_k2(R"(,"mlp_layer_types":["dense","sparse","sparse","sparse"])"))
                  .has_moe_layers());
}

TEST(DeepseekConfig, KimiK25ReadsItsTextConfig) {
  const ModelConfig c = parse(kimi_k25(kimi_k2(), R"(,"eos_token_id":[2,3])"));
  EXPECT_EQ(c.architecture, "KimiK25ForConditionalGeneration");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.tensor_prefix, "language_model.");
  EXPECT_EQ(c.mla.kv_lora_rank, 32);
  EXPECT_TRUE(c.is_eos(3));
  // to_json_text writes the outer layout back.
  const ModelConfig back = parse(c.to_json_text());
  EXPECT_EQ(back.architecture, "KimiK25ForConditionalGeneration");
  EXPECT_EQ(back.tensor_prefix, "language_model.");
  EXPECT_EQ(back.mla.v_head_dim, 24);
  EXPECT_NE(error_of([] {
              parse(R"({"architectures":["KimiK25ForConditionalGeneration"]})");
            }).find("text_config"),
            std::string::npos);
}

TEST(DeepseekConfig, UnsupportedFieldsAreRefusedByName) {
  struct Case {
    std::string text, field;
  };
  auto with = [](const std::string& from, const std::string& to) {
    return replaced(kimi_k2(), from, to);
  };
  const std::vector<Case> cases = {
      {with(R"("topk_method":"noaux_tc")", R"("topk_method":"group_limited_greedy")"),
       "topk_method"},
      {with(R"("scoring_func":"sigmoid")", R"("scoring_func":"softmax")"), "scoring_func"},
      {kimi_k2(R"(,"quantization_config":{"quant_method":"fp8"})"), "quantization_config"},
      {kimi_k25(kimi_k2(), R"(,"quantization_config":{"quant_method":"compressed-tensors"})"),
       "quantization_config"},
      {kimi_k25(kimi_k2(R"(,"quantization_config":{"quant_method":"fp8"})")),
       "quantization_config"},
      {kimi_k2(R"(,"attention_bias":true)"), "attention_bias"},
      {with(R"("kv_lora_rank":32,)", ""), "kv_lora_rank"},
      {with(R"("q_lora_rank":32,)", ""), "q_lora_rank"},
      {with(R"("n_group":2)", R"("n_group":3)"), "n_group"},
      {with(R"("topk_group":1)", R"("topk_group":3)"), "topk_group"},
      {with(R"("num_key_value_heads":4)", R"("num_key_value_heads":2)"), "num_key_value_heads"},
      {with(R"("qk_rope_head_dim":8)", R"("qk_rope_head_dim":7)"), "qk_rope_head_dim"},
      {with(R"("type":"yarn")", R"("type":"longrope")"), "rope"},
      {kimi_k2(R"(,"mlp_layer_types":["dense","dense","sparse","sparse"])"), "mlp_layer_types"},
      {with(R"("original_max_position_embeddings")",
            R"("truncate":false,"original_max_position_embeddings")"),
       "truncate"},
  };
  for (const Case& k : cases) {
    const std::string e = error_of([&] { parse(k.text); });
    EXPECT_NE(e.find(k.field), std::string::npos) << k.field << ": " << e;
  }
  // YaRN for a Llama-family model is refused (its graph has no YaRN magnitude scaling).
  const std::string llama =
      R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":96,
      "num_hidden_layers":1,"num_attention_heads":4,"vocab_size":256,
      "rope_scaling":{"type":"yarn","factor":4.0}})";
  EXPECT_NE(error_of([&] { parse(llama); }).find("yarn"), std::string::npos);
}

// YaRN, from its definition: frequencies of dimension pairs below the correction range's low
// bound are unchanged (extrapolated), above its high bound divided by factor (interpolated),
// linear in between; the cos/sin magnitude and the softmax scale from mscale(s, m) =
// 0.1 m ln s + 1.
TEST(DeepseekYarn, FrequenciesMagnitudeAndSoftmaxScale) {
  ModelConfig c = parse(kimi_k2());
  c.head_dim = 64;
  c.mla.qk_rope_head_dim = 64;
  c.rope_theta = 10000.0;
  c.rope_factor = 40.0;
  c.rope_original_max_position = 4096;
  c.rope_beta_fast = 32.0;
  c.rope_beta_slow = 1.0;
  const std::vector<float> f = c.rope_inv_freq();
  ASSERT_EQ(f.size(), 32u);
  const double kPi = 3.14159265358979323846;
  // Correction dimension of r rotations: d ln(L / (2 pi r)) / (2 ln theta).
  auto corr = [&](double r) { return 64 * std::log(4096 / (2 * kPi * r)) / (2 * std::log(1e4)); };
  const int low = static_cast<int>(std::floor(corr(32))),
            high = static_cast<int>(std::ceil(corr(1)));
  ASSERT_EQ(low, 10);   // worked out by hand: 64 ln(20.37) / (2 ln 1e4) = 10.48 -> 10
  ASSERT_EQ(high, 23);  // 64 ln(651.9) / 18.42 = 22.51 -> 23
  for (int j = 0; j < 32; ++j) {
    const double base = std::pow(1e4, -2.0 * j / 64);
    const double ramp = std::clamp((j - low) / double(high - low), 0.0, 1.0);
    const double want = base * (1 - ramp) + base / 40.0 * ramp;
    EXPECT_NEAR(f[j], want, 1e-6 * want) << "pair " << j;
  }
  EXPECT_FLOAT_EQ(f[0], 1.0f);                                // extrapolated
  EXPECT_NEAR(f[31], std::pow(1e4, -62.0 / 64) / 40, 1e-12);  // interpolated
  // Magnitude of cos/sin: mscale(40, 1) / mscale(40, 0.707) with both set, mscale(40, 1) with
  // one missing, 1 when they are equal; softmax scale: qk_head_dim^-0.5 * mscale(40, all)^2.
  const double m1 = 0.1 * std::log(40.0) + 1, m707 = 0.1 * 0.707 * std::log(40.0) + 1;
  c.rope_mscale = 1.0;
  c.rope_mscale_all_dim = 0.707;
  EXPECT_NEAR(c.rope_attention_scaling(), m1 / m707, 1e-12);
  EXPECT_NEAR(c.attention_softmax_scale(), m707 * m707 / std::sqrt(16.0 + 64.0), 1e-12);
  c.rope_mscale = 0;
  EXPECT_NEAR(c.rope_attention_scaling(), m1, 1e-12);
  c.rope_mscale = c.rope_mscale_all_dim = 1.0;
  EXPECT_DOUBLE_EQ(c.rope_attention_scaling(), 1.0);
  c.rope_mscale_all_dim = 0;
  EXPECT_NEAR(c.attention_softmax_scale(), 1 / std::sqrt(80.0), 1e-15);
}

// A synthetic DeepSeek-V3 target in a temporary directory.
struct DeepseekModelFixture {
  test::TempDir dir;
  SyntheticSpec spec;
  std::unique_ptr<Checkpoint> checkpoint;
  test::SingleRankComm comm;

  explicit DeepseekModelFixture(const std::string& arch = "deepseek_v3", bool dense = true,
                                int q_lora = 32) {
    spec = test::small_deepseek_spec(arch, dense ? 2 : 1, q_lora);
    make_model_pair(spec, dir.path());
    checkpoint = std::make_unique<Checkpoint>(dir.file("target"));
  }
};

TEST(DeepseekSchema, MlaRouterAndSharedExpertRowsLoadAndSplitByHeads) {
  DeepseekModelFixture f("kimi_k25", /*dense=*/false);
  const ModelConfig& c = f.checkpoint->config();
  ASSERT_EQ(c.tensor_prefix, "language_model.");
  std::string why;
  EXPECT_EQ(schema_shape(c, "language_model.model.layers.0.self_attn.kv_b_proj.weight", &why),
            (std::vector<std::int64_t>{4 * (16 + 24), 32}));
  EXPECT_NE(why.find("qk_nope_head_dim+v_head_dim"), std::string::npos) << why;
  EXPECT_EQ(schema_shape(c, "language_model.model.layers.1.mlp.gate.e_score_correction_bias"),
            (std::vector<std::int64_t>{8}));
  EXPECT_TRUE(schema_shape(c, "model.layers.0.self_attn.kv_b_proj.weight").empty());
  for (int tp : {1, 2, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      const HostWeights w = load_host_weights(*f.checkpoint, tp, rank, deepseek_schema());
      auto at = [&](int layer, Role r) { return w.layers[layer][static_cast<int>(r)]; };
      const int heads = 4 / tp;
      EXPECT_EQ(at(0, Role::kQA).rows, 32);  // the latent path: whole on every rank
      EXPECT_EQ(at(0, Role::kKvA).rows, 32 + 8);
      EXPECT_EQ(at(0, Role::kKvANorm).cols, 32);
      EXPECT_EQ(at(0, Role::kQB).rows, heads * (16 + 8));  // the heads: split
      EXPECT_EQ(at(0, Role::kKvB).rows, heads * (16 + 24));
      EXPECT_EQ(at(0, Role::kO).cols, heads * 24);
      // Layer 1 is MoE: the router bias in float32, the shared experts cut like a dense MLP.
      EXPECT_EQ(at(1, Role::kRouterBias).cols, 8);
      EXPECT_EQ(at(1, Role::kRouterBias).dtype, DType::kF32);
      EXPECT_EQ(at(1, Role::kSharedGate).rows, 32 / tp);
      EXPECT_EQ(at(1, Role::kSharedDown).cols, 32 / tp);
      EXPECT_EQ(w.experts[1][static_cast<int>(Role::kExpertGate)].size(), 8u / tp);
      // The q_b rows of the rank's heads are the checkpoint's rows from its first head on.
      const TensorView& full = f.checkpoint->tensor(
          "language_model.model.layers.0.self_attn.q_b_proj.weight", {4 * 24, 32});
      EXPECT_EQ(at(0, Role::kQB).data,
                full.data + static_cast<std::size_t>(rank) * heads * 24 * 32 * sizeof(float));
    }
  }
  // A plain q_proj when q_lora_rank is null.
  DeepseekModelFixture plain("deepseek_v3", true, 0);
  const HostWeights w = load_host_weights(*plain.checkpoint, 1, 0, deepseek_schema());
  EXPECT_EQ(w.layers[0][static_cast<int>(Role::kQ)].rows, 4 * 24);
  EXPECT_EQ(w.layers[0][static_cast<int>(Role::kQA)].data, nullptr);
}

// The MoE layers' tensors prepare on a backend (what the router's block will read): the shared
// experts' gate and up as one pair, the router bias as a float32 vector.
TEST(DeepseekSchema, MoeLayerTensorsPrepareOnTheBackend) {
  DeepseekModelFixture f("deepseek_v3", /*dense=*/false);
  const ModelConfig& c = f.checkpoint->config();
  const HostWeights host = load_host_weights(*f.checkpoint, 2, 1, deepseek_schema());
  CpuBackend b(1);
  const ModelWeights<CpuBackend> w = prepare_weights(b, host, c, deepseek_schema());
  const CpuBackend::Weight& shared = w.at(1, Role::kSharedGate);
  EXPECT_EQ(shared.layout, CpuBackend::Weight::Layout::kPackedPair);
  EXPECT_EQ(shared.rows, 32 / 2);
  EXPECT_EQ(w.at(1, Role::kSharedDown).cols, 32 / 2);
  EXPECT_EQ(w.at(1, Role::kRouterBias).dtype, DType::kF32);
  EXPECT_EQ(w.at(1, Role::kRouterBias).cols, 8);
  EXPECT_EQ(w.maybe(1, Role::kSharedUp), nullptr);  // prepared with its gate
  EXPECT_EQ(w.stack(1, Role::kExpertGate).size(), 4u);
}

// The absorbed latent attention of the backend (one kv head whose values are the first
// kv_lora_rank floats of its key rows, an explicit scale) against a float64 naive MLA: keys
// [W_uk c ; k_pe] and values W_uv c expanded per head, at positions 37..40 of a 41-token cache
// (far from 0: a one-key softmax would hide a wrong scale).
TEST(DeepseekAttention, AbsorbedLatentAttentionEqualsTheNaiveForm) {
  const int heads = 3, R = 20, dn = 12, dr = 6, dv = 10, T = 41, n = 4, row = R + dr;
  const float scale = 0.37f;
  std::mt19937 rng(7);
  std::normal_distribution<double> g(0.0, 1.0);
  auto randn = [&](std::size_t k) {
    std::vector<double> v(k);
    for (double& x : v) x = g(rng);
    return v;
  };
  const std::vector<double> c = randn(T * R), k_pe = randn(T * dr);
  const std::vector<double> q_nope = randn(n * heads * dn), q_pe = randn(n * heads * dr);
  const std::vector<double> w_uk = randn(heads * dn * R), w_uv = randn(heads * dv * R);
  // Naive, float64.
  std::vector<double> want(n * heads * dv, 0.0);
  for (int t = 0; t < n; ++t) {
    const int pos = T - n + t;
    for (int h = 0; h < heads; ++h) {
      std::vector<double> s(pos + 1);
      double top = -1e300;
      for (int p = 0; p <= pos; ++p) {
        double dot = 0;
        for (int i = 0; i < dn; ++i) {
          double k = 0;
          for (int r = 0; r < R; ++r) k += w_uk[(h * dn + i) * R + r] * c[p * R + r];
          dot += q_nope[(t * heads + h) * dn + i] * k;
        }
        for (int i = 0; i < dr; ++i) dot += q_pe[(t * heads + h) * dr + i] * k_pe[p * dr + i];
        s[p] = dot * scale;
        top = std::max(top, s[p]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - top));
      for (int p = 0; p <= pos; ++p)
        for (int o = 0; o < dv; ++o) {
          double v = 0;
          for (int r = 0; r < R; ++r) v += w_uv[(h * dv + o) * R + r] * c[p * R + r];
          want[(t * heads + h) * dv + o] += s[p] / sum * v;
        }
    }
  }
  // Absorbed, through the backend's attention: the cache rows [c ; k_pe], the queries
  // [W_uk^T q_nope ; q_pe] per head, the output through W_uv afterwards (in float64: only the
  // attention is under test).
  CpuBackend b(2);
  CpuBackend::KvBlock kv = b.new_kv_block(KvShape{1, row, 0}, T);
  for (int p = 0; p < T - n; ++p)
    for (int r = 0; r < row; ++r)
      kv.keys(0)[p * row + r] = static_cast<float>(r < R ? c[p * R + r] : k_pe[p * dr + r - R]);
  std::vector<SeqSpan<CpuBackend::KvBlock>> seqs = {{&kv, T - n, n, 0, T, nullptr}};
  std::vector<std::int32_t> toks(n, 3), pos(n);
  for (int t = 0; t < n; ++t) pos[t] = T - n + t;
  b.begin_forward(seqs, toks.data(), pos.data(), n);
  const AttentionHeads latent{heads, 1, row, R, scale, true};
  EXPECT_EQ(latent.value_floats(), 0);
  const CpuBackend::KvRows rows = b.kv_rows(0, latent);
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < row; ++r)
      rows.k.get()[t * row + r] =
          static_cast<float>(r < R ? c[(T - n + t) * R + r] : k_pe[(T - n + t) * dr + r - R]);
  std::vector<float> q(n * heads * row), out(n * heads * R);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      for (int r = 0; r < R; ++r) {
        double x = 0;
        for (int i = 0; i < dn; ++i)
          x += w_uk[(h * dn + i) * R + r] * q_nope[(t * heads + h) * dn + i];
        q[(t * heads + h) * row + r] = static_cast<float>(x);
      }
      for (int i = 0; i < dr; ++i)
        q[(t * heads + h) * row + R + i] = static_cast<float>(q_pe[(t * heads + h) * dr + i]);
    }
  b.attend(0, CpuBackend::CF(q.data()), n, false, CpuBackend::F(out.data()), latent);
  b.end_forward();
  double err = 0, norm = 0;
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h)
      for (int o = 0; o < dv; ++o) {
        double v = 0;
        for (int r = 0; r < R; ++r) v += w_uv[(h * dv + o) * R + r] * out[(t * heads + h) * R + r];
        const double d = v - want[(t * heads + h) * dv + o];
        err += d * d;
        norm += want[(t * heads + h) * dv + o] * want[(t * heads + h) * dv + o];
      }
  // float32 inputs and attention against float64: relative L2 ~1e-7.
  EXPECT_LT(std::sqrt(err / norm), 2e-6);
}

namespace {

std::vector<std::int32_t> tokens(int n, int seed) {
  std::vector<std::int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + (seed * 131 + i * 71) % 250);
  return t;
}

std::vector<float> logits_of(LanguageModel& m, std::span<const SeqChunk> batch, bool all) {
  std::vector<float> logits;
  m.forward(batch, all, logits);
  return logits;
}

}  // namespace

TEST(DeepseekModel, TheCacheHoldsOneLatentRowPerTokenAndLayer) {
  for (const char* arch : {"deepseek_v3", "kimi_k25"}) {
    DeepseekModelFixture f(arch);
    test::SingleRankComm comm;
    auto m = load_cpu_model(*f.checkpoint, comm, 2);
    // kv_lora_rank + qk_rope_head_dim floats per token and layer.
    EXPECT_EQ(m->kv_bytes_per_token(), 2u * (32 + 8) * sizeof(float)) << arch;
    const auto t = tokens(5, 1);
    auto cache = m->new_cache(8);
    const SeqChunk s{cache.get(), t.data(), 5};
    logits_of(*m, {&s, 1}, false);
    std::vector<float> rows(5 * 40);
    m->read_kv(*cache, 1, 0, rows.data());
    // The rope part of the last row is not all zero (the latent rows were written).
    double sum = 0;
    for (int i = 32; i < 40; ++i) sum += std::fabs(rows[4 * 40 + i]);
    EXPECT_GT(sum, 0.0) << arch;
  }
}

// A token's logits are bitwise the same in any pass (alone, with other sequences, as a tree
// node), and keep moves the latent rows of the accepted path like a sequential decode.
TEST(DeepseekModel, BatchTreeAndKeepAreBitwiseASequentialDecode) {
  DeepseekModelFixture f("deepseek_v3", true, 0);
  test::SingleRankComm comm;
  auto m = load_cpu_model(*f.checkpoint, comm, 2);
  LanguageModel& lm = *m;
  const int V = lm.config().vocab_size;
  const auto prompt = tokens(30, 2);
  const int P = static_cast<int>(prompt.size());
  // Sequential decode of prompt + path.
  auto decode = [&](const std::vector<std::int32_t>& seq) {
    auto c = lm.new_cache(static_cast<int>(seq.size()));
    std::vector<float> all, step;
    for (std::size_t j = 0; j < seq.size(); ++j) {
      const SeqChunk s{c.get(), &seq[j], 1};
      lm.forward({&s, 1}, false, step);
      all.insert(all.end(), step.begin(), step.end());
    }
    return all;
  };
  const std::vector<float> want = decode(prompt);
  // Prefill in one pass, batched with another sequence.
  const auto other = tokens(11, 3);
  auto c1 = lm.new_cache(P + 8), c2 = lm.new_cache(16);
  const SeqChunk batch[2] = {{c1.get(), prompt.data(), P - 1}, {c2.get(), other.data(), 11}};
  const auto got = logits_of(lm, batch, true);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), (P - 1) * V * sizeof(float)), 0);
  // A tree after the prompt: root = its last token, nodes with parents (-1: root).
  const std::vector<std::int32_t> node_tokens = {40, 41, 42, 43, 44};
  const std::vector<int> node_parent = {-1, -1, 0, 1, 2};
  std::vector<std::int32_t> toks = {prompt.back()}, parents = {kChainParent};
  for (std::size_t i = 0; i < node_tokens.size(); ++i) {
    toks.push_back(node_tokens[i]);
    parents.push_back(node_parent[i] < 0 ? P - 1 : P + node_parent[i]);
  }
  const SeqChunk tree{c1.get(), toks.data(), static_cast<int>(toks.size()), parents.data()};
  const auto got_tree = logits_of(lm, {&tree, 1}, true);
  EXPECT_EQ(std::memcmp(got_tree.data(), &want[(P - 1) * V], V * sizeof(float)), 0);
  for (std::size_t i = 1; i < toks.size(); ++i) {
    std::vector<std::int32_t> seq = prompt;
    std::vector<std::int32_t> path;
    for (int at = static_cast<int>(i) - 1; at >= 0; at = node_parent[at])
      path.insert(path.begin(), node_tokens[at]);
    seq.insert(seq.end(), path.begin(), path.end());
    const auto ref = decode(seq);
    EXPECT_EQ(std::memcmp(&got_tree[i * V], &ref[(seq.size() - 1) * V], V * sizeof(float)), 0)
        << "node " << i - 1;
  }
  // Keep the path root -> node 0 -> node 2 -> node 4 (slots P, P+2, P+4 after the root's P-1),
  // then decode one more token: bitwise the sequential decode of that sequence.
  const std::vector<int> keep_rows = {0, 1, 3, 5};
  lm.keep(*c1, P - 1, keep_rows);
  const std::int32_t next = 77;
  const SeqChunk after{c1.get(), &next, 1};
  const auto got_after = logits_of(lm, {&after, 1}, false);
  std::vector<std::int32_t> seq = prompt;
  for (int i : {40, 42, 44}) seq.push_back(i);
  seq.push_back(next);
  const auto ref = decode(seq);
  EXPECT_EQ(std::memcmp(got_after.data(), &ref[(seq.size() - 1) * V], V * sizeof(float)), 0);
}

// Hidden-state capture on the MLA graph: id 0 is the embedding rows, id num_layers the final
// norm's output, whose product with lm_head is the logits.
TEST(DeepseekModel, CapturedHiddenStatesAreTheEmbeddingAndTheFinalNormsOutput) {
  DeepseekModelFixture f("kimi_k25");
  test::SingleRankComm comm;
  auto m = load_cpu_model(*f.checkpoint, comm, 2);
  const int H = 64, V = 256, L = 2;
  const auto t = tokens(7, 5);
  auto cache = m->new_cache(8);
  const SeqChunk s{cache.get(), t.data(), 7};
  const int ids[2] = {0, L};
  const ForwardResult r = m->forward({&s, 1}, ForwardRequest{true, ids});
  ASSERT_EQ(r.hidden.rows, 7);
  ASSERT_EQ(r.hidden.width, 2 * H);
  std::vector<float> hidden(7 * 2 * H), logits(7 * V);
  m->read(r.hidden, 0, 7, hidden.data());
  m->read(r.logits, 0, 7, logits.data());
  const TensorView& embed =
      f.checkpoint->tensor("language_model.model.embed_tokens.weight", {V, H});
  const TensorView& head = f.checkpoint->tensor("language_model.lm_head.weight", {V, H});
  const float* e = reinterpret_cast<const float*>(embed.data);
  const float* w = reinterpret_cast<const float*>(head.data);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(std::memcmp(&hidden[i * 2 * H], e + t[i] * H, H * sizeof(float)), 0) << i;
    for (int v = 0; v < V; v += 37) {
      double dot = 0;
      for (int k = 0; k < H; ++k)
        dot += static_cast<double>(hidden[i * 2 * H + H + k]) * w[v * H + k];
      EXPECT_NEAR(logits[i * V + v], dot, 1e-4 * (1 + std::fabs(dot))) << i << " " << v;
    }
  }
}

// A model with MoE layers runs them with DeepSeek-V3's router (its numerics against the float64
// reference: tests/e2e/deepseek_reference.sh): every token's experts are recorded for the MoE
// layer, top_k distinct ids in range, at most topk_group groups of them.
TEST(DeepseekModel, MoeLayersRunWithTheNoauxTcRouter) {
  DeepseekModelFixture f("deepseek_v3", /*dense=*/false);
  test::SingleRankComm comm;
  auto m = load_cpu_model(*f.checkpoint, comm, 2);
  const ExpertRouting* r = m->routing();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->layers, std::vector<int>{1});
  EXPECT_EQ(r->top_k, 2);
  EXPECT_EQ(r->n_experts, 8);
  const auto t = tokens(9, 6);
  auto cache = m->new_cache(16);
  const SeqChunk s{cache.get(), t.data(), 9};
  logits_of(*m, {&s, 1}, true);
  ASSERT_EQ(r->n_tokens, 9);
  for (int i = 0; i < 9; ++i) {
    const int a = r->experts[i * 2], b = r->experts[i * 2 + 1];
    EXPECT_TRUE(a >= 0 && a < 8 && b >= 0 && b < 8 && a != b) << i;
    EXPECT_EQ(a / 4, b / 4) << "token " << i << ": experts of 2 groups with topk_group 1";
  }
}
