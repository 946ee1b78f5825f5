// The DeepSeek-V3 family and the mixture-of-experts targets on the CUDA backend, against the
// CPU backend on the same checkpoint (label "gpu"): the load refusals (MoE and MTP heads on
// CUDA; MLA targets until verified on a GPU), and DeepseekModel<CudaBackend> (built without a
// GPU, constructed through load_cuda_mla_model_unverified): logits and experts vs the CPU,
// verify window and tree + keep bitwise a sequential decode, the latent cache's rows and bytes.
// Shared fixtures: cuda_transformer_fixtures.h. Skips visibly without a CUDA build or a device.
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaDeepseek, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): the CUDA backend is not compiled";
}

#else

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "cuda_transformer_fixtures.h"
#include "model/head_config.h"
#include "model/model_factory.h"
#include "model/synthetic.h"
#include "single_rank_comm.h"
#include "small_deepseek.h"

namespace fs = std::filesystem;
using namespace specrun;
using namespace specrun::test;

// Mixture-of-experts targets run on the CPU backend only for now (their router decides on the
// host, which a step graph cannot): loading one on CUDA is refused naming the model and the way
// out, before any device memory is taken.
TEST(CudaDeepseek, MixtureOfExpertsTargetsAreRefusedNamingTheBackend) {
  REQUIRE_DEVICE();
  GpuRank rank;
  const fs::path dir = fs::temp_directory_path() / ("specrun_cuda_moe_" + std::to_string(getpid()));
  SyntheticSpec spec;
  spec.architecture = "qwen3_moe";
  spec.hidden = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.layers = 1;
  spec.intermediate = 64;
  spec.vocab = 64;
  make_model_pair(spec, dir.string());
  const Checkpoint ckpt((dir / "target").string());
  try {
    rank.load(ckpt);
    ADD_FAILURE() << "a Qwen3-MoE target loaded on CUDA";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(e.message().find("Qwen3MoeForCausalLM has mixture-of-experts layers"),
              std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("parallel.backend = \"cpu\""), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}

// The MTP draft head (draft.kind = "mtp") is MLA, which the CUDA backend does not run yet: its
// load is refused naming draft.kind and the way out (model/head_graphs.h).
TEST(CudaDeepseek, MtpHeadsAreRefusedNamingTheBackend) {
  REQUIRE_DEVICE();
  GpuRank rank;
  const fs::path dir = fs::temp_directory_path() / ("specrun_cuda_mtp_" + std::to_string(getpid()));
  SyntheticSpec spec;
  spec.architecture = "deepseek_v3";
  spec.hidden = 64;
  spec.heads = 4;
  spec.kv_heads = 4;
  spec.layers = 1;
  spec.intermediate = 64;
  spec.vocab = 64;
  spec.kv_lora_rank = 32;
  spec.qk_nope_head_dim = 16;
  spec.qk_rope_head_dim = 8;
  spec.v_head_dim = 16;
  spec.mtp_layers = 1;
  spec.dtype = DType::kF32;
  make_model_pair(spec, dir.string());
  const std::string target_dir = (dir / "target").string();
  const Checkpoint target(target_dir);
  const HeadConfig cfg = HeadConfig::from_dir(target_dir, target.config());
  const Checkpoint head(target_dir, [&](const std::string&) { return cfg.layers(); });
  try {
    load_cuda_head(head, target, cfg, rank.context);
    ADD_FAILURE() << "an MTP head loaded on CUDA";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(e.message().find("draft.kind = \"mtp\""), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("parallel.backend = \"cpu\""), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}

// ---- The DeepSeek-V3 family on CUDA (DeepseekModel<CudaBackend>: MLA's latent cache and
// cuda::latent_attention, the MoE layers through MoeBlock's default compositions with the
// noaux_tc router on the host). Built without a GPU; load_cuda_model refuses it, these tests
// construct it through load_cuda_mla_model_unverified and check it against the CPU backend and
// the cache invariants speculative decoding relies on (docs/gpu.md: what the first GPU run checks).

namespace {

// A synthetic DeepSeek-V3-family target (a dense first layer, then MoE with n_group > 1 and
// nonzero router biases, YaRN), written once per shape under the temp directory. kv_lora 512 and
// rope 64: DeepSeek-V3's latent row of 576 floats.
std::string deepseek_target(const std::string& arch, int kv_lora = 32, int rope = 8) {
  const std::string dir =
      (fs::temp_directory_path() / ("specrun_cuda_mla_" + std::to_string(getpid()) + "_" + arch +
                                    "_" + std::to_string(kv_lora) + "_" + std::to_string(rope)))
          .string();
  if (!fs::exists(dir + "/target/config.json")) {
    SyntheticSpec spec = test::small_deepseek_spec(arch, 1, 32, kv_lora, rope);
    spec.seed = 5;
    make_model_pair(spec, dir);
  }
  return dir + "/target";
}

std::unique_ptr<LanguageModel> load_mla(GpuRank& rank, const Checkpoint& ckpt) {
  return load_cuda_mla_model_unverified(ckpt, rank.context, rank.context.tp());
}

}  // namespace

TEST(CudaDeepseek, MlaTargetsAreRefusedAsNotYetVerifiedOnAGpu) {
  REQUIRE_DEVICE();
  GpuRank rank;
  const Checkpoint ckpt(deepseek_target("deepseek_v3"));
  try {
    rank.load(ckpt);
    ADD_FAILURE() << "a DeepSeek-V3 target loaded on CUDA";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    for (const char* part : {"multi-head latent attention (MLA)", "not yet verified on a GPU",
                             "docs/gpu.md", "parallel.backend = \"cpu\""})
      EXPECT_NE(e.message().find(part), std::string::npos) << part << ": " << e.message();
  }
}

// Logits of every position and the routed experts against the CPU backend (F32 weights): a
// 40-token prompt (the batch-invariant GEMV path) and 100 tokens (cuBLAS prefill), for
// deepseek_v3 and kimi_k25 and DeepSeek-V3's latent width (576 floats: key_dim 576, value_dim
// 512 in cuda::latent_attention).
TEST(CudaDeepseek, DeepseekLogitsAndExpertsMatchCpu) {
  REQUIRE_DEVICE();
  GpuRank rank;
  SingleRankComm cpu_comm;
  const std::vector<std::string> targets = {deepseek_target("deepseek_v3"),
                                            deepseek_target("kimi_k25"),
                                            deepseek_target("deepseek_v3", 512, 64)};
  for (const std::string& dir : targets) {
    const Checkpoint ckpt(dir);
    auto cpu_model = load_cpu_model(ckpt, cpu_comm, 2);
    auto gpu_model = load_mla(rank, ckpt);
    const int V = ckpt.config().vocab_size;
    for (int len : {40, 100}) {
      const auto tokens = prompt(len, V, len);
      auto cc = cpu_model->new_cache(128);
      auto gc = gpu_model->new_cache(128);
      const auto expected = run(*cpu_model, *cc, tokens, true);
      const auto actual = run(*gpu_model, *gc, tokens, true);
      double max_abs = 0, scale = 0;
      int flips = 0;
      compare_logits(expected, actual, V, &max_abs, &flips);
      for (float v : expected) scale = std::max(scale, std::fabs(static_cast<double>(v)));
      EXPECT_LT(max_abs, 2e-3 * (1 + scale)) << dir << ", " << len << " tokens";
      EXPECT_EQ(flips, 0) << dir << ", " << len << " tokens";
      EXPECT_EQ(gc->length(), len);
      const ExpertRouting* cr = cpu_model->routing();
      const ExpertRouting* gr = gpu_model->routing();
      ASSERT_TRUE(cr != nullptr && gr != nullptr) << dir;
      EXPECT_EQ(gr->n_tokens, len);
      EXPECT_EQ(cr->experts, gr->experts) << dir << ": the router chose other experts";
    }
  }
}

// A verify window of 5 tokens per sequence (3 sequences) gives bitwise the logits of decoding
// them one by one, and truncate-and-redo equals no rollback: greedy speculative == baseline.
TEST(CudaDeepseek, DeepseekVerifyWindowEqualsStepByStepDecodeBitwise) {
  REQUIRE_DEVICE();
  GpuRank rank;
  const Checkpoint ckpt(deepseek_target("kimi_k25"));
  auto owned = load_mla(rank, ckpt);
  expect_window_equals_steps(*owned, 30, 5, 64);
}

// A token tree over the latent cache (KvSlot paths in cuda::latent_attention) gives each node
// bitwise the logits of a sequential decode of its path; keep (cuda::kv_keep_split) moves the
// latent rows of the accepted path so that the next token and the cache rows are bitwise those
// of the sequential decode.
TEST(CudaDeepseek, DeepseekTreeAndKeepAreBitwiseASequentialDecode) {
  REQUIRE_DEVICE();
  GpuRank rank;
  const Checkpoint ckpt(deepseek_target("deepseek_v3", 512, 64));
  auto owned = load_mla(rank, ckpt);
  LanguageModel& lm = *owned;
  const int V = lm.config().vocab_size;
  const int row = 512 + 64;
  const auto prompt_tokens = prompt(20, V, 2);
  const int P = static_cast<int>(prompt_tokens.size());
  auto decode = [&](const std::vector<std::int32_t>& seq, std::vector<float>* rows) {
    auto c = lm.new_cache(static_cast<int>(seq.size()));
    std::vector<float> all;
    for (std::size_t j = 0; j < seq.size(); ++j) {
      const auto step = run(lm, *c, {seq[j]}, false);
      all.insert(all.end(), step.begin(), step.end());
    }
    if (rows != nullptr) {
      rows->resize(seq.size() * row);
      lm.read_kv(*c, 1, 0, rows->data());
    }
    return all;
  };
  const std::vector<float> want = decode(prompt_tokens, nullptr);
  auto c1 = lm.new_cache(P + 8);
  const auto got = run(lm, *c1, {prompt_tokens.begin(), prompt_tokens.end() - 1}, true);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), (P - 1) * V * sizeof(float)), 0);
  const std::vector<std::int32_t> node_tokens = {40, 41, 42, 43, 44};
  const std::vector<int> node_parent = {-1, -1, 0, 1, 2};
  std::vector<std::int32_t> toks = {prompt_tokens.back()}, parents = {kChainParent};
  for (std::size_t i = 0; i < node_tokens.size(); ++i) {
    toks.push_back(node_tokens[i]);
    parents.push_back(node_parent[i] < 0 ? P - 1 : P + node_parent[i]);
  }
  const SeqChunk tree{c1.get(), toks.data(), static_cast<int>(toks.size()), parents.data()};
  std::vector<float> got_tree;
  lm.forward({&tree, 1}, true, got_tree);
  EXPECT_EQ(std::memcmp(got_tree.data(), &want[(P - 1) * V], V * sizeof(float)), 0);
  for (std::size_t i = 1; i < toks.size(); ++i) {
    std::vector<std::int32_t> seq = prompt_tokens;
    std::vector<std::int32_t> path;
    for (int at = static_cast<int>(i) - 1; at >= 0; at = node_parent[at])
      path.insert(path.begin(), node_tokens[at]);
    seq.insert(seq.end(), path.begin(), path.end());
    const auto ref = decode(seq, nullptr);
    EXPECT_EQ(std::memcmp(&got_tree[i * V], &ref[(seq.size() - 1) * V], V * sizeof(float)), 0)
        << "node " << i - 1;
  }
  // Keep root -> node 0 -> node 2 -> node 4, then one more token.
  const std::vector<int> keep_rows = {0, 1, 3, 5};
  lm.keep(*c1, P - 1, keep_rows);
  const std::int32_t next = 77;
  const auto got_after = run(lm, *c1, {next}, false);
  std::vector<std::int32_t> seq = prompt_tokens;
  for (int i : {40, 42, 44}) seq.push_back(i);
  seq.push_back(next);
  std::vector<float> ref_rows;
  const auto ref = decode(seq, &ref_rows);
  EXPECT_EQ(std::memcmp(got_after.data(), &ref[(seq.size() - 1) * V], V * sizeof(float)), 0);
  ASSERT_EQ(c1->length(), static_cast<int>(seq.size()));
  std::vector<float> rows(seq.size() * row);
  lm.read_kv(*c1, 1, 0, rows.data());
  EXPECT_EQ(std::memcmp(rows.data(), ref_rows.data(), rows.size() * sizeof(float)), 0)
      << "the kept latent rows differ from the sequential decode's";
}

// The cache holds kv_lora_rank + qk_rope_head_dim floats per token and layer, reported and
// allocated (the split layout: no value plane), and its rows are the CPU backend's.
TEST(CudaDeepseek, DeepseekCacheHoldsOneLatentRowPerTokenAndLayer) {
  REQUIRE_DEVICE();
  GpuRank rank;
  SingleRankComm cpu_comm;
  const Checkpoint ckpt(deepseek_target("deepseek_v3", 512, 64));
  auto gpu_model = load_mla(rank, ckpt);
  auto cpu_model = load_cpu_model(ckpt, cpu_comm, 2);
  EXPECT_EQ(gpu_model->kv_bytes_per_token(), 2u * (512 + 64) * sizeof(float));
  CudaBackend backend(rank.context);
  EXPECT_EQ(backend.new_kv_block(KvShape{2, 576, 0}, 100).data.bytes(),
            std::size_t{2} * 100 * 576 * sizeof(float));
  EXPECT_EQ(backend.new_kv_block(KvShape{2, 64, 64}, 100).data.bytes(),
            std::size_t{2} * 100 * 2 * 64 * sizeof(float));
  const int V = ckpt.config().vocab_size;
  const auto tokens = prompt(9, V, 7);
  auto gc = gpu_model->new_cache(16);
  auto cc = cpu_model->new_cache(16);
  run(*gpu_model, *gc, tokens, false);
  run(*cpu_model, *cc, tokens, false);
  std::vector<float> g(9 * 576), c(9 * 576);
  gpu_model->read_kv(*gc, 1, 0, g.data());
  cpu_model->read_kv(*cc, 1, 0, c.data());
  double max_abs = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(g[i]) - c[i]));
  EXPECT_LT(max_abs, 1e-3) << "latent rows of layer 1 differ from the CPU's";
}

#endif  // SPECRUN_HAVE_CUDA
