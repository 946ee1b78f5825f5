// The shape of a speculative step's proposal (decode.draft_len, tree_top_k, tree_depth,
// tree_nodes) and the limits derived from it, defined once: the job file's [decode] section
// (JobConfig), the engine's DecodeOptions and the drafters' DraftOptions all embed this one
// value, so its defaults and its rules exist once. A chain (tree_top_k = 1) is draft_len tokens;
// a tree (tree_top_k > 1) is EAGLE-2's dynamic tree (spec/tree_builder.h).
#pragma once

#include <algorithm>

namespace specrun {

// How large one proposal may be: drafted nodes (the root, the last committed token, excluded)
// and tokens on its longest path.
struct ProposalLimit {
  int nodes = 0;
  int depth = 0;
};

struct DraftShape {
  int draft_len = 4;    // a chain's length (k), when tree_top_k is 1
  int tree_top_k = 1;   // children per expanded node; 1: a chain of draft_len
  int tree_depth = 5;   // trees: most drafted tokens on one path
  int tree_nodes = 15;  // trees: drafted nodes, root excluded

  bool tree() const { return tree_top_k > 1; }
  // The most nodes a proposal may have (the verify window beyond the root).
  int max_nodes() const { return tree() ? tree_nodes : draft_len; }
  // The longest path a proposal may have: the length of accepted_per_position.
  int max_depth() const { return tree() ? tree_depth : draft_len; }
  // The most nodes a drafter growing a tree level by level forwards in one proposal (every
  // level's frontier: top_k nodes per level), the room its caches need beyond the sequence.
  int grown_nodes() const { return tree_top_k * max_depth(); }

  // The limit of a sequence that may still take `tokens_left` tokens besides the one every step
  // emits: paths no longer than that, and no nodes at all when it is 0; a chain's nodes are its
  // depth, a tree keeps its node budget.
  ProposalLimit limit(int tokens_left) const {
    const int depth = std::max(std::min(max_depth(), tokens_left), 0);
    return ProposalLimit{depth == 0 ? 0 : tree() ? max_nodes() : depth, depth};
  }

  bool operator==(const DraftShape&) const = default;
};

}  // namespace specrun
