// Speculative decoding against baseline decoding on real (synthetic) checkpoints, on every rank
// count the test is launched with: greedy speculative output must equal greedy baseline output
// token for token for any draft, and sampled output must not depend on tp or batch size.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>

#include "common/error.h"
#include "decode_test_util.h"
#include "dist/mpi_comm.h"
#include "engine/decoder.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/synthetic.h"
#include "spec/model_drafter.h"
#include "spec/token_ops.h"

using namespace specrun;
using namespace specrun::test;
namespace fs = std::filesystem;

namespace {

SyntheticSpec small_spec(std::uint64_t seed) {
  SyntheticSpec s;
  s.hidden = 128;
  s.layers = 3;
  s.heads = 8;
  s.kv_heads = 4;
  s.intermediate = 256;
  s.vocab = 256;
  s.max_pos = 512;
  s.draft_layers = 1;
  s.seed = seed;
  s.dtype = DType::kBF16;
  return s;
}

class Models : public ::testing::Environment {
 public:
  void SetUp() override {
    dir = shared_dir("models");
    if (world_rank() == 0) {
      make_model_pair(small_spec(11), dir + "/pair");
      // An unrelated model of the same shape: a deliberately bad draft.
      make_model_pair(small_spec(99), dir + "/other");
      SyntheticSpec wide = small_spec(5);
      wide.vocab = 320;
      make_model_pair(wide, dir + "/wide");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(fs::path(dir).parent_path());
  }
  std::string dir;
};
Models* g_models = nullptr;

struct Rig {
  std::unique_ptr<MpiComm> comm;
  std::unique_ptr<Checkpoint> target_ckpt, draft_ckpt;
  std::unique_ptr<LanguageModel> target;
  std::shared_ptr<LanguageModel> draft;
  std::unique_ptr<TokenOps> ops = make_token_ops(BackendKind::kCpu, nullptr);
};

// The decoder of a rig for `opt`: the draft model (sharded or replicated) as a drafter. The
// drafter outlives the decoder through `drafter`.
BatchDecoder make_decoder(Rig& s, const DecodeOptions& opt, std::unique_ptr<Drafter>& drafter) {
  drafter =
      std::make_unique<ModelDrafter>(s.draft, s.target->config().vocab_size, *s.ops, opt.draft());
  return BatchDecoder(*s.target, drafter.get(), *s.ops, *s.comm, opt);
}

// tp = the whole world (sharded target; draft sharded or replicated), or tp = 1 on this rank.
Rig make_setup(const std::string& target_dir, const std::string& draft_dir, bool tp_world,
               bool draft_sharded) {
  Rig s;
  s.comm = std::make_unique<MpiComm>(tp_world ? MPI_COMM_WORLD : MPI_COMM_SELF);
  static MpiComm self(MPI_COMM_SELF);
  s.target_ckpt = std::make_unique<Checkpoint>(target_dir);
  s.draft_ckpt = std::make_unique<Checkpoint>(draft_dir);
  s.target = load_cpu_model(*s.target_ckpt, *s.comm, 1);
  s.draft =
      load_cpu_model(*s.draft_ckpt, draft_sharded ? static_cast<Communicator&>(*s.comm) : self, 1);
  return s;
}

}  // namespace

TEST(Decoder, GreedySpeculativeEqualsBaselineForAnyDraft) {
  const std::string pair = g_models->dir + "/pair";
  const std::string other = g_models->dir + "/other";
  auto prompts = make_prompts(5, 256, 7);
  struct Case {
    std::string name, draft;
    bool tp_world, sharded;
  };
  std::vector<Case> cases = {
      {"good draft, tp=world, replicated", pair + "/draft", true, false},
      {"good draft, tp=world, sharded", pair + "/draft", true, true},
      {"random draft, tp=world", other + "/target", true, false},
      {"good draft, tp=1", pair + "/draft", false, false},
      {"target as its own draft, tp=world", pair + "/target", true, true},
  };
  for (const Case& c : cases) {
    Rig s = make_setup(pair + "/target", c.draft, c.tp_world, c.sharded);
    DecodeOptions opt;
    opt.max_new_tokens = 20;
    opt.sampling.temperature = 0;
    opt.stop_at_eos = false;
    // Every draft_len 1..8 for the main case, a spread for the others.
    std::vector<int> ks = {1, 3, 8};
    if (&c == &cases[0]) ks = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int k : ks) {
      opt.shape.draft_len = k;
      std::unique_ptr<Drafter> drafter;
      BatchDecoder decoder = make_decoder(s, opt, drafter);
      for (int batch : {1, 3}) {
        auto base = decode_all(decoder, kModeBaseline, prompts, batch);
        auto spec = decode_all(decoder, kModeSpeculative, prompts, batch);
        std::string what = c.name + ", k=" + std::to_string(k) + ", batch=" + std::to_string(batch);
        expect_same_outputs(base, spec, what);
        std::int64_t drafted = 0, accepted = 0;
        for (const auto& r : spec) {
          EXPECT_EQ(r.generated, 20) << what;
          drafted += r.drafted;
          accepted += r.accepted;
          EXPECT_EQ(r.generated - 1, r.accepted + r.verify_steps) << what;
        }
        if (c.draft == pair + "/target")
          EXPECT_EQ(accepted, drafted) << what;
        else
          EXPECT_LT(accepted, drafted) << what;
      }
    }
  }
}

