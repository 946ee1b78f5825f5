// The model-free parts of the drafters: the n-gram lookup, the EAGLE-2/3 dynamic tree builder
// (its selection checked against a brute-force reading of docs/reference.md, "EAGLE-2 dynamic
// draft trees") and the tree loop the drafters share (TreeGrower, over a fake level scorer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "model/kv_cache.h"
#include "spec/ngram_drafter.h"
#include "spec/rng.h"
#include "spec/token_ops.h"
#include "spec/tree_builder.h"
#include "spec/verifier.h"

using specrun::NgramDrafter;
using specrun::TreeBuilder;

namespace {

std::vector<std::int32_t> lookup(const std::vector<std::int32_t>& tokens, int min_n, int max_n,
                                 int k) {
  std::vector<std::int32_t> out = {99};  // must be cleared
  NgramDrafter::lookup(tokens, min_n, max_n, k, out);
  return out;
}

}  // namespace

TEST(NgramLookup, ProposesTheContinuationOfTheMostRecentOccurrence) {
  // Suffix [5 6] occurs at 1 (followed by 7 8 9) and at 6 (followed by 1 2): the latest wins.
  const std::vector<std::int32_t> t = {4, 5, 6, 7, 8, 9, 5, 6, 1, 2, 3, 5, 6};
  EXPECT_EQ(lookup(t, 1, 2, 3), (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(lookup(t, 1, 2, 1), (std::vector<std::int32_t>{1}));
}

TEST(NgramLookup, LongestSuffixFirst) {
  // n = 3: [1 2 3] occurs once at 0 (followed by 10); n = 2 [2 3] most recently at 5 (then 20).
  const std::vector<std::int32_t> t = {1, 2, 3, 10, 11, 2, 3, 20, 1, 2, 3};
  EXPECT_EQ(lookup(t, 1, 3, 2), (std::vector<std::int32_t>{10, 11}));
  EXPECT_EQ(lookup(t, 1, 2, 2), (std::vector<std::int32_t>{20, 1}));
}

TEST(NgramLookup, RespectsMinimumAndClipsAtTheEnd) {
  const std::vector<std::int32_t> t = {7, 1, 8, 2, 9, 1};
  EXPECT_EQ(lookup(t, 1, 3, 4), (std::vector<std::int32_t>{8, 2, 9, 1}));
  EXPECT_TRUE(lookup(t, 2, 3, 4).empty());  // no earlier [9 1] or [2 9 1]
  // A periodic text: the match overlaps the suffix and the continuation stops at the end.
  const std::vector<std::int32_t> p = {1, 2, 1, 2, 1, 2};
  EXPECT_EQ(lookup(p, 1, 2, 8), (std::vector<std::int32_t>{1, 2}));
  EXPECT_TRUE(lookup({3}, 1, 2, 4).empty());
  EXPECT_TRUE(lookup({}, 1, 2, 4).empty());
}

namespace {

// A deterministic "draft model": the log-probabilities of the vocabulary after `prev`.
constexpr int kVocab = 12;
std::vector<float> logprobs_after(int prev, std::uint64_t salt) {
  std::vector<double> x(kVocab);
  double sum = 0;
  for (int t = 0; t < kVocab; ++t) {
    x[t] = std::exp(3.0 * specrun::uniform(salt, prev, t, specrun::RandPurpose::kTargetSample));
    sum += x[t];
  }
  std::vector<float> lp(kVocab);
  for (int t = 0; t < kVocab; ++t) lp[t] = static_cast<float>(std::log(x[t] / sum));
  return lp;
}

void top_k(const std::vector<float>& lp, int k, std::vector<std::int32_t>& ids,
           std::vector<float>& vals) {
  std::vector<int> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lp[a] > lp[b]; });
  for (int j = 0; j < k; ++j) {
    ids.push_back(order[j]);
    vals.push_back(lp[order[j]]);
  }
}

// Runs the builder with the model above; `path_score` receives every selected node's
// cumulative score recomputed from its path.
specrun::DraftTree build(int top_k_, int depth, int nodes, std::uint64_t salt) {
  TreeBuilder b;
  b.start(top_k_, depth, nodes);
  std::vector<std::int32_t> ids;
  std::vector<float> vals;
  top_k(logprobs_after(0, salt), top_k_, ids, vals);
  b.root(ids, vals);
  while (!b.frontier().empty()) {
    ids.clear();
    vals.clear();
    for (int c : b.frontier()) top_k(logprobs_after(b.token(c), salt), top_k_, ids, vals);
    b.expand(ids, vals);
  }
  specrun::DraftTree tree;
  b.finish(tree);
  return tree;
}

// Brute force: all candidates EAGLE-2 creates (level 1: the root's top-k; level d + 1: the
// top-k children of each of the k best level-d candidates), then the `nodes` best scores.
std::multiset<double, std::greater<>> reference_scores(int k, int depth, int nodes,
                                                       std::uint64_t salt) {
  struct C {
    int token;
    double score;
  };
  std::vector<C> all, level;
  std::vector<std::int32_t> ids;
  std::vector<float> vals;
  top_k(logprobs_after(0, salt), k, ids, vals);
  for (int j = 0; j < k; ++j) level.push_back({ids[j], vals[j]});
  for (int d = 1;; ++d) {
    all.insert(all.end(), level.begin(), level.end());
    if (d == depth) break;
    std::vector<C> best = level;
    std::stable_sort(best.begin(), best.end(),
                     [](const C& a, const C& b) { return a.score > b.score; });
    best.resize(std::min<std::size_t>(k, best.size()));
    level.clear();
    for (const C& parent : best) {
      ids.clear();
      vals.clear();
      top_k(logprobs_after(parent.token, salt), k, ids, vals);
      for (int j = 0; j < k; ++j) level.push_back({ids[j], parent.score + vals[j]});
    }
  }
  std::vector<double> scores;
  for (const C& c : all) scores.push_back(c.score);
  std::sort(scores.begin(), scores.end(), std::greater<>());
  scores.resize(std::min<std::size_t>(nodes, scores.size()));
  return {scores.begin(), scores.end()};
}

}  // namespace

