#include "spec/tree_builder.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

void TreeBuilder::start(int top_k, int depth, int nodes) {
  SPEC_CHECK(top_k >= 1 && depth >= 0 && nodes >= 0,
             "tree builder: top_k " << top_k << ", depth " << depth << ", nodes " << nodes);
  top_k_ = top_k;
  depth_ = depth;
  nodes_ = nodes;
  cand_.clear();
  frontier_.clear();
}

void TreeBuilder::add_children(int parent, std::span<const std::int32_t> ids,
                               std::span<const float> lp) {
  const double base = parent < 0 ? 0.0 : cand_[parent].score;
  const int depth = parent < 0 ? 1 : cand_[parent].depth + 1;
  for (int j = 0; j < top_k_; ++j)
    cand_.push_back(Candidate{ids[j], parent, base + static_cast<double>(lp[j]), depth});
}

// The new frontier: the top_k best of the candidates made since `from` (score, then creation
// order), if they may still have children.
void TreeBuilder::pick_frontier(std::size_t from) {
  frontier_.clear();
  if (cand_.empty() || cand_.back().depth >= depth_) return;
  order_.clear();
  for (std::size_t c = from; c < cand_.size(); ++c) order_.push_back(static_cast<int>(c));
  const std::size_t k = std::min<std::size_t>(top_k_, order_.size());
  std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(),
                    [this](int a, int b) {
                      return cand_[a].score > cand_[b].score ||
                             (cand_[a].score == cand_[b].score && a < b);
                    });
  frontier_.assign(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
}

void TreeBuilder::root(std::span<const std::int32_t> ids, std::span<const float> logprobs) {
  SPEC_CHECK(ids.size() >= static_cast<std::size_t>(top_k_) && logprobs.size() >= ids.size(),
             "tree builder: " << ids.size() << " children of the root for top_k " << top_k_);
  if (depth_ < 1 || nodes_ < 1) return;
  add_children(-1, ids, logprobs);
  pick_frontier(0);
}

void TreeBuilder::expand(std::span<const std::int32_t> ids, std::span<const float> logprobs) {
  SPEC_CHECK(ids.size() >= frontier_.size() * top_k_ && logprobs.size() >= ids.size(),
             "tree builder: " << ids.size() << " children for a frontier of " << frontier_.size());
  const std::size_t from = cand_.size();
  for (std::size_t i = 0; i < frontier_.size(); ++i)
    add_children(frontier_[i], ids.subspan(i * top_k_, top_k_),
                 logprobs.subspan(i * top_k_, top_k_));
  pick_frontier(from);
}

void TreeBuilder::finish(DraftTree& out, std::vector<int>* node_of) {
  out.clear();
  order_.resize(cand_.size());
  for (std::size_t c = 0; c < cand_.size(); ++c) order_[c] = static_cast<int>(c);
  const std::size_t n = std::min<std::size_t>(nodes_, order_.size());
  std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), order_.end(),
                    [this](int a, int b) {
                      return cand_[a].score > cand_[b].score ||
                             (cand_[a].score == cand_[b].score && a < b);
                    });
  order_.resize(n);
  std::sort(order_.begin(), order_.end());  // creation order: parents first
  index_.assign(cand_.size(), -1);
  if (node_of != nullptr) node_of->clear();
  for (int c : order_) {
    const int parent = cand_[c].parent;
    SPEC_CHECK(parent < 0 || index_[parent] >= 0,
               "tree builder: a selected node's parent was not selected");
    index_[c] = out.size();
    out.add(cand_[c].token, parent < 0 ? -1 : index_[parent]);
    if (node_of != nullptr) node_of->push_back(c);
  }
}

}  // namespace specrun
