// The MTP draft head's config and checkpoint side (docs/mtp-design.md):
//  - make-model --mtp-layers writes the module as layer num_hidden_layers (enorm, hnorm,
//    eh_proj [H, 2H], a full MLA decoder layer, shared_head.norm) and num_nextn_predict_layers,
//    and leaves the target's tensors unchanged (the target still loads and ignores the module);
//  - MtpConfig: the module's layer, its kind by the decoder's rule, the capture of the target's
//    final norm output, and refusals naming the key.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/head_config.h"
#include "model/model_config.h"
#include "model/mtp_config.h"
#include "model/synthetic.h"
#include "model/weight_schema.h"
#include "temp_dir.h"

namespace specrun {
namespace {

SyntheticSpec small_deepseek(const std::string& arch, int mtp_layers) {
  SyntheticSpec s;
  s.architecture = arch;
  s.hidden = 64;
  s.heads = 4;
  s.kv_heads = 4;
  s.layers = 2;
  s.intermediate = 96;
  s.vocab = 256;
  s.q_lora_rank = 32;
  s.kv_lora_rank = 32;
  s.qk_nope_head_dim = 16;
  s.qk_rope_head_dim = 8;
  s.v_head_dim = 24;
  s.experts = 8;
  s.moe_intermediate = 32;
  s.first_k_dense_replace = 1;
  s.mtp_layers = mtp_layers;
  s.dtype = DType::kF32;
  return s;
}

bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.shape == b.shape && a.nbytes == b.nbytes && std::memcmp(a.data, b.data, a.nbytes) == 0;
}

TEST(MtpCheckpoint, MakeModelWritesTheModuleAsLayerNumHiddenLayers) {
  for (const char* arch : {"deepseek_v3", "kimi_k25"}) {
    test::TempDir with, without;
    make_model_pair(small_deepseek(arch, 1), with.path());
    make_model_pair(small_deepseek(arch, 0), without.path());
    const Checkpoint mtp(with.file("target")), plain(without.file("target"));
    const ModelConfig& c = mtp.config();
    EXPECT_EQ(c.num_nextn_predict_layers, 1) << arch;
    EXPECT_EQ(c.num_layers, 2) << arch;
    const std::string p = c.tensor_prefix + "model.layers.2.";
    const std::int64_t H = 64;
    EXPECT_EQ(mtp.tensor(p + "enorm.weight").shape, (std::vector<std::int64_t>{H})) << arch;
    EXPECT_EQ(mtp.tensor(p + "hnorm.weight").shape, (std::vector<std::int64_t>{H})) << arch;
    EXPECT_EQ(mtp.tensor(p + "eh_proj.weight").shape, (std::vector<std::int64_t>{H, 2 * H}));
    EXPECT_EQ(mtp.tensor(p + "shared_head.norm.weight").shape, (std::vector<std::int64_t>{H}));
    // A full decoder layer; MoE (layer 2 >= first_k_dense_replace), its router bias float32.
    EXPECT_TRUE(mtp.has(p + "self_attn.kv_b_proj.weight")) << arch;
    EXPECT_TRUE(mtp.has(p + "mlp.gate.e_score_correction_bias")) << arch;
    EXPECT_TRUE(mtp.has(p + "mlp.experts.7.down_proj.weight")) << arch;
    EXPECT_TRUE(mtp.has(p + "mlp.shared_experts.up_proj.weight")) << arch;
    EXPECT_TRUE(mtp.has(p + "input_layernorm.weight")) << arch;
    // Shared with the target: not written.
    EXPECT_FALSE(mtp.has(p + "embed_tokens.weight")) << arch;
    EXPECT_FALSE(mtp.has(p + "shared_head.head.weight")) << arch;
    EXPECT_FALSE(plain.has(p + "enorm.weight")) << arch;
    // The target's tensors are the same values, and its shard loads (the module ignored).
    for (const std::string& name : plain.names())
      EXPECT_TRUE(same_bytes(mtp.tensor(name), plain.tensor(name))) << arch << " " << name;
    const HostWeights w = load_host_weights(mtp, 1, 0, deepseek_schema());
    EXPECT_EQ(w.layers.size(), 2u) << arch;
  }
}

TEST(MtpCheckpoint, MakeModelRefusesMtpLayersOutsideTheDeepseekFamily) {
  SyntheticSpec s = small_deepseek("deepseek_v3", 1);
  s.architecture = "llama";
  try {
    validate(s);
    FAIL() << "accepted --mtp-layers for llama";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--mtp-layers"), std::string::npos) << e.what();
  }
}

TEST(MtpConfig, TheModuleIsLayerNumHiddenLayersReadingTheFinalNormOutput) {
  test::TempDir dir;
  make_model_pair(small_deepseek("deepseek_v3", 2), dir.path());
  const Checkpoint target(dir.file("target"));
  const MtpConfig c = MtpConfig::from_config(target.config(), target.config(), "t", false, 1);
  EXPECT_EQ(c.layer, 3);
  EXPECT_EQ(c.modules, 2);
  EXPECT_EQ(c.capture, std::vector<int>{2});  // capture id num_layers: after model.norm
  EXPECT_EQ(c.kind, (LayerKind{AttentionKind::kMla, MlpKind::kMoe}));
  const HeadConfig head(c);
  EXPECT_EQ(head.kind(), HeadKind::kMtp);
  EXPECT_EQ(head.target_capture().size(), 1u);
  EXPECT_EQ(head.layers().hidden_size, 64);
}

// The head's config is the module's one layer, of its kind (layer 0 of it = checkpoint layer
// c.layer), and load_host_weights(..., first_layer) reads that layer's tensors.
TEST(MtpConfig, TheHeadIsTheModulesOneLayerReadFromItsCheckpointLayer) {
  for (int first_dense : {1, 5}) {  // the module MoE, then dense
    test::TempDir dir;
    SyntheticSpec spec = small_deepseek("deepseek_v3", 1);
    spec.first_k_dense_replace = first_dense;
    make_model_pair(spec, dir.path());
    const Checkpoint target(dir.file("target"));
    const MtpConfig c = MtpConfig::from_config(target.config(), target.config(), "t", false);
    EXPECT_EQ(c.kind.mlp, first_dense == 1 ? MlpKind::kMoe : MlpKind::kDenseSwiGlu);
    EXPECT_EQ(c.head.num_layers, 1);
    EXPECT_EQ(c.head.layer_kind(0), c.kind);
    const Checkpoint head(dir.file("target"), [&](const std::string&) { return c.head; });
    std::vector<TensorSpec> layer_rows;
    for (const TensorSpec& s : deepseek_schema())
      if (s.per_layer()) layer_rows.push_back(s);
    const HostWeights w = load_host_weights(head, 1, 0, layer_rows, 0, c.layer);
    ASSERT_EQ(w.layers.size(), 1u);
    const TensorView& kv_a = target.tensor("model.layers.2.self_attn.kv_a_proj_with_mqa.weight");
    EXPECT_EQ(std::memcmp(w.layers[0][static_cast<int>(Role::kKvA)].data, kv_a.data, kv_a.nbytes),
              0);
    EXPECT_EQ(w.experts[0][static_cast<int>(Role::kExpertGate)].size(), first_dense == 1 ? 8u : 0u);
  }
}

TEST(MtpConfig, RefusalsNameTheKey) {
  test::TempDir dir;
  make_model_pair(small_deepseek("deepseek_v3", 0), dir.path());
  const Checkpoint target(dir.file("target"));
  auto message = [&](const ModelConfig& ckpt, bool separate) {
    try {
      MtpConfig::from_config(ckpt, target.config(), "dir/config.json", separate);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(target.config(), false).find("num_nextn_predict_layers is 0"),
            std::string::npos);
  ModelConfig nextn = target.config();
  nextn.num_nextn_predict_layers = 1;
  EXPECT_NE(message(nextn, true).find("num_hidden_layers is 2"), std::string::npos);
  ModelConfig narrow = nextn;
  narrow.hidden_size = 32;
  EXPECT_NE(message(narrow, false).find("hidden_size 32"), std::string::npos);
  ModelConfig llama = nextn;
  llama.mla = MlaConfig{};
  llama.architecture = "LlamaForCausalLM";
  EXPECT_NE(message(llama, false).find("LlamaForCausalLM"), std::string::npos);
  nextn.num_layers = 1;
  const MtpConfig sep = MtpConfig::from_config(nextn, target.config(), "n", true);
  EXPECT_EQ(sep.layer, 0);
  EXPECT_EQ(sep.kind.mlp, MlpKind::kMoe);
}

TEST(MtpConfig, HeadConfigFromDirRecognisesTheTargetsOwnCheckpoint) {
  for (const char* arch : {"deepseek_v3", "kimi_k25"}) {
    test::TempDir dir;
    make_model_pair(small_deepseek(arch, 1), dir.path());
    const Checkpoint target(dir.file("target"));
    const HeadConfig head = HeadConfig::from_dir(dir.file("target"), target.config());
    ASSERT_EQ(head.kind(), HeadKind::kMtp) << arch;
    EXPECT_EQ(std::get<MtpConfig>(head.of).layer, 2) << arch;
    EXPECT_EQ(head.target_capture()[0], 2) << arch;
  }
}

}  // namespace
}  // namespace specrun