TEST(TreeBuilder, SelectsTheBestScoredNodesWithParentsFirst) {
  struct Shape {
    int top_k, depth, nodes;
  };
  for (const Shape s : {Shape{4, 5, 15}, Shape{8, 6, 31}, Shape{2, 3, 4}, Shape{3, 1, 3},
                        Shape{3, 4, 200}, Shape{1, 6, 6}}) {
    for (std::uint64_t salt : {1u, 2u, 3u}) {
      SCOPED_TRACE(testing::Message() << "top_k " << s.top_k << " depth " << s.depth << " nodes "
                                      << s.nodes << " salt " << salt);
      const specrun::DraftTree tree = build(s.top_k, s.depth, s.nodes, salt);
      const auto expected = reference_scores(s.top_k, s.depth, s.nodes, salt);
      ASSERT_EQ(tree.size(), static_cast<int>(expected.size()));
      specrun::check_tree({tree.tokens.data(), tree.parents.data(), tree.size()}, s.depth, "test");
      // Recompute every node's score from its path and compare the multisets.
      std::multiset<double, std::greater<>> got;
      std::vector<double> score(tree.size());
      for (int i = 0; i < tree.size(); ++i) {
        const int p = tree.parents[i];
        ASSERT_LT(p, i);
        const int prev = p < 0 ? 0 : tree.tokens[p];
        score[i] = (p < 0 ? 0.0 : score[p]) + logprobs_after(prev, salt)[tree.tokens[i]];
        got.insert(score[i]);
      }
      auto a = got.begin();
      for (auto e = expected.begin(); e != expected.end(); ++e, ++a) EXPECT_NEAR(*a, *e, 1e-9);
      if (s.top_k == 1) {
        EXPECT_TRUE(tree.is_chain());
      }
    }
  }
}

