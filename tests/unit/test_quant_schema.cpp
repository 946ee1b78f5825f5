// The weight loader's quantized path (issue 44 step 3; docs/quantization-design.md 3.3): a small
// Llama checkpoint whose layer-0 Linears are rewritten in compressed-tensors pack-quantized and
// FP8 block-scaled layouts by this test (from integer codes and scales it draws itself, so the
// expected value of every weight, (q - z) * s or e4m3(b) * s, is known independently of the
// loader), loaded kept packed; every rank's shard for tp 1, 2 and 4 equals its slice of the
// whole, a shard that would split a scale group is refused, and every disagreement between the
// file and quantization_config is refused naming the tensor and the config field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/model_weights.h"
#include "model/quant_weights.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "model/weight_schema.h"
#include "quant_fixture.h"
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

struct Slice {
  Role role;
  const char* module;
  bool rows;  // the shard is a range of rows (else of columns)
};
const Slice kSlices[] = {
    {Role::kQ, "self_attn.q_proj", true},  {Role::kK, "self_attn.k_proj", true},
    {Role::kV, "self_attn.v_proj", true},  {Role::kO, "self_attn.o_proj", false},
    {Role::kGate, "mlp.gate_proj", true},  {Role::kUp, "mlp.up_proj", true},
    {Role::kDown, "mlp.down_proj", false},
};

// Every rank's shard of every layer-0 Linear, for tp 1, 2 and 4, equals its slice of the whole
// (every element, exactly); the float tensors stay float.
void expect_slices(const Checkpoint& ckpt, const test::QuantFixture& fx, QuantKind kind) {
  for (int tp : {1, 2, 4})
    for (int rank = 0; rank < tp; ++rank) {
      const HostWeights w = load_host_weights(ckpt, tp, rank);
      EXPECT_FALSE(w.model[static_cast<int>(Role::kLmHead)].quantized());
      EXPECT_FALSE(w.model[static_cast<int>(Role::kEmbed)].quantized());
      for (const Slice& s : kSlices) {
        const HostTensor& h = w.layers[0][static_cast<int>(s.role)];
        const std::vector<double>& whole =
            fx.expected.at("model.layers.0." + std::string(s.module));
        ASSERT_EQ(h.quant.kind, kind) << s.module;
        const int full_rows = s.rows ? h.rows * tp : h.rows,
                  full_cols = s.rows ? h.cols : h.cols * tp;
        ASSERT_EQ(whole.size(), static_cast<std::size_t>(full_rows) * full_cols) << s.module;
        const int r0 = s.rows ? rank * h.rows : 0, c0 = s.rows ? 0 : rank * h.cols;
        int wrong = 0;
        for (int r = 0; r < h.rows; ++r)
          for (int c = 0; c < h.cols; ++c) {
            const double want = whole[static_cast<std::size_t>(r0 + r) * full_cols + c0 + c];
            const float got = dequantized(h, r, c);
            if (static_cast<double>(got) != want && wrong++ < 3)
              ADD_FAILURE() << s.module << " tp " << tp << " rank " << rank << " (" << r << ", "
                            << c << "): " << got << " != " << want;
          }
        EXPECT_EQ(wrong, 0) << s.module << " tp " << tp << " rank " << rank;
      }
    }
}

}  // namespace

TEST(QuantSchema, ModuleNamesDropTheTensorPrefix) {
  ModelConfig c;
  c.tensor_prefix = "language_model.";
  EXPECT_EQ(quant_module_name(c, "language_model.lm_head.weight"), "lm_head");
  EXPECT_EQ(quant_module_name(c, "language_model.model.layers.3.mlp.experts.1.up_proj.weight"),
            "model.layers.3.mlp.experts.1.up_proj");
  EXPECT_EQ(quant_module_name(c, "language_model.model.layers.3.self_attn.q_proj.bias"), "");
}

TEST(QuantSchema, Int4GroupShardsAreSlicesOfTheWhole) {
  test::QuantFixture fx;
  std::uint64_t seed = 1;
  for (const std::string& m : test::QuantFixture::linears()) fx.pack_int(m, 4, 32, true, seed++);
  const Checkpoint ckpt = fx.write(test::compressed_config(4, 32, true));
  expect_slices(ckpt, fx, QuantKind::kInt4);
  // Kept packed: half a byte per weight plus one BF16 scale per 32.
  const HostWeights w = load_host_weights(ckpt, 1, 0);
  const HostTensor& q = w.layers[0][static_cast<int>(Role::kQ)];
  EXPECT_EQ(q.bytes(), 128u * 128 / 2 + 128u * 4 * 2);
  EXPECT_EQ(q.quant.scale_dtype, DType::kBF16);
}