// Draft trees (top-k expansion of the draft model, verified with tree attention in one target
// pass): greedy output still equals baseline output token for token.
TEST(Decoder, GreedyTreesEqualBaseline) {
  const std::string pair = g_models->dir + "/pair";
  const std::string other = g_models->dir + "/other";
  auto prompts = make_prompts(5, 256, 17);
  struct Shape {
    int top_k, depth, nodes;
  };
  for (const Shape shape : {Shape{4, 5, 15}, Shape{8, 6, 31}, Shape{2, 3, 4}, Shape{3, 1, 3}}) {
    for (const char* draft : {"/draft", "other"}) {
      const bool good = std::string(draft) == "/draft";
      Rig s = make_setup(pair + "/target", good ? pair + "/draft" : other + "/target", true, false);
      DecodeOptions opt;
      opt.max_new_tokens = 20;
      opt.stop_at_eos = false;
      opt.sampling.temperature = 0;
      opt.shape.tree_top_k = shape.top_k;
      opt.shape.tree_depth = shape.depth;
      opt.shape.tree_nodes = shape.nodes;
      std::unique_ptr<Drafter> drafter;
      BatchDecoder decoder = make_decoder(s, opt, drafter);
      for (int batch : {1, 3}) {
        auto base = decode_all(decoder, kModeBaseline, prompts, batch);
        auto spec = decode_all(decoder, kModeSpeculative, prompts, batch);
        const std::string what = std::string(good ? "good" : "random") + " draft, tree " +
                                 std::to_string(shape.top_k) + "/" + std::to_string(shape.depth) +
                                 "/" + std::to_string(shape.nodes) + ", batch " +
                                 std::to_string(batch);
        expect_same_outputs(base, spec, what);
        for (const auto& r : spec) EXPECT_EQ(r.generated - 1, r.accepted + r.verify_steps) << what;
      }
    }
  }
}

TEST(Decoder, SampledTokensDoNotDependOnTpOrBatchSize) {
  const std::string pair = g_models->dir + "/pair";
  auto prompts = make_prompts(4, 256, 3);
  DecodeOptions opt;
  opt.max_new_tokens = 16;
  opt.shape.draft_len = 3;
  opt.sampling.temperature = 0.9f;
  opt.sampling.top_k = 40;
  opt.sampling.top_p = 0.95f;
  opt.seed = 42;
  Rig one = make_setup(pair + "/target", pair + "/draft", false, false);
  std::unique_ptr<Drafter> dr1, drw, drg;
  BatchDecoder d1 = make_decoder(one, opt, dr1);
  auto spec1 = decode_all(d1, kModeSpeculative, prompts, 1);
  auto base1 = decode_all(d1, kModeBaseline, prompts, 1);
  Rig all = make_setup(pair + "/target", pair + "/draft", true, false);
  BatchDecoder dw = make_decoder(all, opt, drw);
  auto spec_w = decode_all(dw, kModeSpeculative, prompts, 4);
  auto base_w = decode_all(dw, kModeBaseline, prompts, 3);
  expect_same_outputs(spec1, spec_w, "speculative, tp=1 batch 1 vs tp=world batch 4");
  expect_same_outputs(base1, base_w, "baseline, tp=1 batch 1 vs tp=world batch 3");
  // Sampling really happened: the outputs are not the greedy ones.
  opt.sampling.temperature = 0;
  BatchDecoder dg = make_decoder(one, opt, drg);
  auto greedy = decode_all(dg, kModeBaseline, prompts, 4);
  int differ = 0;
  for (std::size_t i = 0; i < greedy.size(); ++i)
    differ += greedy[i].output_tokens != base1[i].output_tokens;
  EXPECT_GT(differ, 0);
}

