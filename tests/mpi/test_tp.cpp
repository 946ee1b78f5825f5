// Tensor parallelism under mpirun: a model sharded over all ranks (tp = world size) gives the
// same greedy tokens as tp = 1, and logits within float32 round-off of it. The tp = 1 model is
// computed on rank 0 over MPI_COMM_SELF and its results are broadcast. tp = 8 exercises kv-head
// replication for code-target (8 query / 4 kv heads); code-draft (4 / 2) cannot be split 8 ways
// and must say so.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "dist/mpi_comm.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"

namespace fs = std::filesystem;
using namespace specrun;

namespace {

fs::path shared_dir() {
  if (const char* env = std::getenv("SPECRUN_SHARED_DIR")) return env;
  return fs::path(SPECRUN_SOURCE_DIR) / ".." / "shared";
}

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(shared_dir() / "models" / "reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::vector<std::int32_t> prompt_tokens(int k) {
  return reference()["prompts"][k]["tokens"].get<std::vector<std::int32_t>>();
}

struct Run {
  std::vector<float> prompt_logits;  // [prompt length, vocab]
  std::vector<std::int32_t> greedy;
};

// Prefill with all logits, then greedy decode of n_new tokens one at a time.
Run run(LanguageModel& model, const std::vector<std::int32_t>& prompt, int n_new) {
  Run r;
  auto cache = model.new_cache(static_cast<int>(prompt.size()) + n_new);
  const int V = model.config().vocab_size;
  SeqChunk chunk{cache.get(), prompt.data(), static_cast<int>(prompt.size())};
  model.forward({&chunk, 1}, true, r.prompt_logits);
  std::vector<float> logits(r.prompt_logits.end() - V, r.prompt_logits.end());
  for (int i = 0; i < n_new; ++i) {
    r.greedy.push_back(cpu::argmax(logits.data(), V));
    if (i + 1 == n_new) break;
    SeqChunk step{cache.get(), &r.greedy.back(), 1};
    model.forward({&step, 1}, false, logits);
  }
  return r;
}

// Rank 0's tp = 1 result, broadcast to every rank.
Run single_rank_run(const std::string& dir, const std::vector<std::int32_t>& prompt, int n_new,
                    int vocab) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Run r;
  if (rank == 0) {
    MpiComm self(MPI_COMM_SELF);
    Checkpoint checkpoint(dir);
    auto model = load_cpu_model(checkpoint, self, 1);
    r = run(*model, prompt, n_new);
  }
  r.prompt_logits.resize(prompt.size() * vocab);
  r.greedy.resize(n_new);
  MPI_Bcast(r.prompt_logits.data(), static_cast<int>(r.prompt_logits.size()), MPI_FLOAT, 0,
            MPI_COMM_WORLD);
  MPI_Bcast(r.greedy.data(), n_new, MPI_INT32_T, 0, MPI_COMM_WORLD);
  return r;
}

void compare_with_single_rank(const std::string& model_name, const char* role, int k, int n_new) {
  const std::string dir = (shared_dir() / "models" / model_name).string();
  MpiComm world(MPI_COMM_WORLD);
  Checkpoint checkpoint(dir);
  auto sharded = load_cpu_model(checkpoint, world, 1);
  const auto prompt = prompt_tokens(k);
  const int V = sharded->config().vocab_size;
  Run tp_run = run(*sharded, prompt, n_new);
  Run one = single_rank_run(dir, prompt, n_new, V);

  EXPECT_EQ(tp_run.greedy, one.greedy) << model_name << " prompt " << k << " tp " << world.size();
  double worst = 0;
  std::size_t where = 0;
  for (std::size_t i = 0; i < one.prompt_logits.size(); ++i) {
    const double d = std::fabs(tp_run.prompt_logits[i] - one.prompt_logits[i]);
    if (d > worst) {
      worst = d;
      where = i;
    }
  }
  // Sharding changes only the order of float32 sums (each all-reduce adds tp partial sums).
  EXPECT_LT(worst, 1e-4) << model_name << " tp " << world.size() << ": position " << where / V
                         << " token " << where % V << " tp=1 " << one.prompt_logits[where]
                         << " sharded " << tp_run.prompt_logits[where];
  // And the independent reference agrees (the BF16 checkpoints' greedy continuation).
  const auto want =
      reference()["prompts"][k][role]["greedy_bf16_weights"].get<std::vector<std::int32_t>>();
  EXPECT_TRUE(std::equal(tp_run.greedy.begin(), tp_run.greedy.end(), want.begin()))
      << model_name << " prompt " << k << " differs from reference.json";
}

