// draft.kind = "model": a small language model of the target's vocabulary drafts
//  - a chain of up to k tokens autoregressively (decode.tree_top_k = 1; greedy: its argmax;
//    sampling: a sample of its transformed distribution, kept for lossless verification), or
//  - a dynamic tree (tree_top_k > 1, spec/tree_builder.h's TreeGrower: the top-k children of
//    the best nodes per depth, scored by cumulative log-probability; the draft scores a level
//    with one tree-attention forward).
// Its KV caches follow the committed sequence: each step it first feeds what it has not seen
// (usually the last emitted token, two after a step that accepted every draft); after
// verification it rolls back to the accepted prefix (a chain) or to the committed tokens (a
// tree: the accepted ones are fed again in the next step).
//
// Placement: replicated (a whole copy on every rank, no communication) or sharded like the target
// (its collectives inside forward; its logits gathered, the same bytes on every rank). Either
// way the engine verifies tp rank 0's proposals (drafter.h).
#pragma once

#include <memory>
#include <vector>

#include "model/language_model.h"
#include "spec/drafter.h"
#include "spec/sampling.h"
#include "spec/token_ops.h"
#include "spec/tree_builder.h"

namespace specrun {

class ModelDrafter final : public Drafter, private LevelScorer {
 public:
  // draft: the draft model, loaded sharded or replicated (its vocabulary must be the target's:
  // target_vocab; shared, so that tests can run several drafters on one loaded model); ops: the
  // decisions of its backend, which must outlive the drafter.
  ModelDrafter(std::shared_ptr<LanguageModel> draft, int target_vocab, TokenOps& ops,
               const DraftOptions& options);

  void begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures* features) override;
  void propose(std::span<const int> active, std::span<const ProposalLimit> limits,
               std::span<DraftTree> out) override;
  void accepted(std::span<const int> active, std::span<const TreeVerdict> verdicts,
                const TargetFeatures* features) override;
  void end_batch() override;

 private:
  struct Seq {
    DraftSequence seq;
    std::unique_ptr<KvCache> cache;
    int base = 0;  // tokens committed when the last proposal was made
  };
  void propose_chain(std::span<const int> active, std::span<const ProposalLimit> limits,
                     std::span<DraftTree> out);
  // Feeds each sequence of `feeding` what the draft has not seen (a chain), last rows' logits.
  ForwardResult feed_new_tokens(std::span<const int> active);
  // Trees (LevelScorer): the roots' children from the newly fed tokens' last logits; a level
  // with one tree-attention forward of the draft.
  RowsView score_roots(std::span<const int> growing, std::vector<int>& rows) override;
  RowsView score_level(const TreeLevel& level) override;

  std::shared_ptr<LanguageModel> draft_;
  TokenOps& ops_;
  DraftOptions options_;
  std::vector<Seq> seqs_;
  TreeGrower grower_;
  // Per-step scratch (grown, never shrunk).
  std::span<const int> active_;  // the sequences of the propose call
  std::vector<SeqChunk> chunks_;
  std::vector<int> drafting_, rows_, keep_at_;
  std::vector<KvCache*> caches_;
  std::vector<double> u_;
  std::vector<std::int32_t> picked_;
};

}  // namespace specrun
