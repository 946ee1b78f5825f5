// Pieces of the decoding job that need no models (engine/decode_job.h): the warning a greedy
// speculative CUDA job gets when its verify passes exceed what the projections keep
// batch-invariant (64 tokens, 512 with parallel.cuda_tensor_cores and BF16 weights whose
// projection inputs are multiples of 32).
#include <gtest/gtest.h>

#include <string>

#include "config/job_config.h"
#include "engine/decode_job.h"

using namespace specrun;

namespace {

JobConfig greedy_job(int batch_size, int draft_len, bool tensor_cores) {
  JobConfig c;
  c.decode.modes = {"baseline", "speculative"};
  c.decode.temperature = 0.0;
  c.decode.shape.draft_len = draft_len;
  c.data.batch_size = batch_size;
  c.parallel.backend = "cuda";
  c.parallel.cuda_tensor_cores = tensor_cores;
  return c;
}

// A Llama-shaped target: hidden 2048, 32 heads of 64, intermediate 8192 by default.
ModelConfig target_shape(int hidden = 2048, int intermediate = 8192) {
  ModelConfig m;
  m.hidden_size = hidden;
  m.intermediate_size = intermediate;
  m.num_heads = 32;
  m.head_dim = hidden / 32;
  return m;
}

// The warning for a BF16 target of the default shape.
std::string warning(const JobConfig& job, BackendKind backend) {
  return batch_variance_warning(job, backend, DType::kBF16, target_shape());
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(BatchVarianceWarning, SilentWithinTheLimitOnTheCpuOrWhenSampling) {
  EXPECT_EQ(warning(greedy_job(12, 4, false), BackendKind::kCuda), "");  // 60
  EXPECT_EQ(warning(greedy_job(102, 4, true), BackendKind::kCuda), "");  // 510
  EXPECT_EQ(warning(greedy_job(64, 4, false), BackendKind::kCpu), "");
  JobConfig sampling = greedy_job(64, 4, false);
  sampling.decode.temperature = 0.7;
  EXPECT_EQ(warning(sampling, BackendKind::kCuda), "");
  JobConfig baseline_only = greedy_job(64, 4, false);
  baseline_only.decode.modes = {"baseline"};
  EXPECT_EQ(warning(baseline_only, BackendKind::kCuda), "");
}

TEST(BatchVarianceWarning, NamesTheBatchSizeAndTheTensorCoreSetting) {
  // A batch of 6 trees of 32 nodes: 198 tokens per verify pass (the H200's second run).
  JobConfig trees = greedy_job(6, 4, false);
  trees.decode.shape.tree_top_k = 8;
  trees.decode.shape.tree_nodes = 32;
  const std::string w = warning(trees, BackendKind::kCuda);
  EXPECT_TRUE(contains(w, "data.batch_size 6 x 33 tokens per verify window exceeds the 64")) << w;
  EXPECT_TRUE(contains(w, "data.batch_size <= 1 keeps them identical")) << w;
  EXPECT_TRUE(contains(w, "parallel.cuda_tensor_cores = true (BF16 weights, up to 512")) << w;
  trees.parallel.cuda_tensor_cores = true;
  EXPECT_EQ(warning(trees, BackendKind::kCuda), "");

  const std::string big = warning(greedy_job(103, 4, true), BackendKind::kCuda);
  EXPECT_TRUE(contains(big, "103 x 5 tokens per verify window exceeds the 512")) << big;
  EXPECT_TRUE(contains(big, "(BF16 weights on the tensor cores)")) << big;
  EXPECT_TRUE(contains(big, "data.batch_size <= 102 keeps them identical")) << big;
  EXPECT_FALSE(contains(big, "and so does")) << big;
  // Beyond what the tensor cores take, the setting is not offered.
  EXPECT_FALSE(contains(warning(greedy_job(200, 4, false), BackendKind::kCuda), "and so does"));
}

TEST(BatchVarianceWarning, TensorCoresKeepTheLimitAt64ForWeightsTheyDoNotTake) {
  // Tensor cores on, but F16 weights (or a projection input not a multiple of 32) go to
  // cuBLAS above 64 tokens: 100 tokens per verify pass may differ, and the warning says why.
  const JobConfig job = greedy_job(20, 4, true);
  EXPECT_EQ(warning(job, BackendKind::kCuda), "");  // BF16: within 512
  const std::string f16 =
      batch_variance_warning(job, BackendKind::kCuda, DType::kF16, target_shape());
  EXPECT_TRUE(contains(f16, "data.batch_size 20 x 5 tokens per verify window exceeds the 64"))
      << f16;
  EXPECT_TRUE(contains(f16, "the target's are F16")) << f16;
  EXPECT_TRUE(contains(f16, "data.batch_size <= 12 keeps them identical")) << f16;
  EXPECT_FALSE(contains(f16, "(BF16 weights on the tensor cores)")) << f16;
  EXPECT_FALSE(contains(f16, "and so does")) << f16;
  const std::string odd =
      batch_variance_warning(job, BackendKind::kCuda, DType::kBF16, target_shape(2048, 5460));
  EXPECT_TRUE(contains(odd, "exceeds the 64")) << odd;
  EXPECT_TRUE(contains(odd, "intermediate 5460")) << odd;
  // Tensor cores off with F16 weights: the setting would not help, so it is not offered.
  const std::string off = batch_variance_warning(greedy_job(20, 4, false), BackendKind::kCuda,
                                                 DType::kF16, target_shape());
  EXPECT_TRUE(contains(off, "exceeds the 64")) << off;
  EXPECT_FALSE(contains(off, "cuda_tensor_cores")) << off;
}
