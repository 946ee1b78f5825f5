// make-model --quantize's writer (model/synthetic_quant.h) against hand-written expectations:
// the e4m3 rounding (every finite code's value round-trips, midpoints go to the even code,
// saturation, the sign of a negative that rounds to 0), int4 symmetric and asymmetric groups
// whose codes and scales are worked out by hand from docs/reference.md's rules, an fp8 block,
// and which modules each --quant-roles quantizes. The exactness of the whole checkpoint is
// tests/e2e/quant_reference.sh (an independent Python writer, byte for byte).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "common/error.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant.h"
#include "model/synthetic.h"
#include "model/synthetic_quant.h"
#include "model/weight_schema.h"

using namespace specrun;

namespace {

TensorToWrite f32_tensor(const std::string& name, std::vector<std::int64_t> shape,
                         const std::vector<float>& v) {
  TensorToWrite t{name, DType::kF32, std::move(shape), {}};
  t.bytes.resize(4 * v.size());
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

template <typename T>
std::vector<T> values(const TensorToWrite& t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

std::map<std::string, TensorToWrite> by_name(std::vector<TensorToWrite> ts) {
  std::map<std::string, TensorToWrite> m;
  for (TensorToWrite& t : ts) m.emplace(t.name, std::move(t));
  return m;
}

ModelConfig llama(const std::string& format, const std::string& roles) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.num_layers = 1;
  const nlohmann::ordered_json q = quantization_config_json(c, format, roles);
  c.quant = QuantConfig::parse(nlohmann::json::parse(q.dump()), "test config.json");
  return c;
}

TEST(SyntheticQuant, E4m3NearestRoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<std::uint8_t>(code);
    if (e4m3_is_nan(c) || c == 0x80) continue;  // -0 is written for negatives only
    EXPECT_EQ(e4m3_nearest(e4m3_to_f32(c)), c) << "code " << code;
  }
  EXPECT_EQ(e4m3_nearest(0.0f), 0x00);
  EXPECT_EQ(e4m3_nearest(-1e-9f), 0x80);  // a negative that rounds to 0 keeps its sign
  EXPECT_EQ(e4m3_nearest(448.0f), 0x7E);
  EXPECT_EQ(e4m3_nearest(1e6f), 0x7E);  // saturates, never NaN
  EXPECT_EQ(e4m3_nearest(-500.0f), 0xFE);
}

TEST(SyntheticQuant, E4m3MidpointsGoToTheEvenCode) {
  // 1.0 is 0x38 and 1.125 is 0x39: their midpoint 1.0625 goes to 0x38 (even), a hair above it
  // to 0x39. 1.125..1.25 (0x39, 0x3A): the midpoint goes up to 0x3A.
  EXPECT_EQ(e4m3_nearest(1.0625f), 0x38);
  EXPECT_EQ(e4m3_nearest(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(e4m3_nearest(1.1875f), 0x3A);
  EXPECT_EQ(e4m3_nearest(std::nextafter(1.1875f, 0.0f)), 0x39);
  // Subnormals: 2^-9 (0x01) and 2^-8 (0x02); their midpoint 1.5 * 2^-9 goes to 0x02; half of
  // 2^-9 (between 0 and 0x01) goes to 0.
  EXPECT_EQ(e4m3_nearest(1.5f * 0x1p-9f), 0x02);
  EXPECT_EQ(e4m3_nearest(0.5f * 0x1p-9f), 0x00);
  EXPECT_EQ(e4m3_nearest(-0.5f * 0x1p-9f), 0x80);
  // 416 (0x7D) and 448 (0x7E): 432 is the midpoint, to the even 0x7E.
  EXPECT_EQ(e4m3_nearest(432.0f), 0x7E);
  EXPECT_EQ(e4m3_nearest(-431.0f), 0xFD);
  // Every midpoint of the positive range: to the even neighbour.
  for (int c = 0; c < 126; ++c) {
    const float mid = (e4m3_to_f32(static_cast<std::uint8_t>(c)) +
                       e4m3_to_f32(static_cast<std::uint8_t>(c + 1))) /
                      2.0f;
    EXPECT_EQ(e4m3_nearest(mid), c % 2 == 0 ? c : c + 1) << "between codes " << c << ", " << c + 1;
  }
}

TEST(SyntheticQuant, Int4SymmetricGroupByHand) {
  // One row of 40 columns, group 32: group 0 has max |w| 0.7 -> s = 0.1 (f32 0.7f / 7),
  // group 1 (8 columns, partial) is all zero -> s = 1, every code 8.
  std::vector<float> row(40, 0.0f);
  row[0] = 0.7f;
  row[1] = -0.7f;
  row[2] = 0.25f;
  row[3] = 0.35f;
  row[4] = -0.05f;
  row[9] = 0.31f;
  const ModelConfig c = llama("int4-g32", "linear");
  auto out =
      by_name(quantize_tensors(c, {f32_tensor("model.layers.0.mlp.up_proj.weight", {1, 40}, row)}));
  ASSERT_EQ(out.size(), 3u);  // packed, scale, shape; no zero point
  const float s = 0.7f / 7.0f;
  const auto scales = values<float>(out.at("model.layers.0.mlp.up_proj.weight_scale"));
  ASSERT_EQ(scales.size(), 2u);
  EXPECT_EQ(scales[0], s);
  EXPECT_EQ(scales[1], 1.0f);
  const auto packed = values<std::int32_t>(out.at("model.layers.0.mlp.up_proj.weight_packed"));
  ASSERT_EQ(packed.size(), 5u);
  std::vector<int> q(40);
  for (int col = 0; col < 40; ++col) q[col] = unpack_signed<4>(packed.data(), col);
  std::vector<int> want(40, 0);
  want[0] = static_cast<int>(std::nearbyint(0.7f / s));
  want[1] = -want[0];
  want[2] = static_cast<int>(std::nearbyint(0.25f / s));
  want[3] = static_cast<int>(std::nearbyint(0.35f / s));
  want[4] = static_cast<int>(std::nearbyint(-0.05f / s));
  want[9] = static_cast<int>(std::nearbyint(0.31f / s));
  EXPECT_EQ(q, want);
  EXPECT_EQ(want[0], 7);
  EXPECT_EQ(want[9], 3);
  const auto shape = values<std::int64_t>(out.at("model.layers.0.mlp.up_proj.weight_shape"));
  EXPECT_EQ(shape, (std::vector<std::int64_t>{1, 40}));
}

TEST(SyntheticQuant, Int4AsymmetricZeroPointsPackedAlongRows) {
  // Nine rows (two zero-point words per group: rows 0..7, then row 8), 4 columns, group 128
  // (one partial group). Row r holds [r/10, 0.5 + r/10, 1.0, 1.5]: lo = 0, hi = 1.5,
  // s = 0.1, z = -8; the codes are rint(w / s) - 8.
  const int rows = 9;
  std::vector<float> w;
  for (int r = 0; r < rows; ++r)
    for (float v : {r / 10.0f, 0.5f + r / 10.0f, 1.0f, 1.5f}) w.push_back(v);
  const ModelConfig c = llama("int4-g128-asym", "linear");
  auto out = by_name(
      quantize_tensors(c, {f32_tensor("model.layers.0.self_attn.o_proj.weight", {rows, 4}, w)}));
  const auto zp = values<std::int32_t>(out.at("model.layers.0.self_attn.o_proj.weight_zero_point"));
  ASSERT_EQ(zp.size(), 2u);  // [ceil(9 / 8), 1]
  for (int r = 0; r < rows; ++r) EXPECT_EQ(unpack_signed<4>(zp.data(), r), -8) << "row " << r;
  EXPECT_EQ(static_cast<std::uint32_t>(zp[1]) >> 4, 0u);  // padding nibbles are 0
  const auto scales = values<float>(out.at("model.layers.0.self_attn.o_proj.weight_scale"));
  const auto packed = values<std::int32_t>(out.at("model.layers.0.self_attn.o_proj.weight_packed"));
  for (int r = 0; r < rows; ++r) {
    const float s = scales[r];
    EXPECT_EQ(s, 1.5f / 15.0f);
    for (int col = 0; col < 4; ++col) {
      const float q = std::clamp(std::nearbyint(w[r * 4 + col] / s - 8.0f), -8.0f, 7.0f);
      EXPECT_EQ(unpack_signed<4>(&packed[r], col), static_cast<int>(q)) << r << "," << col;
    }
  }
}

TEST(SyntheticQuant, Fp8BlockScaleAndCodes) {
  // 130 x 3: two row blocks (128 + a partial 2); block 0's max |w| is 4.48 -> s = 0.01.
  std::vector<float> w(130 * 3, 0.0f);
  w[0] = 4.48f;
  w[1] = -1.0f;
  w[128 * 3] = 0.0f;  // block 1 all zero: s = 1
  const ModelConfig c = llama("fp8-block", "linear");
  auto out = by_name(
      quantize_tensors(c, {f32_tensor("model.layers.0.mlp.down_proj.weight", {130, 3}, w)}));
  const auto s = values<float>(out.at("model.layers.0.mlp.down_proj.weight_scale_inv"));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], 4.48f / 448.0f);
  EXPECT_EQ(s[1], 1.0f);
  const auto codes = values<std::uint8_t>(out.at("model.layers.0.mlp.down_proj.weight"));
  EXPECT_EQ(out.at("model.layers.0.mlp.down_proj.weight").other_dtype, "F8_E4M3");
  EXPECT_EQ(codes[0], e4m3_nearest(4.48f / s[0]));
  EXPECT_EQ(codes[1], e4m3_nearest(-1.0f / s[0]));
  EXPECT_EQ(codes[2], 0x00);
}

TEST(SyntheticQuant, RolesPickTheModules) {
  const std::vector<float> w(64 * 64, 0.01f);
  auto names = [&](const std::string& format, const std::string& roles) {
    std::vector<std::string> quantized;
    for (const char* n :
         {"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
          "model.layers.0.mlp.gate_proj.weight"}) {
      const auto out = quantize_tensors(llama(format, roles), {f32_tensor(n, {64, 64}, w)});
      if (out.size() > 1) quantized.push_back(n);
    }
    return quantized;
  };
  const std::vector<std::string> linear = {"model.layers.0.self_attn.q_proj.weight",
                                           "model.layers.0.mlp.gate_proj.weight"};
  EXPECT_EQ(names("int4-g32", "linear"), linear);
  EXPECT_EQ(names("fp8-block", "linear"), linear);  // lm_head float by DeepSeek's convention
  std::vector<std::string> all = {"lm_head.weight"};
  all.insert(all.end(), linear.begin(), linear.end());
  EXPECT_EQ(names("int4-g32", "all"), all);
  EXPECT_TRUE(names("int4-g32", "experts").empty());  // a dense model has no routed experts
  EXPECT_THROW(validate_quantize("fp8-block", "all"), Error);
  EXPECT_THROW(validate_quantize("int3", ""), Error);
  EXPECT_THROW(validate_quantize("int4-g32", "heads"), Error);
}

// The provenance line (weight_schema.h's quantization_summary) of make-model's own configs: the
// experts of a Qwen3-MoE with Kimi-K2.5's ignore list (the dense layer's MLP and the routers
// float), every Linear but lm_head of a Llama in fp8.
TEST(SyntheticQuant, ProvenanceNamesTheQuantizedRows) {
  SyntheticSpec moe;
  moe.architecture = "qwen3_moe";
  moe.hidden = 64;
  moe.heads = 4;
  moe.kv_heads = 2;
  moe.layers = 3;
  moe.mlp_only_layers = {0};
  ModelConfig c = synthetic_config(moe, false);
  EXPECT_EQ(quantization_summary(c), "none");
  c.quant = QuantConfig::parse(
      nlohmann::json::parse(quantization_config_json(c, "int4-g32", "experts").dump()), "t");
  EXPECT_EQ(quantization_summary(c),
            c.quant.describe() +
                "; int4: mlp.experts.{e}.down_proj, mlp.experts.{e}.gate_proj, "
                "mlp.experts.{e}.up_proj");
  c.quant = QuantConfig::parse(
      nlohmann::json::parse(quantization_config_json(c, "int4-g32", "linear").dump()), "t");
  const std::string linear = quantization_summary(c);
  EXPECT_NE(linear.find("int4: mlp.down_proj, mlp.experts"), std::string::npos) << linear;
  EXPECT_NE(linear.find("self_attn.q_proj"), std::string::npos) << linear;
  EXPECT_EQ(linear.find("mlp.gate,"), std::string::npos) << linear;  // the router stays float
  EXPECT_EQ(linear.find("lm_head"), std::string::npos) << linear;

  SyntheticSpec dense;
  dense.hidden = 64;
  dense.heads = 4;
  dense.kv_heads = 2;
  dense.layers = 2;
  ModelConfig d = synthetic_config(dense, false);
  d.quant = QuantConfig::parse(
      nlohmann::json::parse(quantization_config_json(d, "fp8-block", "linear").dump()), "t");
  const std::string fp8 = quantization_summary(d);
  EXPECT_EQ(fp8.rfind("fp8 e4m3 blocks 128x128", 0), 0u) << fp8;
  EXPECT_NE(fp8.find("fp8-e4m3: mlp.down_proj"), std::string::npos) << fp8;
  EXPECT_EQ(fp8.find("lm_head"), std::string::npos) << fp8;
}

}  // namespace
