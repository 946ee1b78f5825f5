// The dynamic draft tree of EAGLE-2/3 (docs/reference.md, "EAGLE-2 dynamic draft trees"), for any
// drafter that can score continuations: the root's top-k children, then at every further depth
// the top-k children of each of the k best nodes so far, all with cumulative log-probability
// scores; at the end the `nodes` best candidates of all depths, in creation order (so parents
// come before their children). With top_k = 1 it is a chain.
//
// Ties are broken by creation order (an earlier candidate ranks first), which also guarantees
// that a selected node's parent is selected: a child's score is its parent's plus a
// log-probability <= 0 and it is created later.
//
// Use per sequence and step: start(), then root(children of the root), then, while
// frontier() is not empty and depth remains, expand(the frontier's children); then finish().
// TreeGrower (below) does that for a batch of sequences, level by level, for any drafter that
// scores a level with one forward pass (a LevelScorer).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/language_model.h"
#include "spec/drafter.h"
#include "spec/token_ops.h"

namespace specrun {

class TreeBuilder {
 public:
  // top_k >= 1 children per expanded node, at most `depth` tokens on a path, `nodes` nodes.
  void start(int top_k, int depth, int nodes);

  // The root's top-k children: ids and log-probabilities (top_k of each, best first).
  void root(std::span<const std::int32_t> ids, std::span<const float> logprobs);
  // The candidates to expand next (indices), best first; empty when the depth is reached.
  std::span<const int> frontier() const { return frontier_; }
  // The children of frontier()[i] are ids/logprobs[i * top_k .. (i + 1) * top_k).
  void expand(std::span<const std::int32_t> ids, std::span<const float> logprobs);

  // The selected tree: tokens, parents (indices in the tree, -1 = root). `node_of` (optional)
  // receives, per tree node, its candidate index.
  void finish(DraftTree& out, std::vector<int>* node_of = nullptr);

  // A candidate's token, parent candidate (-1: the root) and depth (1 = under the root).
  int token(int c) const { return cand_[c].token; }
  int parent(int c) const { return cand_[c].parent; }
  int depth(int c) const { return cand_[c].depth; }

 private:
  struct Candidate {
    std::int32_t token;
    int parent;
    double score;
    int depth;
  };
  void add_children(int parent, std::span<const std::int32_t> ids, std::span<const float> lp);
  void pick_frontier(std::size_t from);

  int top_k_ = 1, depth_ = 1, nodes_ = 1;
  std::vector<Candidate> cand_;
  std::vector<int> frontier_, order_, index_;
};

// One level of every growing tree, as the grower hands it to the scorer: the frontier nodes of
// each sequence still growing, to be appended to that sequence's cache as tree nodes.
struct TreeLevel {
  std::span<const int> seqs;         // the sequences (indices into the grown batch)
  std::span<const SeqChunk> chunks;  // per sequence: its nodes' tokens and parent slots
  // Per node, in batch order: the row of the previous level's logits (and outputs) its parent
  // was scored at, or -1 for a child of the root (scored by score_roots).
  std::span<const int> parent_rows;
};

// What a tree-growing drafter supplies: the logits that score a level (ranked by top-k
// log-probability; ids mapped by the grower's `to_target`).
class LevelScorer {
 public:
  virtual ~LevelScorer() = default;
  // The logits of the roots' children for the sequences `growing` (indices into the batch); the
  // row of each, in order, into `rows`. May append to the sequences' caches (tokens fed before
  // the root): the root is the last slot of each cache afterwards.
  virtual RowsView score_roots(std::span<const int> growing, std::vector<int>& rows) = 0;
  // Appends the level's nodes to their caches (one tree-attention forward) and returns their
  // logits, one row per node in batch order (the rows TreeLevel::parent_rows refers to next).
  virtual RowsView score_level(const TreeLevel& level) = 0;
};

// EAGLE-2's dynamic trees for a batch of sequences, grown level by level, the same for every
// drafter (model_drafter, head_drafter: EAGLE-3 and MTP heads): the roots' top-k
// children, then one scorer call per level with every sequence's frontier (each node's parent
// slot in its cache, for tree attention), their top-k children, until no frontier is left; then
// each sequence's best `limits[i].nodes` candidates.
class TreeGrower {
 public:
  // caches[i]: the drafter's cache of sequence i (the levels are appended to it; the drafter
  // rolls it back afterwards), or nullptr when it proposes nothing; limits[i] its limits. The
  // trees go to out[i] (cleared). Top-k over the scorer's logits on `ops`; to_target maps its
  // ids to target ids (empty: the identity).
  void grow(TokenOps& ops, int top_k, std::span<KvCache* const> caches,
            std::span<const ProposalLimit> limits, LevelScorer& scorer,
            std::span<const std::int32_t> to_target, std::span<DraftTree> out);

 private:
  struct Tree {
    TreeBuilder builder;
    std::vector<int> slot_of, row_of;  // per forwarded candidate: cache slot, logits row
    int root_slot = 0;
  };
  void top_k(TokenOps& ops, const RowsView& logits, std::span<const int> rows, int k,
             std::span<const std::int32_t> to_target);

  // Per sequence of the batch (grown, never shrunk) and per-level scratch.
  std::vector<Tree> trees_;
  std::vector<int> growing_, rows_, parent_rows_;
  std::vector<SeqChunk> chunks_;
  std::vector<std::int32_t> tokens_, parents_, ids_;
  std::vector<float> logprobs_;
};

}  // namespace specrun
