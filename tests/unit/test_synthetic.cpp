// make-model: the synthetic pair loads as a checkpoint, the draft is a bit-identical truncated
// target, weights have the documented statistics, and generation is deterministic.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "temp_dir.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<float> values(const TensorView& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::kF32) {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    } else {
      std::uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);
      out[i] = bf16_to_f32(b);
    }
  }
  return out;
}

double std_dev(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += static_cast<double>(x) * x;
  const double m = s / static_cast<double>(v.size());
  return std::sqrt(s2 / static_cast<double>(v.size()) - m * m);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SyntheticSpec small_spec() {
  SyntheticSpec s;
  s.hidden = 64;
  s.layers = 3;
  s.heads = 4;
  s.kv_heads = 2;
  s.intermediate = 96;
  s.vocab = 100;
  s.max_pos = 128;
  s.draft_layers = 1;
  s.seed = 5;
  return s;
}

TEST(SplitMix64, ReferenceValueAndNormalMoments) {
  SplitMix64 zero(0);
  EXPECT_EQ(zero.next(), 0xE220A8397B1DCDAFull);  // the published first output for seed 0
  SplitMix64 rng(42);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = rng.normal();
    s += x;
    s2 += x * x;
  }
  // Standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032; allow ~5 sigma.
  EXPECT_NEAR(s / n, 0.0, 0.012);
  EXPECT_NEAR(s2 / n, 1.0, 0.016);
}

TEST(MakeModel, PairLoadsAndDraftIsTruncatedTarget) {
  TempDir tmp;
  SyntheticSpec spec = small_spec();
  spec.dtype = DType::kF32;
  make_model_pair(spec, tmp.path());
  Checkpoint target(tmp.path() + "/target");
  Checkpoint draft(tmp.path() + "/draft");
  EXPECT_TRUE(fs::exists(tmp.path() + "/target/generation_config.json"));
  EXPECT_EQ(target.config().num_layers, 3);
  EXPECT_EQ(draft.config().num_layers, 1);
  EXPECT_EQ(draft.config().vocab_size, target.config().vocab_size);
  EXPECT_EQ(target.config().head_dim, 16);
  EXPECT_EQ(target.config().num_kv_heads, 2);
  EXPECT_TRUE(target.config().is_eos(2));
  for (const Checkpoint* ck : {&target, &draft}) {
    EXPECT_EQ(ck->names().size(), 2u + 9 * ck->config().num_layers + 1);
    for (const std::string& name : ck->names()) {
      EXPECT_NO_THROW(ck->tensor(name, ck->config_shape(name))) << name;
    }
  }
  for (const std::string& name : draft.names()) {
    const TensorView& d = draft.tensor(name);
    const TensorView& t = target.tensor(name);
    ASSERT_EQ(d.nbytes, t.nbytes) << name;
    EXPECT_EQ(std::memcmp(d.data, t.data, d.nbytes), 0) << name << " differs from the target's";
  }
}

TEST(MakeModel, WeightStatisticsFollowTheSpec) {
  TempDir tmp;
  SyntheticSpec spec = small_spec();
  spec.dtype = DType::kBF16;
  make_model_pair(spec, tmp.path());
  Checkpoint target(tmp.path() + "/target");
  EXPECT_EQ(target.tensor("model.embed_tokens.weight").dtype, DType::kBF16);
  // 6400 samples each: relative standard error of a std ~ 1/sqrt(2n) < 1%; allow 5%.
  EXPECT_NEAR(std_dev(values(target.tensor("model.embed_tokens.weight"))), spec.embed_std, 0.05);
  EXPECT_NEAR(std_dev(values(target.tensor("lm_head.weight"))), spec.lm_head_std,
              0.05 * spec.lm_head_std);
  EXPECT_NEAR(std_dev(values(target.tensor("model.layers.0.self_attn.o_proj.weight"))),
              spec.weight_std, 0.05 * spec.weight_std);
  const double deep = spec.weight_std * spec.deep_scale;
  EXPECT_NEAR(std_dev(values(target.tensor("model.layers.2.self_attn.o_proj.weight"))), deep,
              0.05 * deep);
  EXPECT_NEAR(std_dev(values(target.tensor("model.layers.1.mlp.down_proj.weight"))), deep,
              0.05 * deep);
  EXPECT_NEAR(std_dev(values(target.tensor("model.layers.1.mlp.up_proj.weight"))), spec.weight_std,
              0.05 * spec.weight_std);
  for (float v : values(target.tensor("model.layers.1.input_layernorm.weight"))) EXPECT_EQ(v, 1.0f);
  for (float v : values(target.tensor("model.norm.weight"))) EXPECT_EQ(v, 1.0f);
}

TEST(MakeModel, DeterministicPerSeed) {
  TempDir a, b, c;
  SyntheticSpec spec = small_spec();
  make_model_pair(spec, a.path());
  make_model_pair(spec, b.path());
  spec.seed = 6;
  make_model_pair(spec, c.path());
  for (const char* m : {"/target/model.safetensors", "/draft/model.safetensors"}) {
    EXPECT_EQ(slurp(a.path() + m), slurp(b.path() + m)) << m;
    EXPECT_NE(slurp(a.path() + m), slurp(c.path() + m)) << m;
  }
  EXPECT_EQ(slurp(a.path() + "/target/config.json"), slurp(c.path() + "/target/config.json"));
}

TEST(MakeModel, InconsistentSpecNamesTheOption) {
  TempDir tmp;
  SyntheticSpec spec = small_spec();
  spec.heads = 5;
  EXPECT_NE(error_of([&] { make_model_pair(spec, tmp.path()); }).find("not divisible by --heads 5"),
            std::string::npos);
  spec = small_spec();
  spec.draft_layers = 4;
  EXPECT_NE(error_of([&] { make_model_pair(spec, tmp.path()); }).find("--draft-layers 4"),
            std::string::npos);
  spec = small_spec();
  spec.kv_heads = 3;
  EXPECT_NE(error_of([&] { make_model_pair(spec, tmp.path()); }).find("--kv-heads 3"),
            std::string::npos);
}

}  // namespace
}  // namespace specrun