TEST(QuantSchema, AsymmetricAndChannelShardsAreSlicesOfTheWhole) {
  {
    test::QuantFixture fx;
    std::uint64_t seed = 11;
    for (const std::string& m : test::QuantFixture::linears()) fx.pack_int(m, 4, 32, false, seed++);
    const Checkpoint ckpt = fx.write(test::compressed_config(4, 32, false));
    expect_slices(ckpt, fx, QuantKind::kInt4);
    const HostWeights w = load_host_weights(ckpt, 1, 0);
    EXPECT_EQ(w.layers[0][static_cast<int>(Role::kDown)].bytes(),
              128u * 256 / 2 + 128u * 8 * 2 + 128u * 8);  // + one int8 zero point per group
  }
  {
    test::QuantFixture fx;
    std::uint64_t seed = 21;
    for (const std::string& m : test::QuantFixture::linears()) fx.pack_int(m, 8, 0, true, seed++);
    expect_slices(fx.write(test::compressed_config(8, 0, true)), fx, QuantKind::kInt8);
  }
}

TEST(QuantSchema, Fp8BlockShardsAreSlicesOfTheWhole) {
  test::QuantFixture fx;
  std::uint64_t seed = 31;
  for (const std::string& m : test::QuantFixture::linears()) fx.pack_fp8(m, 32, 32, seed++);
  const Checkpoint ckpt = fx.write(test::fp8_config(32, 32));
  expect_slices(ckpt, fx, QuantKind::kFp8E4M3);
}

