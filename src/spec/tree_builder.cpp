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

void TreeGrower::top_k(TokenOps& ops, const RowsView& logits, std::span<const int> rows, int k,
                       std::span<const std::int32_t> to_target) {
  ids_.resize(rows.size() * k);
  logprobs_.resize(ids_.size());
  ops.top_k(logits, rows, k, ids_, logprobs_);
  if (!to_target.empty())
    for (std::int32_t& id : ids_) id = to_target[id];
}

void TreeGrower::grow(TokenOps& ops, int k, std::span<KvCache* const> caches,
                      std::span<const ProposalLimit> limits, LevelScorer& scorer,
                      std::span<const std::int32_t> to_target, std::span<DraftTree> out) {
  const std::size_t n = caches.size();
  if (trees_.size() < n) trees_.resize(n);
  growing_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    Tree& t = trees_[i];
    t.builder.start(k, limits[i].depth, limits[i].nodes);
    t.slot_of.clear();
    t.row_of.clear();
    if (caches[i] != nullptr && limits[i].depth > 0 && limits[i].nodes > 0)
      growing_.push_back(static_cast<int>(i));
  }
  // The roots' children.
  if (!growing_.empty()) {
    rows_.clear();
    const RowsView logits = scorer.score_roots(growing_, rows_);
    SPEC_CHECK(rows_.size() == growing_.size(),
               "tree grower: " << rows_.size() << " root rows for " << growing_.size() << " trees");
    top_k(ops, logits, rows_, k, to_target);
    for (std::size_t r = 0; r < growing_.size(); ++r) {
      Tree& t = trees_[growing_[r]];
      t.root_slot = caches[growing_[r]]->length() - 1;
      t.builder.root(std::span(ids_).subspan(r * k, k), std::span(logprobs_).subspan(r * k, k));
    }
  }
  // Level by level: every frontier in one scorer call, then their children.
  while (true) {
    chunks_.clear();
    tokens_.clear();
    parents_.clear();
    parent_rows_.clear();
    growing_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      Tree& t = trees_[i];
      if (t.builder.frontier().empty()) continue;
      growing_.push_back(static_cast<int>(i));
      const int length = caches[i]->length();
      int j = 0;  // the node's place in this sequence's chunk
      for (int c : t.builder.frontier()) {
        if (t.slot_of.size() <= static_cast<std::size_t>(c)) {
          t.slot_of.resize(c + 1, -1);
          t.row_of.resize(c + 1, -1);
        }
        const int parent = t.builder.parent(c);
        t.slot_of[c] = length + j++;
        tokens_.push_back(t.builder.token(c));
        parents_.push_back(parent < 0 ? t.root_slot : t.slot_of[parent]);
        parent_rows_.push_back(parent < 0 ? -1 : t.row_of[parent]);
      }
    }
    if (growing_.empty()) break;
    for (std::size_t r = 0, at = 0; r < growing_.size(); ++r) {
      const int i = growing_[r];
      const int count = static_cast<int>(trees_[i].builder.frontier().size());
      chunks_.push_back(SeqChunk{caches[i], tokens_.data() + at, count, parents_.data() + at});
      at += count;
    }
    const RowsView logits = scorer.score_level(TreeLevel{growing_, chunks_, parent_rows_});
    rows_.resize(tokens_.size());
    for (std::size_t r = 0; r < rows_.size(); ++r) rows_[r] = static_cast<int>(r);
    top_k(ops, logits, rows_, k, to_target);
    for (std::size_t r = 0, at = 0; r < growing_.size(); ++r) {
      Tree& t = trees_[growing_[r]];
      const std::size_t count = t.builder.frontier().size();
      for (std::size_t j = 0; j < count; ++j)
        t.row_of[t.builder.frontier()[j]] = static_cast<int>(at + j);
      t.builder.expand(std::span(ids_).subspan(at * k, count * k),
                       std::span(logprobs_).subspan(at * k, count * k));
      at += count;
    }
  }
  for (std::size_t i = 0; i < n; ++i) trees_[i].builder.finish(out[i]);
}

}  // namespace specrun
