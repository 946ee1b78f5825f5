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
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spec/drafter.h"

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

}  // namespace specrun
