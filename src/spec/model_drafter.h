// draft.kind = "model": a small language model of the target's vocabulary drafts
//  - a chain of up to k tokens autoregressively (decode.tree_top_k = 1; greedy: its argmax;
//    sampling: a sample of its transformed distribution, kept for lossless verification), or
//  - a dynamic tree (tree_top_k > 1, spec/tree_builder.h: the top-k children of the best nodes
//    per depth, scored by cumulative log-probability; one tree-attention forward per depth).
// Its KV caches follow the committed sequence: each step it first feeds what it has not seen
// (usually the last emitted token, two after a step that accepted every draft); after
// verification it rolls back to the accepted prefix (a chain) or to the committed tokens (a
// tree: the accepted ones are fed again in the next step).
//
// Placement: replicated (a whole copy on every rank, no communication: every rank computes the
// same proposals) or sharded like the target (its ranks agree through tp rank 0).
#pragma once

#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "model/language_model.h"
#include "spec/drafter.h"
#include "spec/sampling.h"
#include "spec/token_ops.h"
#include "spec/tree_builder.h"

namespace specrun {

class ModelDrafter final : public Drafter {
 public:
  // draft: the draft model (its vocabulary must be the target's: target_vocab; shared, so that
  // tests can run several drafters on one loaded model); ops: the decisions of its backend;
  // agree: the tp communicator when the draft is sharded, nullptr when replicated. All of them
  // must outlive the drafter.
  ModelDrafter(std::shared_ptr<LanguageModel> draft, int target_vocab, TokenOps& ops,
               Communicator* agree, const DraftOptions& options);

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
    // Tree mode: the builder, each forwarded candidate's cache slot, the root's slot.
    TreeBuilder builder;
    std::vector<int> slot_of;
    int root_slot = 0;
  };
  void propose_chain(std::span<const int> active, std::span<const ProposalLimit> limits,
                     std::span<DraftTree> out);
  void propose_tree(std::span<const int> active, std::span<const ProposalLimit> limits,
                    std::span<DraftTree> out);
  // Feeds each sequence of `feeding` what the draft has not seen (a chain), last rows' logits.
  ForwardResult feed_new_tokens(std::span<const int> active);
  // Top-k ids and log-probabilities of logits rows 0..m-1 into topk_ids_ / topk_lp_, agreed
  // through tp rank 0 when sharded.
  void top_k(const RowsView& logits, int m, int k);
  void agree(void* data, std::size_t bytes);

  std::shared_ptr<LanguageModel> draft_;
  TokenOps& ops_;
  Communicator* agree_;
  DraftOptions options_;
  std::vector<Seq> seqs_;
  // Per-step scratch (grown, never shrunk).
  std::vector<SeqChunk> chunks_;
  std::vector<int> drafting_, rows_, keep_at_;
  std::vector<double> u_;
  std::vector<std::int32_t> picked_, node_tokens_, node_parents_, topk_ids_;
  std::vector<float> topk_lp_;
};

}  // namespace specrun
