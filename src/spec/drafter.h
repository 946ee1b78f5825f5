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
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "spec/rng.h"

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

class Drafter {
 public:
  virtual ~Drafter() = default;

  // A new batch: its sequences, in batch order (the index of a sequence in `seqs` names it in
  // the calls below). Called after the target's prefill, before the first propose. All ranks
  // of the tp group call every method with the same arguments.
  virtual void begin_batch(std::span<const DraftSequence> seqs) = 0;

  // Proposes for the sequences `active` (indices into the batch): at most max_nodes[i] nodes
  // for active[i], into out[i] (cleared by the drafter). max_nodes[i] may be 0.
  virtual void propose(std::span<const int> active, std::span<const int> max_nodes,
                       std::span<DraftTree> out) = 0;

  // What the target accepted for each of the sequences of the last propose: accepted[i] nodes
  // of out[i], a path from the root (for a chain, its first accepted[i] tokens). Called after
  // the engine has appended the emitted tokens to the sequences' `tokens`.
  virtual void accepted(std::span<const int> active, std::span<const int> accepted) = 0;

  // The batch is done; per-sequence state may go.
  virtual void end_batch() = 0;
};

}  // namespace specrun
