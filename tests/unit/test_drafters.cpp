// The model-free parts of the drafters: the n-gram lookup and the EAGLE-2/3 dynamic tree
// builder (its selection checked against a brute-force reading of docs/reference.md, "EAGLE-2
// dynamic draft trees").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "spec/ngram_drafter.h"
#include "spec/rng.h"
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
