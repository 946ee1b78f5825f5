// A warm decoding step allocates nothing: BatchDecoder::run on the same prompts with twice the
// new tokens (twice the steps) makes exactly as many heap allocations, in baseline mode and in
// speculative mode (greedy and sampled) with the model drafter, for a dense target and a
// mixture-of-experts one (its routing, grouping and per-expert scratch reused too, and the
// expert accounting of its passes), and so it does with the accounting of a draft model's passes
// (tests/unit/routed_model.h). Every operator new of the program is counted (this file replaces
// the global one).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <new>

#include "engine/decoder.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/routing_observer.h"
#include "model/synthetic.h"
#include "routed_model.h"
#include "single_rank_comm.h"
#include "small_pair.h"
#include "spec/model_drafter.h"
#include "spec/token_ops.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// The replacements below pair malloc with free on purpose; GCC 12 takes a vector's inlined
// operator new and delete for a mismatched pair when it sees both.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

using namespace specrun;

namespace {

// The models of a test: the target, the draft model, with the expert log the draft reports to
// (nullptr: none), the token decisions and the prompts.
struct Models {
  LanguageModel& target;
  std::shared_ptr<LanguageModel> draft;
  DraftExpertLog* log;
  TokenOps& ops;
  const std::vector<Prompt>& prompts;
};

// Heap allocations of a warm BatchDecoder::run in `mode` (after a run that grows the scratch)
// with max_new_tokens 12 and with 24: twice the steps, so equal counts mean no step allocates.
// check(result, options) runs on each counted result.
template <class Check>
std::array<long, 2> warm_run_allocations(const Models& m, DecodeOptions opt, const char* mode,
                                         Check check) {
  test::SingleRankComm comm;
  std::array<long, 2> counted{};
  for (int run = 0; run < 2; ++run) {
    opt.max_new_tokens = run == 0 ? 12 : 24;
    ModelDrafter drafter(m.draft, m.target.config().vocab_size, m.ops, opt.draft());
    BatchDecoder decoder(m.target, &drafter, m.ops, comm, opt, nullptr, m.log);
    decoder.run(mode, 0, m.prompts);  // warm-up: scratch grows to its size
    const long before = g_allocations.load();
    const BatchResult r = decoder.run(mode, 0, m.prompts);
    counted[static_cast<std::size_t>(run)] = g_allocations.load() - before;
    check(r, opt);
  }
  return counted;
}

}  // namespace

TEST(StepAllocations, AWarmStepAllocatesNothing) {
  for (const char* arch : {"llama", "qwen3_moe"}) {
    SCOPED_TRACE(arch);
    const test::SmallPair pair("alloc", arch);
    test::SingleRankComm comm;
    Checkpoint target_ckpt(pair.target()), draft_ckpt(pair.draft());
    auto target = load_cpu_model(target_ckpt, comm, 1);
    auto ops = make_token_ops(BackendKind::kCpu, nullptr);
    const std::vector<Prompt> prompts = test::small_prompts(3);
    const Models models{*target, load_cpu_model(draft_ckpt, comm, 1), nullptr, *ops, prompts};
    for (float temperature : {0.0f, 0.8f}) {
      for (const char* mode : {kModeBaseline, kModeSpeculative}) {
        DecodeOptions opt;
        opt.shape.draft_len = 3;
        opt.stop_at_eos = false;
        opt.sampling.temperature = temperature;
        const auto counted = warm_run_allocations(
            models, opt, mode, [&](const BatchResult& r, const DecodeOptions& o) {
              for (const SequenceRecord& s : r.sequences) ASSERT_EQ(s.generated, o.max_new_tokens);
              // The MoE target's passes are counted: one prefill and one per step.
              ASSERT_EQ(r.target_experts.passes(),
                        std::string(arch) == "llama" ? 0 : r.n_steps + 1);
            });
        EXPECT_EQ(counted[0], counted[1])
            << mode << ", T = " << temperature << ": " << counted[0] << " allocations for 12 "
            << "new tokens, " << counted[1] << " for 24: some step allocates";
      }
    }
  }
}

// The same with the target's and the draft model's passes counted for the expert accounting
// (BatchResult::target_experts, draft_experts): their records are reserved once per batch.
TEST(StepAllocations, AWarmStepOfAnExpertModelAllocatesNothing) {
  const test::SmallPair pair("alloc_moe");
  test::SingleRankComm comm;
  Checkpoint target_ckpt(pair.target()), draft_ckpt(pair.draft());
  test::RoutedModel target(load_cpu_model(target_ckpt, comm, 1), {0, 1}, 16, 2, 2, 1000);
  auto routed_draft = std::make_shared<test::RoutedModel>(load_cpu_model(draft_ckpt, comm, 1),
                                                          std::vector<int>{0}, 8, 2, 1, 100);
  auto ops = make_token_ops(BackendKind::kCpu, nullptr);
  const std::vector<Prompt> prompts = test::small_prompts(3);
  DraftExpertLog log;
  const Models models{target, observe_routing(routed_draft, log), &log, *ops, prompts};
  for (int tree : {0, 1}) {
    for (const char* mode : {kModeBaseline, kModeSpeculative}) {
      DecodeOptions opt;
      opt.shape.draft_len = 3;
      if (tree) {
        opt.shape.tree_top_k = 2;
        opt.shape.tree_depth = 3;
        opt.shape.tree_nodes = 6;
      }
      opt.stop_at_eos = false;
      const auto counted =
          warm_run_allocations(models, opt, mode, [&](const BatchResult& r, const DecodeOptions&) {
            ASSERT_EQ(r.target_experts.passes(), r.n_steps + 1);
            ASSERT_EQ(r.draft_experts.empty(), std::string(mode) == kModeBaseline);
          });
      EXPECT_EQ(counted[0], counted[1])
          << mode << (tree ? ", tree" : ", chain") << ": " << counted[0]
          << " allocations for 12 new tokens, " << counted[1] << " for 24: some step allocates";
    }
  }
}