TEST(TreeBuilder, ChainOfTopOneIsTheGreedyContinuation) {
  const specrun::DraftTree tree = build(1, 5, 5, 7);
  ASSERT_EQ(tree.size(), 5);
  int prev = 0;
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> lp = logprobs_after(prev, 7);
    const int best = static_cast<int>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    EXPECT_EQ(tree.tokens[i], best);
    EXPECT_EQ(tree.parents[i], i - 1);
    prev = best;
  }
}

namespace {

// A KvStore for caches that hold no keys or values (the grower only reads their lengths).
class NoStore final : public specrun::KvStore {
 public:
  void release(int) override {}
};

// A level scorer over logprobs_after: a sequence's root scores as token 0, a node as its token;
// sequence i uses salts[i]. It checks what the grower hands it: each node's parent slot (tree
// attention) holds the parent's token, and parent_rows name the rows the parents were scored at.
class FakeScorer final : public specrun::LevelScorer {
 public:
  FakeScorer(std::vector<std::uint64_t> salts, std::vector<specrun::KvCache*> caches)
      : salts_(std::move(salts)), caches_(std::move(caches)), slot_token_(caches_.size()) {
    for (std::size_t i = 0; i < caches_.size(); ++i)
      slot_token_[i].assign(caches_[i]->length(), -1);  // the committed tokens
  }

  specrun::RowsView score_roots(std::span<const int> growing, std::vector<int>& rows) override {
    logits_.clear();
    row_token_.clear();
    for (int i : growing) {
      // One token fed before the root, as the model drafter does: the root is the last slot.
      const std::int32_t fed = 0;
      caches_[i]->advance(1);
      slot_token_[i].push_back(fed);
      add_row(i, fed);
      rows.push_back(static_cast<int>(row_token_.size()) - 1);
    }
    return view();
  }

  specrun::RowsView score_level(const specrun::TreeLevel& level) override {
    const std::vector<std::int32_t> previous = row_token_;
    logits_.clear();
    row_token_.clear();
    ++levels;
    for (std::size_t r = 0, at = 0; r < level.seqs.size(); ++r) {
      const int i = level.seqs[r];
      const specrun::SeqChunk& c = level.chunks[r];
      EXPECT_EQ(c.cache, caches_[i]);
      c.cache->check_parents(c.parents, c.n_tokens);
      for (int j = 0; j < c.n_tokens; ++j, ++at) {
        const int parent_slot = c.parents[j];
        const std::int32_t parent_token = slot_token_[i][parent_slot];
        const int parent_row = level.parent_rows[at];
        if (parent_row < 0)
          EXPECT_EQ(parent_slot, static_cast<int>(slot_token_[i].size()) - 1) << "the root's slot";
        else
          EXPECT_EQ(previous.at(parent_row), parent_token) << "parent row " << parent_row;
        add_row(i, c.tokens[j]);
      }
      c.cache->advance(c.n_tokens, c.parents);
      slot_token_[i].insert(slot_token_[i].end(), c.tokens, c.tokens + c.n_tokens);
    }
    return view();
  }
  int levels = 0;

