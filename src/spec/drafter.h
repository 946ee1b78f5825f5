// The drafter seam: everything that proposes tokens for the target to verify (a small draft
// model, an EAGLE head, n-gram lookup, ...) implements Drafter, and the engine's speculative
// step talks only to this interface. A drafter keeps its own state per sequence (caches,
// features), proposes a token tree per step (a chain being the special case) and is told what
// the target accepted.
//
// Sampling (temperature > 0): a drafter that samples its proposals keeps the distribution each
// node was drawn from in the TokenOps draft store (TokenOps::sample_and_keep) and says where
// (DraftTree::q_row), so that verification stays lossless. A deterministic drafter (top-k tree,
// n-gram) keeps none (q_row = -1) and needs a verification rule that does not use q.
//
// Tensor parallelism, the rank-agreement rule: every rank of a tp group runs the drafter, and the
// engine calls each method with the same arguments on every rank. The engine verifies tp rank
// 0's proposals: right after propose it broadcasts them (tokens, parents, q_row) over the group,
// replacing the other ranks' `out`. So a drafter's proposals need not be bitwise equal across
// ranks, and a drafter never communicates to agree on them; what the other ranks proposed is
// dropped, and `accepted` tells every rank the verdicts on rank 0's trees. (A drafter split over
// the group, a sharded draft model or head, communicates inside its own forward passes: its
// logits are gathered, the same bytes on every rank.) tests/mpi/test_decoder.cpp's
// Decoder.RanksVerifyRankZerosProposals holds the engine to this.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "config/draft_shape.h"
#include "model/language_model.h"
#include "spec/rng.h"
#include "spec/sampling.h"
#include "spec/verifier.h"

namespace specrun {

// One sequence of the batch as a drafter sees it. `tokens` (prompt + every token committed so
// far) is owned by the engine and grows as tokens are committed; it stays valid until
// end_batch.
struct DraftSequence {
  const std::vector<std::int32_t>* tokens = nullptr;
  int prompt_len = 0;
  int capacity = 0;  // the most tokens the sequence may hold (prompt + max new tokens)
  SeqRandKey key;    // the sequence's random stream (positions key the draws)
};

// A proposal: nodes in order, parents before children. parents[i] is the index of node i's
// parent, or -1 for a child of the root (the sequence's last committed token). A chain of k
// tokens has parents -1, 0, 1, ..., k - 2.
struct DraftTree {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> parents;
  int q_row = -1;  // sampling drafters: node i's distribution is draft-store row q_row + i

  int size() const { return static_cast<int>(tokens.size()); }
  void clear() {
    tokens.clear();
    parents.clear();
    q_row = -1;
  }
  // Appends a node; parent -1 is the root.
  void add(std::int32_t token, std::int32_t parent) {
    tokens.push_back(token);
    parents.push_back(parent);
  }
  bool is_chain() const {
    for (int i = 0; i < size(); ++i)
      if (parents[i] != i - 1) return false;
    return true;
  }
};

// Hidden states the target computed for one sequence (when the drafter asked for them,
// Drafter::target_capture): the captured layers of consecutive positions first_position,
// first_position + 1, ... of the sequence, at rows `rows` of TargetFeatures::hidden.
struct SeqFeatures {
  int first_position = 0;
  std::span<const int> rows;
};
struct TargetFeatures {
  RowsView hidden;                    // [*, capture ids x hidden], on the target's backend
  std::span<const SeqFeatures> seqs;  // parallel to the call's sequences
};

// The decode options every drafter may need (decode.*). ProposalLimit is in draft_shape.h.
struct DraftOptions {
  SamplingParams sampling;  // temperature <= 0: greedy
  DraftShape shape;         // chain or tree, and their sizes
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // The target layers whose hidden states this drafter needs (LanguageModel capture ids, in
  // the order wanted), or none. The engine captures them in the target's prefill and verify
  // passes and hands them over in begin_batch and accepted.
  virtual std::span<const int> target_capture() const { return {}; }

  // A new batch: its sequences, in batch order (the index of a sequence in `seqs` names it in
  // the calls below). Called after the target's prefill and its first token, before the first
  // propose; features: the prompts' positions (nullptr when none were asked for).
  virtual void begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures* features) = 0;

  // Proposes for the sequences `active` (indices into the batch): for active[i] at most
  // limits[i].nodes nodes on paths of at most limits[i].depth tokens, into out[i] (cleared by
  // the drafter). Limits may be 0 (near max_new_tokens). On tp ranks other than 0, out is then
  // replaced by rank 0's proposals (the rank-agreement rule above).
  virtual void propose(std::span<const int> active, std::span<const ProposalLimit> limits,
                       std::span<DraftTree> out) = 0;

  // What the target accepted for each of the sequences of the last propose: verdicts[i].accepted
  // nodes of out[i] along verdicts[i].path (node indices from the root), then the token
  // emitted after them. Called after the engine has appended the accepted tokens and that token
  // to the sequences' `tokens`. features (when asked for): the positions the target committed
  // in this step (its uncommitted tokens, then the accepted nodes).
  virtual void accepted(std::span<const int> active, std::span<const TreeVerdict> verdicts,
                        const TargetFeatures* features) = 0;

  // The batch is done; per-sequence state may go.
  virtual void end_batch() = 0;
};

}  // namespace specrun
