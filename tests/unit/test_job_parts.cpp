// Pieces of `specrun run` that need no models (engine/job_parts.h): the warning a greedy
// speculative CUDA job gets when its verify passes exceed what the projections keep
// batch-invariant (64 tokens, 512 with parallel.cuda_tensor_cores).
#include <gtest/gtest.h>

#include <string>

#include "config/job_config.h"
#include "engine/job_parts.h"

using namespace specrun;

namespace {

JobConfig greedy_job(int batch_size, int draft_len, bool tensor_cores) {
  JobConfig c;
  c.decode.modes = {"baseline", "speculative"};
  c.decode.temperature = 0.0;
  c.decode.draft_len = draft_len;
  c.data.batch_size = batch_size;
  c.parallel.backend = "cuda";
  c.parallel.cuda_tensor_cores = tensor_cores;
  return c;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(BatchVarianceWarning, SilentWithinTheLimitOnTheCpuOrWhenSampling) {
  EXPECT_EQ(batch_variance_warning(greedy_job(12, 4, false), BackendKind::kCuda), "");  // 60
  EXPECT_EQ(batch_variance_warning(greedy_job(102, 4, true), BackendKind::kCuda), "");  // 510
  EXPECT_EQ(batch_variance_warning(greedy_job(64, 4, false), BackendKind::kCpu), "");
  JobConfig sampling = greedy_job(64, 4, false);
  sampling.decode.temperature = 0.7;
  EXPECT_EQ(batch_variance_warning(sampling, BackendKind::kCuda), "");
  JobConfig baseline_only = greedy_job(64, 4, false);
  baseline_only.decode.modes = {"baseline"};
  EXPECT_EQ(batch_variance_warning(baseline_only, BackendKind::kCuda), "");
}

TEST(BatchVarianceWarning, NamesTheBatchSizeAndTheTensorCoreSetting) {
  // A batch of 6 trees of 32 nodes: 198 tokens per verify pass (the H200's second run).
  JobConfig trees = greedy_job(6, 4, false);
  trees.decode.tree_top_k = 8;
  trees.decode.tree_nodes = 32;
  const std::string w = batch_variance_warning(trees, BackendKind::kCuda);
  EXPECT_TRUE(contains(w, "data.batch_size 6 x 33 tokens per verify window exceeds the 64")) << w;
  EXPECT_TRUE(contains(w, "data.batch_size <= 1 keeps them identical")) << w;
  EXPECT_TRUE(contains(w, "parallel.cuda_tensor_cores = true with BF16 weights (up to 512")) << w;
  trees.parallel.cuda_tensor_cores = true;
  EXPECT_EQ(batch_variance_warning(trees, BackendKind::kCuda), "");

  const std::string big = batch_variance_warning(greedy_job(103, 4, true), BackendKind::kCuda);
  EXPECT_TRUE(contains(big, "103 x 5 tokens per verify window exceeds the 512")) << big;
  EXPECT_TRUE(contains(big, "(BF16 weights on the tensor cores)")) << big;
  EXPECT_TRUE(contains(big, "data.batch_size <= 102 keeps them identical")) << big;
  EXPECT_FALSE(contains(big, "and so does")) << big;
  // Beyond what the tensor cores take, the setting is not offered.
  EXPECT_FALSE(contains(batch_variance_warning(greedy_job(200, 4, false), BackendKind::kCuda),
                        "and so does"));
}