 private:
  void add_row(int i, std::int32_t token) {
    const std::vector<float> lp = logprobs_after(token, salts_[i]);
    logits_.insert(logits_.end(), lp.begin(), lp.end());
    row_token_.push_back(token);
  }
  specrun::RowsView view() const {
    return {specrun::BackendKind::kCpu, logits_.data(), static_cast<int>(row_token_.size()),
            kVocab};
  }
  std::vector<std::uint64_t> salts_;
  std::vector<specrun::KvCache*> caches_;
  std::vector<std::vector<std::int32_t>> slot_token_;  // per sequence, per cache slot
  std::vector<float> logits_;
  std::vector<std::int32_t> row_token_;
};

// The tree a single TreeBuilder makes for one sequence, driven by hand over the same top-k, its
// ids mapped by to_target (when not empty).
specrun::DraftTree reference_tree(specrun::TokenOps& ops, int k, specrun::ProposalLimit limit,
                                  std::uint64_t salt, std::span<const std::int32_t> to_target) {
  TreeBuilder b;
  b.start(k, limit.depth, limit.nodes);
  auto top = [&](const std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& ids,
                 std::vector<float>& lp) {
    std::vector<float> logits;
    for (std::int32_t t : tokens) {
      const std::vector<float> row = logprobs_after(t, salt);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    std::vector<int> rows(tokens.size());
    std::iota(rows.begin(), rows.end(), 0);
    ids.resize(tokens.size() * k);
    lp.resize(ids.size());
    ops.top_k({specrun::BackendKind::kCpu, logits.data(), static_cast<int>(tokens.size()), kVocab},
              rows, k, ids, lp);
    if (!to_target.empty())
      for (std::int32_t& id : ids) id = to_target[id];
  };
  std::vector<std::int32_t> ids;
  std::vector<float> lp;
  specrun::DraftTree tree;
  if (limit.depth <= 0 || limit.nodes <= 0) {
    b.finish(tree);
    return tree;
  }
  top({0}, ids, lp);
  b.root(ids, lp);
  while (!b.frontier().empty()) {
    std::vector<std::int32_t> tokens;
    for (int c : b.frontier()) tokens.push_back(b.token(c));
    top(tokens, ids, lp);
    b.expand(ids, lp);
  }
  b.finish(tree);
  return tree;
}

}  // namespace

// The tree loop every tree-growing drafter shares: for a batch (a sequence that does not draft,
// one with no room left, different limits), each sequence's tree is the one its own TreeBuilder
// selects, grown in one scorer call per level with correct tree-attention parents and parent
// rows; the ids go through the drafter's id map.
TEST(TreeGrower, GrowsEachSequencesTreeOneLevelPerScorerCall) {
  auto ops = specrun::make_token_ops(specrun::BackendKind::kCpu, nullptr);
  NoStore store;
  const int k = 3;
  const std::vector<specrun::ProposalLimit> limits = {{8, 4}, {5, 2}, {8, 4}, {0, 0}, {12, 5}};
  const std::vector<std::uint64_t> salts = {1, 2, 3, 4, 5};
  std::vector<std::unique_ptr<specrun::KvCache>> owned;
  std::vector<specrun::KvCache*> caches;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    owned.push_back(std::make_unique<specrun::KvCache>(&store, static_cast<int>(i), 64, 64));
    owned.back()->advance(3 + static_cast<int>(i));           // committed tokens, never read
    caches.push_back(i == 2 ? nullptr : owned.back().get());  // sequence 2 does not draft
  }
  // An id map (a permutation) applied to every top-k id, as EAGLE-3's d2t.
  std::vector<std::int32_t> to_target(kVocab);
  for (int t = 0; t < kVocab; ++t) to_target[t] = (5 * t + 3) % kVocab;
  std::vector<specrun::KvCache*> all(owned.size());
  for (std::size_t i = 0; i < owned.size(); ++i) all[i] = owned[i].get();
  specrun::TreeGrower grower;  // reused: its scratch from the first run must not leak
  for (const bool mapped : {false, true}) {
    const std::span<const std::int32_t> map =
        mapped ? std::span<const std::int32_t>(to_target) : std::span<const std::int32_t>{};
    for (std::size_t i = 0; i < owned.size(); ++i) owned[i]->truncate(3 + static_cast<int>(i));
    FakeScorer scorer(salts, all);
    std::vector<specrun::DraftTree> out(limits.size());
    for (auto& t : out) t.add(99, -1);  // must be cleared
    grower.grow(*ops, k, caches, limits, scorer, map, out);
    EXPECT_EQ(scorer.levels, 5 - 1) << "one scorer call per level below the first";
    for (std::size_t i = 0; i < limits.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "sequence " << i << (mapped ? ", mapped" : ""));
      const specrun::DraftTree want =
          i == 2 ? specrun::DraftTree{} : reference_tree(*ops, k, limits[i], salts[i], map);
      EXPECT_EQ(out[i].tokens, want.tokens);
      EXPECT_EQ(out[i].parents, want.parents);
      EXPECT_EQ(out[i].q_row, -1);
      EXPECT_LE(out[i].size(), limits[i].nodes);
    }
  }
}