TEST(QuantSchema, AShardThatSplitsAScaleGroupIsRefused) {
  test::QuantFixture fx;
  std::uint64_t seed = 41;
  for (const std::string& m : test::QuantFixture::linears()) fx.pack_int(m, 4, 64, true, seed++);
  const Checkpoint ckpt = fx.write(test::compressed_config(4, 64, true));
  EXPECT_NO_THROW(load_host_weights(ckpt, 2, 1));  // o_proj's columns 64..127: group-aligned
  // tp 4: rank 1's o_proj columns start at 32, inside a group of 64.
  const std::string e = error_of([&] { load_host_weights(ckpt, 4, 1); });
  EXPECT_NE(e.find("model.layers.0.self_attn.o_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("quantization_config.config_groups.group_0.weights.group_size 64"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("tp = 4"), std::string::npos) << e;

  test::QuantFixture f8;
  for (const std::string& m : test::QuantFixture::linears()) f8.pack_fp8(m, 64, 32, seed++);
  const Checkpoint blocks = f8.write(test::fp8_config(64, 32));
  EXPECT_NO_THROW(load_host_weights(blocks, 2, 1));
  // tp 4: rank 1's q_proj rows start at 32, inside a block of 64 rows.
  const std::string e8 = error_of([&] { load_host_weights(blocks, 4, 1); });
  EXPECT_NE(e8.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << e8;
  EXPECT_NE(e8.find("quantization_config.weight_block_size [64, 32]"), std::string::npos) << e8;
}

// Each disagreement between the file and quantization_config: the message names the tensor and
// the config field.
TEST(QuantSchema, DisagreementsAreRefusedNamingTheTensorAndTheField) {
  const std::string L = "model.layers.0.";
  const std::string targets = "quantization_config.config_groups.group_0.targets[0] \"Linear\"";
  struct Case {
    const char* what;
    std::function<json(test::QuantFixture&)>
        build;  // rewrites the file, returns quantization_config
    std::string tensor, field;
  };
  auto all_int4 = [](test::QuantFixture& fx, const std::string& except = "") {
    std::uint64_t seed = 51;
    for (const std::string& m : test::QuantFixture::linears())
      if (m != except) fx.pack_int(m, 4, 32, true, seed++);
  };
  const std::vector<Case> cases = {
      {"a float weight the config quantizes",
       [&](test::QuantFixture& fx) {
         all_int4(fx, L + "mlp.down_proj");
         return test::compressed_config(4, 32, true);
       },
       L + "mlp.down_proj.weight", targets},
      {"packed tensors the config leaves float",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         return test::compressed_config(4, 32, true, {"lm_head", "re:.*down_proj"});
       },
       L + "mlp.down_proj.weight_packed", "quantization_config.ignore[1] \"re:.*down_proj\""},
      {"a missing scale",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         fx.take(L + "self_attn.k_proj.weight_scale");
         return test::compressed_config(4, 32, true);
       },
       L + "self_attn.k_proj.weight_scale", "quantization_config.config_groups.group_0.weights"},
      {"scales of another group size",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         return test::compressed_config(4, 64, true);
       },
       L + "self_attn.q_proj.weight_scale", "group_size 64"},
      {"packed words of another bit width",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         return test::compressed_config(8, 32, true);
       },
       L + "self_attn.q_proj.weight_packed", "num_bits 8"},
      {"a zero point where the config is symmetric",
       [&](test::QuantFixture& fx) {
         std::uint64_t seed = 61;
         for (const std::string& m : test::QuantFixture::linears())
           fx.pack_int(m, 4, 32, false, seed++);
         return test::compressed_config(4, 32, true);
       },
       L + "self_attn.q_proj.weight_zero_point", "weights.symmetric"},
      {"a missing zero point where the config is asymmetric",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         return test::compressed_config(4, 32, false);
       },
       L + "self_attn.q_proj.weight_zero_point", "weights.symmetric false"},
      {"a weight_shape that is not config.json's",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         fx.put(test::other_tensor(L + "self_attn.v_proj.weight_shape", "I32", 4, {2},
                                   test::bytes_of(std::vector<std::int32_t>{128, 96})));
         return test::compressed_config(4, 32, true);
       },
       L + "self_attn.v_proj.weight_shape", "config.json"},
      {"a column permutation (actorder)",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         fx.put(test::other_tensor(L + "mlp.up_proj.weight_g_idx", "I32", 4, {256},
                                   test::bytes_of(std::vector<std::int32_t>(256, 0))));
         return test::compressed_config(4, 32, true);
       },
       L + "mlp.up_proj.weight_g_idx", "actorder"},
      {"a quantized embedding",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         json q = test::compressed_config(4, 32, true);
         q["config_groups"]["group_0"]["targets"].push_back("re:.*embed_tokens");
         return q;
       },
       "model.embed_tokens.weight", "targets[1] \"re:.*embed_tokens\""},
      {"packed tensors without a quantization_config",
       [&](test::QuantFixture& fx) {
         all_int4(fx);
         return json();
       },
       L + "self_attn.q_proj.weight_packed", "quantization_config (absent from config.json)"},
      {"a BF16 weight where fp8 is expected",
       [&](test::QuantFixture& fx) {
         std::uint64_t seed = 71;
         for (const std::string& m : test::QuantFixture::linears())
           if (m != L + "mlp.up_proj") fx.pack_fp8(m, 32, 32, seed++);
         return test::fp8_config(32, 32);
       },
       L + "mlp.up_proj.weight", "modules_to_not_convert"},
      {"an fp8 weight the config leaves float",
       [&](test::QuantFixture& fx) {
         std::uint64_t seed = 81;
         for (const std::string& m : test::QuantFixture::linears()) fx.pack_fp8(m, 32, 32, seed++);
         return test::fp8_config(32, 32, {"o_proj"});
       },
       L + "self_attn.o_proj.weight", "modules_to_not_convert / ignored_layers \"o_proj\""},
      {"an fp8 scale of another block size",
       [&](test::QuantFixture& fx) {
         std::uint64_t seed = 91;
         for (const std::string& m : test::QuantFixture::linears()) fx.pack_fp8(m, 32, 32, seed++);
         return test::fp8_config(64, 32);
       },
       L + "self_attn.q_proj.weight_scale_inv", "weight_block_size [64, 32]"},
      {"an fp8 NaN code",
       [&](test::QuantFixture& fx) {
         std::uint64_t seed = 101;
         for (const std::string& m : test::QuantFixture::linears()) fx.pack_fp8(m, 32, 32, seed++);
         TensorToWrite k = fx.take(L + "self_attn.k_proj.weight");
         k.bytes[5 * 128 + 7] = std::byte{0xFF};
         fx.put(k);
         return test::fp8_config(32, 32);
       },
       L + "self_attn.k_proj.weight", "(row 5, col 7)"},
  };
  for (const Case& c : cases) {
    test::QuantFixture fx;
    const json q = c.build(fx);
    const std::string e = error_of([&] {
      const Checkpoint ckpt = fx.write(q);
      load_host_weights(ckpt, 1, 0);
    });
    EXPECT_NE(e.find("'" + c.tensor + "'"), std::string::npos) << c.what << ": " << e;
    EXPECT_NE(e.find(c.field), std::string::npos) << c.what << ": " << e;
  }
}

