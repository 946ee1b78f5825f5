// Shared fixtures of the CUDA transformer tests (test_cuda_transformer, test_cuda_deepseek):
// MPI for the NCCL bootstrap, one tp = 1 GPU rank, synthetic checkpoints, prompts, passes
// and the logits comparisons the GPU-vs-CPU checks use. CUDA builds only.
#pragma once

#include <gtest/gtest.h>

#ifdef SPECRUN_HAVE_CUDA

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda_backend.h"
#include "backend/cuda_timeline.h"
#include "common/clock.h"
#include "cuda_test_util.h"
#include "dist/mpi_comm.h"
#include "dist/nccl_comm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "model/checkpoint.h"
#include "model/draft_head.h"
#include "model/eagle3_config.h"
#include "model/head_config.h"
#include "model/model_factory.h"
#include "model/synthetic.h"
#include "single_rank_comm.h"
#include "small_deepseek.h"

namespace specrun::test {

namespace fs = std::filesystem;

// MPI for the NCCL bootstrap (a one-rank group here), initialised once for the test program.
class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owned_ = true;
    }
  }
  void TearDown() override {
    if (owned_) MPI_Finalize();
  }

 private:
  bool owned_ = false;
};
inline ::testing::Environment* const kMpiEnv =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

// One device, its stream, and NCCL over MPI_COMM_SELF: what a tp = 1 rank has.
struct GpuRank {
  MpiComm self{MPI_COMM_SELF};
  CudaContext context{0, self, self, 120.0};
  NcclComm& nccl = context.tp();
  std::unique_ptr<LanguageModel> load(const Checkpoint& ckpt) {
    return load_cuda_model(ckpt, context, context.tp());
  }
};

// A synthetic pair written once per dtype under the temp directory.
inline std::string synthetic_target(DType dtype) {
  const std::string dir =
      (fs::temp_directory_path() /
       ("specrun_cuda_test_" + std::to_string(getpid()) + "_" + dtype_name(dtype)))
          .string();
  if (!fs::exists(dir + "/target/config.json")) {
    SyntheticSpec spec;
    spec.dtype = dtype;
    spec.seed = 11;
    make_model_pair(spec, dir);
  }
  return dir + "/target";
}

inline std::vector<std::int32_t> prompt(int n, int vocab, int salt) {
  std::vector<std::int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 37 + salt * 101 + 1) % vocab;
  return p;
}

inline std::vector<float> run(LanguageModel& m, KvCache& cache,
                              const std::vector<std::int32_t>& tokens, bool all_logits) {
  SeqChunk chunk{&cache, tokens.data(), static_cast<int>(tokens.size())};
  std::vector<float> logits;
  m.forward(std::span<const SeqChunk>(&chunk, 1), all_logits, logits);
  return logits;
}

// Max |a - b| and the number of rows whose argmax differs.
inline void compare_logits(const std::vector<float>& cpu, const std::vector<float>& gpu, int vocab,
                           double* max_abs, int* argmax_diff) {
  ASSERT_EQ(cpu.size(), gpu.size());
  *max_abs = 0;
  *argmax_diff = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i)
    *max_abs = std::max(*max_abs, std::fabs(static_cast<double>(cpu[i]) - gpu[i]));
  for (std::size_t r = 0; r < cpu.size() / vocab; ++r)
    *argmax_diff +=
        cpu::argmax(cpu.data() + r * vocab, vocab) != cpu::argmax(gpu.data() + r * vocab, vocab);
}

// Three sequences of context_first, - context_step, - 2 context_step tokens in one batch, as in
// a speculative step: a verify window of 5 tokens per sequence gives the middle one bitwise the
// logits of decoding them one by one, and truncate-and-redo equals no rollback (this is what
// makes greedy speculative == baseline).
inline void expect_window_equals_steps(LanguageModel& model, int context_first, int context_step,
                                       int capacity) {
  const int V = model.config().vocab_size;
  const auto next = prompt(5, V, 4);
  std::vector<std::unique_ptr<KvCache> > a, b;
  for (int s = 0; s < 3; ++s) {
    a.push_back(model.new_cache(capacity));
    b.push_back(model.new_cache(capacity));
    run(model, *a[s], prompt(context_first - context_step * s, V, 3 + s), false);
    run(model, *b[s], prompt(context_first - context_step * s, V, 3 + s), false);
  }
  // (a) one verify window of 5 tokens per sequence, all logits.
  std::vector<SeqChunk> chunks;
  for (int s = 0; s < 3; ++s) chunks.push_back(SeqChunk{a[s].get(), next.data(), 5});
  std::vector<float> window;
  model.forward(chunks, true, window);
  // (b) the middle sequence decoded alone, token by token; then rolled back by 2 and redone.
  std::vector<float> steps;
  for (int i = 0; i < 5; ++i) {
    const auto l = run(model, *b[1], {next[i]}, false);
    steps.insert(steps.end(), l.begin(), l.end());
  }
  b[1]->truncate(b[1]->length() - 2);
  const auto redo = run(model, *b[1], {next[3], next[4]}, true);
  const float* mid = window.data() + static_cast<std::size_t>(5) * V;
  EXPECT_EQ(0, std::memcmp(mid, steps.data(), steps.size() * sizeof(float)))
      << "verify-window logits differ from step-by-step decode (first logit " << mid[0] << " vs "
      << steps[0] << "): greedy speculative output could differ from baseline";
  EXPECT_EQ(0, std::memcmp(redo.data(), steps.data() + static_cast<std::size_t>(3) * V,
                           redo.size() * sizeof(float)))
      << "truncate-and-redo differs from no rollback";
}

}  // namespace specrun::test

#endif  // SPECRUN_HAVE_CUDA
