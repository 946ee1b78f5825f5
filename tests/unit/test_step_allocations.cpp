// A warm decoding step allocates nothing: BatchDecoder::run on the same prompts with twice the
// new tokens (twice the steps) makes exactly as many heap allocations, in baseline mode and in
// speculative mode (greedy and sampled) with the model drafter, for a dense target and a
// mixture-of-experts one (its routing, grouping and per-expert scratch reused too). Every
// operator new of the program is counted (this file replaces the global one).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "engine/decoder.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/synthetic.h"
#include "single_rank_comm.h"
#include "spec/model_drafter.h"
#include "spec/token_ops.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

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
namespace fs = std::filesystem;

TEST(StepAllocations, AWarmStepAllocatesNothing) {
  for (const char* arch : {"llama", "qwen3_moe"}) {
    SCOPED_TRACE(arch);
    const fs::path dir =
        fs::temp_directory_path() / ("specrun_test_alloc_" + std::to_string(::getpid()));
    SyntheticSpec spec;
    spec.architecture = arch;
    spec.hidden = 64;
    spec.layers = 2;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.intermediate = 128;
    spec.vocab = 256;
    make_model_pair(spec, dir.string());
    {
      test::SingleRankComm comm;
      Checkpoint target_ckpt((dir / "target").string()), draft_ckpt((dir / "draft").string());
      auto target = load_cpu_model(target_ckpt, comm, 1);
      std::shared_ptr<LanguageModel> draft = load_cpu_model(draft_ckpt, comm, 1);
      auto ops = make_token_ops(BackendKind::kCpu, nullptr);
      std::vector<Prompt> prompts(3);
      for (int i = 0; i < 3; ++i) {
        prompts[i].index = i;
        prompts[i].id = std::to_string(i);
        for (int t = 0; t < 5 + 3 * i; ++t) prompts[i].tokens.push_back(3 + (7 * t + i) % 250);
      }
      for (float temperature : {0.0f, 0.8f}) {
        for (const char* mode : {kModeBaseline, kModeSpeculative}) {
          long counted[2] = {0, 0};
          for (int run = 0; run < 2; ++run) {
            DecodeOptions opt;
            opt.max_new_tokens = run == 0 ? 12 : 24;
            opt.shape.draft_len = 3;
            opt.stop_at_eos = false;
            opt.sampling.temperature = temperature;
            ModelDrafter drafter(draft, spec.vocab, *ops, opt.draft());
            BatchDecoder decoder(*target, &drafter, *ops, comm, opt);
            decoder.run(mode, 0, prompts);  // warm-up: scratch grows to its size
            const long before = g_allocations.load();
            BatchResult r = decoder.run(mode, 0, prompts);
            counted[run] = g_allocations.load() - before;
            for (const SequenceRecord& s : r.sequences) ASSERT_EQ(s.generated, opt.max_new_tokens);
          }
          EXPECT_EQ(counted[0], counted[1])
              << mode << ", T = " << temperature << ": " << counted[0] << " allocations for 12 "
              << "new tokens, " << counted[1] << " for 24: some step allocates";
        }
      }
    }
    fs::remove_all(dir);
  }
}