namespace {

// A drafter whose proposals depend on the tp rank: the draft model's on tp rank 0; on the others
// trees of the same shape with other tokens (and, when sampling, no kept distributions).
class RankDependentDrafter final : public Drafter {
 public:
  RankDependentDrafter(std::unique_ptr<Drafter> inner, int tp_rank, int vocab)
      : inner_(std::move(inner)), tp_rank_(tp_rank), vocab_(vocab) {}
  void begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures* f) override {
    inner_->begin_batch(seqs, f);
  }
  void propose(std::span<const int> active, std::span<const ProposalLimit> limits,
               std::span<DraftTree> out) override {
    inner_->propose(active, limits, out);
    if (tp_rank_ == 0) return;
    for (DraftTree& tree : out.first(active.size())) {
      for (std::int32_t& t : tree.tokens) t = (t + 1 + tp_rank_) % vocab_;
      tree.q_row = -1;
    }
  }
  void accepted(std::span<const int> active, std::span<const TreeVerdict> verdicts,
                const TargetFeatures* f) override {
    inner_->accepted(active, verdicts, f);
  }
  void end_batch() override { inner_->end_batch(); }

 private:
  std::unique_ptr<Drafter> inner_;
  int tp_rank_, vocab_;
};

}  // namespace

// The rank-agreement rule (spec/drafter.h): every rank verifies tp rank 0's proposals, whatever
// its own drafter proposed. With a drafter that proposes other tokens on the other ranks, every
// rank's outputs and acceptance are those of the honest drafter (rank 0's), for chains and trees,
// greedy and sampled; were each rank to verify its own proposals, the ranks would commit
// different tokens.
TEST(Decoder, RanksVerifyRankZerosProposals) {
  const std::string pair = g_models->dir + "/pair";
  auto prompts = make_prompts(4, 256, 23);
  Rig s = make_setup(pair + "/target", pair + "/draft", true, false);
  const int vocab = s.target->config().vocab_size;
  for (const bool tree : {false, true}) {
    for (const float temperature : {0.0f, 0.9f}) {
      DecodeOptions opt;
      opt.max_new_tokens = 20;
      opt.stop_at_eos = false;
      opt.sampling.temperature = temperature;
      opt.seed = 5;
      if (tree) opt.shape = DraftShape{4, 3, 4, 8};
      const std::string what = std::string(tree ? "tree" : "chain") +
                               ", T = " + std::to_string(temperature) + ", tp " +
                               std::to_string(s.comm->size());
      std::unique_ptr<Drafter> honest;
      BatchDecoder decoder = make_decoder(s, opt, honest);
      const auto want = decode_all(decoder, kModeSpeculative, prompts, 2);
      RankDependentDrafter skewed(
          std::make_unique<ModelDrafter>(s.draft, vocab, *s.ops, opt.draft()), s.comm->rank(),
          vocab);
      BatchDecoder skewed_decoder(*s.target, &skewed, *s.ops, *s.comm, opt);
      const auto got = decode_all(skewed_decoder, kModeSpeculative, prompts, 2);
      expect_same_outputs(want, got, what + ", rank " + std::to_string(s.comm->rank()));
      ASSERT_EQ(want.size(), got.size());
      std::int64_t accepted = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(want[i].accepted, got[i].accepted) << what << ": prompt " << i;
        EXPECT_EQ(want[i].verify_steps, got[i].verify_steps) << what << ": prompt " << i;
        accepted += got[i].accepted;
      }
      EXPECT_GT(accepted, 0) << what << ": the draft was never accepted, nothing was tested";
      if (temperature == 0) {
        auto base = decode_all(decoder, kModeBaseline, prompts, 2);
        expect_same_outputs(base, got, what + ": greedy speculative against baseline");
      }
    }
  }
}

TEST(Decoder, DraftWithAnotherVocabularyIsRejected) {
  Rig s = make_setup(g_models->dir + "/pair/target", g_models->dir + "/wide/draft", false, false);
  DecodeOptions opt;
  try {
    std::unique_ptr<Drafter> drafter;
    BatchDecoder decoder = make_decoder(s, opt, drafter);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "draft's vocabulary (320 tokens) differs from the target's (256)"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
}

TEST(Decoder, PromptLongerThanContextIsAClearError) {
  Rig s = make_setup(g_models->dir + "/pair/target", g_models->dir + "/pair/draft", false, false);
  DecodeOptions opt;
  opt.max_new_tokens = 100;
  std::unique_ptr<Drafter> drafter;
  BatchDecoder decoder = make_decoder(s, opt, drafter);
  Prompt p;
  p.index = 7;
  p.id = "long";
  p.tokens.assign(450, 5);
  try {
    decoder.run(kModeBaseline, 0, {p});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 7 (id 'long') has 450 tokens"), std::string::npos)
        << e.what();
  }
}

int register_models = [] {
  g_models = new Models;
  ::testing::AddGlobalTestEnvironment(g_models);
  return 0;
}();
