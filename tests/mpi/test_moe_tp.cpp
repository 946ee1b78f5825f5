// Mixture-of-experts targets under tensor parallelism (tp = the world size) with both kinds of
// expert parallelism: ep = tp (each rank holds its share of the experts whole and computes them
// for the tokens routed to them) and ep = 1 (every rank holds every expert, cut to its slice of
// the intermediate dimension). Both give the greedy tokens of the single-rank model (computed on
// rank 0 over MPI_COMM_SELF and broadcast), and logits within float32 round-off of it (the
// all-reduce adds the ranks' partial sums in another order); every rank records the same routing.
// Synthetic Qwen3-MoE (with a dense layer) and Mixtral models, F32 weights, made by rank 0.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/mpi_comm.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/synthetic.h"

namespace fs = std::filesystem;
using namespace specrun;

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// A synthetic MoE pair made by rank 0 in a fresh directory whose name every rank gets.
struct SharedModel {
  std::string dir;
  explicit SharedModel(const std::string& arch) {
    char path[4096] = {};
    if (world_rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "specrun_moe_tp_XXXXXX").string();
      std::strncpy(path, ::mkdtemp(tmpl.data()), sizeof(path) - 1);
      SyntheticSpec spec;
      spec.architecture = arch;
      spec.hidden = 128;
      spec.heads = 8;
      spec.kv_heads = 4;
      spec.layers = 3;
      spec.intermediate = arch == "mixtral" ? 64 : 256;
      spec.moe_intermediate = arch == "mixtral" ? 0 : 64;
      spec.vocab = 512;
      spec.experts = 8;
      spec.experts_per_tok = 2;
      spec.router_std = 0.3;
      spec.dtype = DType::kF32;
      spec.seed = 9;
      if (arch == "qwen3_moe") spec.mlp_only_layers = {1};
      make_model_pair(spec, path);
    }
    MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
    dir = std::string(path) + "/target";
  }
  ~SharedModel() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(fs::path(dir).parent_path());
  }
};

struct Run {
  std::vector<float> logits;  // the prompt's, then each step's: [prompt + n_new - 1, vocab]
  std::vector<std::int32_t> greedy;
  std::vector<std::int32_t> routing;  // the prompt pass's experts
};

// Prefill with all logits, then greedy decode of n_new tokens one at a time.
Run run(LanguageModel& model, const std::vector<std::int32_t>& prompt, int n_new) {
  Run r;
  auto cache = model.new_cache(static_cast<int>(prompt.size()) + n_new);
  const int V = model.config().vocab_size;
  std::vector<float> logits;
  SeqChunk chunk{cache.get(), prompt.data(), static_cast<int>(prompt.size())};
  model.forward({&chunk, 1}, true, logits);
  r.routing = model.routing()->experts;
  r.logits = logits;
  for (int i = 0; i < n_new; ++i) {
    r.greedy.push_back(cpu::argmax(logits.data() + logits.size() - V, V));
    if (i + 1 == n_new) break;
    SeqChunk step{cache.get(), &r.greedy.back(), 1};
    model.forward({&step, 1}, false, logits);
    r.logits.insert(r.logits.end(), logits.begin(), logits.end());
  }
  return r;
}

std::vector<std::int32_t> prompt_tokens() {
  std::vector<std::int32_t> t;
  for (int i = 0; i < 40; ++i) t.push_back(3 + (i * 97 + 11) % 509);
  return t;
}

void compare_with_single_rank(const std::string& arch) {
  SharedModel shared(arch);
  const Checkpoint checkpoint(shared.dir);
  const auto prompt = prompt_tokens();
  const int n_new = 24, V = checkpoint.config().vocab_size;
  Run one;
  if (world_rank() == 0) {
    MpiComm self(MPI_COMM_SELF);
    auto single = load_cpu_model(checkpoint, self, 1);
    one = run(*single, prompt, n_new);
  }
  int sizes[2] = {static_cast<int>(one.logits.size()), static_cast<int>(one.routing.size())};
  MPI_Bcast(sizes, 2, MPI_INT, 0, MPI_COMM_WORLD);
  one.logits.resize(sizes[0]);
  one.greedy.resize(n_new);
  one.routing.resize(sizes[1]);
  MPI_Bcast(one.logits.data(), sizes[0], MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Bcast(one.greedy.data(), n_new, MPI_INT32_T, 0, MPI_COMM_WORLD);
  MPI_Bcast(one.routing.data(), sizes[1], MPI_INT32_T, 0, MPI_COMM_WORLD);

  MpiComm world(MPI_COMM_WORLD);
  for (int ep : {world.size(), 1}) {
    auto sharded = load_cpu_model(checkpoint, world, 1, ep);
    ASSERT_EQ(sharded->routing()->ep, ep);
    const Run got = run(*sharded, prompt, n_new);
    const std::string what =
        arch + " tp " + std::to_string(world.size()) + " ep " + std::to_string(ep);
    EXPECT_EQ(got.greedy, one.greedy) << what;
    EXPECT_EQ(got.routing, one.routing) << what << ": the prompt's routing";
    ASSERT_EQ(got.logits.size(), one.logits.size()) << what;
    double worst = 0;
    std::size_t where = 0;
    for (std::size_t i = 0; i < got.logits.size(); ++i) {
      const double d = std::fabs(got.logits[i] - one.logits[i]);
      if (d > worst) worst = d, where = i;
    }
    EXPECT_LT(worst, 1e-4) << what << ": position " << where / V << " token " << where % V
                           << " tp=1 " << one.logits[where] << " sharded " << got.logits[where];
  }
}

}  // namespace

TEST(MoeTensorParallel, Qwen3MoeMatchesSingleRankWithEitherExpertParallelism) {
  compare_with_single_rank("qwen3_moe");
}

TEST(MoeTensorParallel, MixtralMatchesSingleRankWithEitherExpertParallelism) {
  compare_with_single_rank("mixtral");
}

// An expert count the ranks cannot share is refused on every rank, naming the field.
TEST(MoeTensorParallel, ExpertsTheRanksCannotShareAreRefusedNamingTheField) {
  MpiComm world(MPI_COMM_WORLD);
  if (6 % world.size() == 0)
    GTEST_SKIP() << "6 experts split evenly over " << world.size() << " ranks";
  char path[4096] = {};
  if (world_rank() == 0) {
    std::string tmpl = (fs::temp_directory_path() / "specrun_moe_tp_XXXXXX").string();
    std::strncpy(path, ::mkdtemp(tmpl.data()), sizeof(path) - 1);
    SyntheticSpec spec;
    spec.architecture = "mixtral";
    spec.hidden = 64;
    spec.heads = 4;
    spec.kv_heads = 4;
    spec.layers = 1;
    spec.intermediate = 32;
    spec.vocab = 64;
    spec.experts = 6;
    make_model_pair(spec, path);
  }
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
  const Checkpoint checkpoint(std::string(path) + "/target");
  try {
    auto sharded = load_cpu_model(checkpoint, world, 1);
    ADD_FAILURE() << "6 experts over " << world.size() << " ranks must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(e.message().find("num_local_experts = 6 is not divisible by parallel.ep = " +
                               std::to_string(world.size())),
              std::string::npos)
        << e.message();
  }
  // ep = 1 keeps every expert on every rank: accepted.
  EXPECT_NO_THROW(load_cpu_model(checkpoint, world, 1, 1));
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(path);
}