// Kimi-K2.5's names carry "language_model." but its quantization_config names the text model's
// modules: its ignore entry "lm_head" is the checkpoint's language_model.lm_head. With the float
// synthetic file, the first module the config quantizes is layer 1's first routed expert.
TEST(QuantSchema, KimiK25DecidesOnTheTextModelsNames) {
  test::TempDir dir;
  make_model_pair(test::small_deepseek_spec("kimi_k25", /*first_k_dense=*/1, /*q_lora=*/32),
                  dir.path());
  const std::string target = dir.path() + "/target";
  std::ifstream in(target + "/config.json");
  json cfg = json::parse(in);
  in.close();
  cfg["quantization_config"] =
      test::compressed_config(4, 32, true,
                              {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"});
  std::ofstream(target + "/config.json") << cfg.dump(2);
  const Checkpoint ckpt(target);
  const std::string e = error_of([&] { load_host_weights(ckpt, 1, 0, deepseek_schema()); });
  EXPECT_NE(e.find("'language_model.model.layers.1.mlp.experts.0.gate_proj.weight'"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("lm_head"), std::string::npos) << e;
}

// The CPU prepares quantized weights kept packed (pack_quantized: half a byte per int4 weight
// plus its scales), gate/up as one pair; test_quant_matmul checks what it computes.
TEST(QuantSchema, TheCpuBackendPreparesQuantizedWeightsPacked) {
  test::QuantFixture fx;
  std::uint64_t seed = 111;
  for (const std::string& m : test::QuantFixture::linears()) fx.pack_int(m, 4, 32, true, seed++);
  const Checkpoint ckpt = fx.write(test::compressed_config(4, 32, true));
  const HostWeights host = load_host_weights(ckpt, 1, 0);
  CpuBackend b(1);
  const ModelWeights<CpuBackend> w = prepare_weights(b, host, ckpt.config());
  const CpuBackend::Weight& q = w.at(0, Role::kQ);
  EXPECT_EQ(q.quant.kind, QuantKind::kInt4);
  EXPECT_EQ(q.layout, CpuBackend::Weight::Layout::kPacked);
  // 4 blocks of 32 rows: 16 bytes per input, then 4 groups of 32 BF16 scales.
  EXPECT_EQ(b.weight_bytes(host.layers[0][static_cast<int>(Role::kQ)], WeightUse::kLinear),
            4u * (16 * 128 + 4 * 32 * 2));
  EXPECT_EQ(w.at(0, Role::kGate).layout, CpuBackend::Weight::Layout::kPackedPair);
  EXPECT_EQ(w.at(0, Role::kGate).quant.kind, QuantKind::kInt4);
  EXPECT_EQ(w.get(Role::kLmHead).quant.kind, QuantKind::kNone);
}

// A tied head reads the embedding's rows, which are float: a config that quantizes lm_head is
// refused naming tie_word_embeddings and the entry.
TEST(QuantSchema, ATiedQuantizedHeadIsRefused) {
  test::QuantFixture fx;
  std::uint64_t seed = 121;
  for (const std::string& m : test::QuantFixture::linears()) fx.pack_int(m, 4, 32, true, seed++);
  fx.write(test::compressed_config(4, 32, true, json::array()));
  const std::string config = fx.target() + "/config.json";
  std::ifstream in(config);
  json cfg = json::parse(in);
  in.close();
  cfg["tie_word_embeddings"] = true;
  std::ofstream(config) << cfg.dump(2);
  const Checkpoint ckpt(fx.target());
  const std::string e = error_of([&] { load_host_weights(ckpt, 1, 0); });
  EXPECT_NE(e.find("tie_word_embeddings is true"), std::string::npos) << e;
  EXPECT_NE(e.find("quantization_config.config_groups.group_0.targets[0] \"Linear\" makes lm_head "
                   "int4"),
            std::string::npos)
      << e;
}