bool shared_models_present() {
  return fs::exists(shared_dir() / "models" / "reference.json");
}

}  // namespace

TEST(TensorParallel, TargetMatchesSingleRank) {
  if (!shared_models_present()) GTEST_SKIP() << "shared models not found at " << shared_dir();
  compare_with_single_rank("code-target", "target", 1, 24);
  compare_with_single_rank("code-target", "target", 4, 16);
}

TEST(TensorParallel, DraftMatchesSingleRankOrNamesTheField) {
  if (!shared_models_present()) GTEST_SKIP() << "shared models not found at " << shared_dir();
  MpiComm world(MPI_COMM_WORLD);
  if (4 % world.size() == 0) {
    compare_with_single_rank("code-draft", "draft", 4, 24);
    return;
  }
  Checkpoint checkpoint((shared_dir() / "models" / "code-draft").string());
  try {
    auto sharded = load_cpu_model(checkpoint, world, 1);
    FAIL() << "code-draft has 4 attention heads; tp = " << world.size() << " must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(e.message().find("num_attention_heads = 4 is not divisible by tp = " +
                               std::to_string(world.size())),
              std::string::npos)
        << e.message();
  }
}

TEST(TensorParallel, BatchedVerifyWindowsMatchSingleRank) {
  if (!shared_models_present()) GTEST_SKIP() << "shared models not found at " << shared_dir();
  const std::string dir = (shared_dir() / "models" / "code-target-f32").string();
  MpiComm world(MPI_COMM_WORLD);
  MpiComm self(MPI_COMM_SELF);
  Checkpoint checkpoint(dir);
  auto sharded = load_cpu_model(checkpoint, world, 1);
  auto single = load_cpu_model(checkpoint, self, 1);
  const auto a = prompt_tokens(4), b = prompt_tokens(1);
  // Two sequences: prefill all but 4 tokens, then verify windows of 4 and 3 in one batch.
  auto logits_of = [&](LanguageModel& model) {
    auto ca = model.new_cache(300), cb = model.new_cache(300);
    std::vector<float> logits;
    std::vector<SeqChunk> prefill = {{ca.get(), a.data(), static_cast<int>(a.size()) - 4},
                                     {cb.get(), b.data(), static_cast<int>(b.size()) - 3}};
    model.forward(prefill, false, logits);
    std::vector<SeqChunk> verify = {{ca.get(), a.data() + a.size() - 4, 4},
                                    {cb.get(), b.data() + b.size() - 3, 3}};
    model.forward(verify, true, logits);
    return logits;
  };
  const auto got = logits_of(*sharded);
  const auto want = logits_of(*single);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), static_cast<std::size_t>(7) * sharded->config().vocab_size);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
  EXPECT_LT(worst, 1e-4) << "tp " << world.size();
}

// Hidden-state capture is full width on every rank of a tensor-parallel group and equals the
// single-rank capture within float32 round-off (the residual stream is all-reduced).
TEST(TensorParallel, CapturedHiddenStatesMatchSingleRank) {
  if (!shared_models_present()) GTEST_SKIP() << "shared models not found at " << shared_dir();
  const std::string dir = (shared_dir() / "models" / "code-target-f32").string();
  MpiComm world(MPI_COMM_WORLD);
  MpiComm self(MPI_COMM_SELF);
  Checkpoint checkpoint(dir);
  auto sharded = load_cpu_model(checkpoint, world, 1);
  auto single = load_cpu_model(checkpoint, self, 1);
  const int L = checkpoint.config().num_layers;
  const std::vector<int> capture = {0, L / 2, L};
  const auto tokens = prompt_tokens(2);
  auto hidden_of = [&](LanguageModel& model) {
    auto cache = model.new_cache(static_cast<int>(tokens.size()));
    SeqChunk c{cache.get(), tokens.data(), static_cast<int>(tokens.size())};
    const ForwardResult out = model.forward({&c, 1}, ForwardRequest{false, capture});
    std::vector<float> h(static_cast<std::size_t>(out.hidden.rows) * out.hidden.width);
    model.read(out.hidden, 0, out.hidden.rows, h.data());
    return h;
  };
  const auto got = hidden_of(*sharded), want = hidden_of(*single);
  ASSERT_EQ(got.size(), tokens.size() * capture.size() * checkpoint.config().hidden_size);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
  EXPECT_LT(worst, 1e-4) << "tp " << world.size() << ", rank " << world.rank();
}
