// draft.kind = "eagle3" and "mtp": a draft head (model/draft_head.h: an EAGLE-3 head, or a
// DeepSeek-V3 MTP module, docs/mtp-design.md) drafts from the target's hidden states, as the
// SafeAILab reference, SGLang and vLLM do:
//  - the target captures the head's layers (DraftHead::target_capture: EAGLE-3's three, the
//    MTP module's final norm output) in its prefill and verify passes;
//  - "extend": the head runs over every position the target has committed, pairing the
//    embedding of the next token with the target's features at the position (draft position i
//    holds (embed(x_{i+1}), f_i) at RoPE position i); its last output predicts the token after
//    the last committed one;
//  - drafting: a dynamic tree (spec/tree_builder.h's TreeGrower; a chain when decode.tree_top_k
//    is 1) grown from that last output, each node fed with its token and its parent's output (fc
//    skipped; the MTP module applied recursively), one tree-attention forward of the head per
//    depth; draft ids map to target ids with d2t;
//  - after verification the head's cache returns to the committed positions and only the
//    accepted positions' features are extended (the root and the accepted path).
// The target's features are full width on every rank and the head's outputs too (replicated:
// the whole head on every rank, no communication; sharded: split like the target, its partial
// sums reduced and its logits gathered inside forward); the engine verifies tp rank 0's tree
// (drafter.h).
// Proposals are deterministic (top-k): sampling verifies them with the target-only tree rule
// (verifier.h).
#pragma once

#include <memory>
#include <vector>

#include "model/draft_head.h"
#include "model/routing_observer.h"
#include "spec/drafter.h"
#include "spec/token_ops.h"
#include "spec/tree_builder.h"

namespace specrun {

class HeadDrafter final : public Drafter, private LevelScorer {
 public:
  // head: the loaded head (owned); ops: the decisions of its backend (outlives the drafter);
  // routing: told each head forward's expert routing when the head has MoE layers (the
  // drafter's expert accounting), or nullptr.
  HeadDrafter(std::unique_ptr<DraftHead> head, TokenOps& ops, const DraftOptions& options,
              RoutingObserver* routing = nullptr);

  std::span<const int> target_capture() const override { return head_->target_capture(); }
  void begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures* features) override;
  void propose(std::span<const int> active, std::span<const ProposalLimit> limits,
               std::span<DraftTree> out) override;
  void accepted(std::span<const int> active, std::span<const TreeVerdict> verdicts,
                const TargetFeatures* features) override;
  void end_batch() override { seqs_.clear(); }

 private:
  struct Seq {
    DraftSequence seq;
    std::unique_ptr<KvCache> cache;
    int committed = 0;     // positions the head has extended over (= the target's committed)
    int root_logits = -1;  // row of the last extend's logits for this sequence
    int root_hidden = -1;  // row of its output (the root's)
  };
  // One head forward over the committed positions [from, from + count) of the sequences
  // `which` (features rows given), remembering each one's last logits and output rows.
  void extend(std::span<const int> which, const TargetFeatures& features);
  // LevelScorer: the roots' children from the last extend's logits; a level with one head
  // forward, each node fed its parent's output.
  RowsView score_roots(std::span<const int> growing, std::vector<int>& rows) override;
  RowsView score_level(const TreeLevel& level) override;

  // head_->forward, its routing reported to routing_.
  ForwardResult forward(std::span<const SeqChunk> batch, const RowsView& source,
                        std::span<const int> rows, bool all_logits);

  std::unique_ptr<DraftHead> head_;
  TokenOps& ops_;
  RoutingObserver* routing_;
  DraftOptions options_;
  std::vector<Seq> seqs_;
  TreeGrower grower_;
  RowsView last_hidden_;  // the latest forward's outputs (the next level's inputs)
  RowsView last_logits_;  // the latest extend's logits (the roots' children)
  // Per-step scratch (grown, never shrunk).
  std::span<const int> active_;  // the sequences of the propose call
  std::vector<SeqChunk> chunks_;
  std::vector<int> which_, rows_, input_rows_;
  std::vector<KvCache*> caches_;
};

}  // namespace specrun
