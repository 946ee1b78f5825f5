// draft.kind = "ngram": prompt lookup, no model. Each step, for n from draft.ngram_max down to
// draft.ngram_min, the last n committed tokens (prompt + generated) are looked up among the
// earlier ones; at the most recent earlier occurrence, the tokens that followed it are
// proposed, up to decode.draft_len of them (a chain). No match for any n: nothing proposed
// (the step is then a plain decode step). Deterministic, so sampling verifies it with the
// target-only rule (verifier.h). The variant of vLLM's `ngram` speculative method and llama.cpp's
// prompt-lookup decoding (the most recent match, longest n first).
#pragma once

#include <span>
#include <vector>

#include "spec/drafter.h"

namespace specrun {

class NgramDrafter final : public Drafter {
 public:
  // 1 <= min_n <= max_n; k: the longest chain (decode.draft_len).
  NgramDrafter(int min_n, int max_n, int k);

  void begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures* features) override;
  void propose(std::span<const int> active, std::span<const ProposalLimit> limits,
               std::span<DraftTree> out) override;
  void accepted(std::span<const int>, std::span<const TreeVerdict>,
                const TargetFeatures*) override {}
  void end_batch() override { seqs_.clear(); }

  // The proposal for `tokens` (exposed for tests): the continuation of the most recent earlier
  // occurrence of the longest matching suffix, at most `k` tokens, into out.
  static void lookup(std::span<const std::int32_t> tokens, int min_n, int max_n, int k,
                     std::vector<std::int32_t>& out);

 private:
  int min_n_, max_n_, k_;
  std::vector<DraftSequence> seqs_;
  std::vector<std::int32_t> found_;
};

}  // namespace specrun
