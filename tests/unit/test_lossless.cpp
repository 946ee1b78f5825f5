// Statistical test that speculative sampling is lossless: the tokens it emits are distributed
// exactly as tokens sampled from the target alone. On an 8-token vocabulary, target p and draft
// q are fixed random "models" (next-token distributions that depend on the previous token). The
// full procedure (draft k tokens autoregressively from q with the counter RNG, verify against p,
// emit, repeat) is run for many prompts, and the empirical distribution of the first emitted
// tokens is compared with the exact target distribution by a chi-square test at p = 0.001.
// A deliberately wrong residual must fail the same test by a wide margin (the test has power).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <vector>

#include "spec/rng.h"
#include "spec/sampling.h"
#include "spec/verifier.h"

using specrun::RandPurpose;
using specrun::SamplingParams;
using specrun::SeqRandKey;

namespace {

constexpr int kVocab = 8;
constexpr int kPromptToken = 0;
constexpr int kTrials = 200'000;
constexpr std::uint64_t kSeed = 20240611;

// Upper 0.001 critical value of chi-square with df degrees of freedom, by the Wilson-Hilferty
// approximation (z_0.999 = 3.0902). Within 1% of the table for df >= 7, erring high (checked
// against table values below).
double chi2_critical_001(int df) {
  const double z = 3.090232306167813;
  const double h = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - h + z * std::sqrt(h), 3.0);
}

// A "model": row prev = the next-token distribution after token prev, after sampling transforms.
using Model = std::vector<std::vector<float>>;

// Random logits in [-spread, spread] from the counter RNG (fixed by `salt`); the draft mixes the
// target's logits with its own, so it agrees with the target often but not always.
std::vector<std::vector<float>> random_logits(std::uint64_t salt, double spread) {
  std::vector<std::vector<float>> logits(kVocab, std::vector<float>(kVocab));
  for (int prev = 0; prev < kVocab; ++prev) {
    for (int t = 0; t < kVocab; ++t) {
      const double u = specrun::uniform(salt, prev, t, RandPurpose::kTargetSample);
      logits[prev][t] = static_cast<float>(spread * (2.0 * u - 1.0));
    }
  }
  return logits;
}

Model make_model(const std::vector<std::vector<float>>& logits, const SamplingParams& params) {
  Model model(kVocab, std::vector<float>(kVocab));
  for (int prev = 0; prev < kVocab; ++prev) {
    specrun::logits_to_probs(logits[prev].data(), kVocab, params, model[prev].data());
  }
  return model;
}

struct ModelPair {
  Model target;
  Model draft;
};

ModelPair make_pair(const SamplingParams& params) {
  const auto target_logits = random_logits(1, 2.5);
  auto draft_logits = random_logits(2, 2.5);
  for (int prev = 0; prev < kVocab; ++prev) {
    for (int t = 0; t < kVocab; ++t) {
      draft_logits[prev][t] = 0.6f * target_logits[prev][t] + 0.6f * draft_logits[prev][t];
    }
  }
  return {make_model(target_logits, params), make_model(draft_logits, params)};
}

enum class Residual { kCorrect, kWrongFromP, kWrongFromQ };

// One speculative step's verification; the wrong variants share everything with the correct one
// except what is sampled after a rejection.
specrun::VerifyResult verify(const std::vector<int>& draft, int k, const std::vector<float>& q,
                             const std::vector<float>& p, const SeqRandKey& key, std::int64_t first,
                             Residual residual) {
  if (residual == Residual::kCorrect) {
    return specrun::verify_sampling(draft.data(), k, q.data(), p.data(), kVocab, key, first);
  }
  for (int i = 0; i < k; ++i) {
    const float* qi = q.data() + i * kVocab;
    const float* pi = p.data() + i * kVocab;
    const double u = key.uniform(first + i, RandPurpose::kAccept);
    if (!specrun::accept_draft_token(u, pi[draft[i]], qi[draft[i]])) {
      const double ur = key.uniform(first + i, RandPurpose::kResidual);
      const float* wrong = residual == Residual::kWrongFromP ? pi : qi;
      return {i, specrun::sample_from(wrong, kVocab, ur)};
    }
  }
  return {k, specrun::sample_from(p.data() + k * kVocab, kVocab,
                                  key.uniform(first + k, RandPurpose::kBonus))};
}

// Runs speculative decoding for one prompt until at least n tokens are emitted; returns them.
// Position 0 holds the prompt token; generated tokens start at position 1.
std::vector<int> speculative_generate(const ModelPair& models, int k, int n, const SeqRandKey& key,
                                      Residual residual, std::vector<int>* accepted_counts) {
  std::vector<int> sequence = {kPromptToken};
  std::vector<int> draft(k);
  std::vector<float> q(static_cast<std::size_t>(k) * kVocab);
  std::vector<float> p(static_cast<std::size_t>(k + 1) * kVocab);
  while (static_cast<int>(sequence.size()) - 1 < n) {
    const std::int64_t first = static_cast<std::int64_t>(sequence.size());
    int context = sequence.back();
    for (int i = 0; i < k; ++i) {
      const std::vector<float>& qi = models.draft[context];
      std::copy(qi.begin(), qi.end(), q.begin() + i * kVocab);
      const std::vector<float>& pi = models.target[context];
      std::copy(pi.begin(), pi.end(), p.begin() + i * kVocab);
      draft[i] = specrun::sample_from(qi.data(), kVocab,
                                      key.uniform(first + i, RandPurpose::kDraftSample));
      context = draft[i];
    }
    const std::vector<float>& last = models.target[context];
    std::copy(last.begin(), last.end(), p.begin() + k * kVocab);
    const specrun::VerifyResult r = verify(draft, k, q, p, key, first, residual);
    if (accepted_counts) ++(*accepted_counts)[r.accepted];
    for (int i = 0; i < r.accepted; ++i) sequence.push_back(draft[i]);
    sequence.push_back(r.token);
  }
  return std::vector<int>(sequence.begin() + 1, sequence.begin() + 1 + n);
}

struct ChiSquare {
  double statistic = 0.0;
  int df = 0;
  int impossible_hits = 0;  // draws in cells of exact probability 0
};

ChiSquare chi_square(const std::vector<long>& observed, const std::vector<double>& expected_prob,
                     long total) {
  ChiSquare result;
  int cells = 0;
  for (std::size_t c = 0; c < observed.size(); ++c) {
    if (expected_prob[c] == 0.0) {
      result.impossible_hits += static_cast<int>(observed[c]);
      continue;
    }
    const double e = expected_prob[c] * static_cast<double>(total);
    result.statistic += (observed[c] - e) * (observed[c] - e) / e;
    ++cells;
  }
  result.df = cells - 1;
  return result;
}

// Exact target distributions of the first tokens: joint of (t1, t2), marginals of t3 and t4.
struct Exact {
  std::vector<double> joint12 = std::vector<double>(kVocab * kVocab, 0.0);
  std::vector<double> marginal3 = std::vector<double>(kVocab, 0.0);
  std::vector<double> marginal4 = std::vector<double>(kVocab, 0.0);
};

Exact exact_target(const Model& target) {
  Exact ex;
  std::vector<double> m2(kVocab, 0.0);
  for (int a = 0; a < kVocab; ++a) {
    for (int b = 0; b < kVocab; ++b) {
      ex.joint12[a * kVocab + b] = double{target[kPromptToken][a]} * target[a][b];
      m2[b] += ex.joint12[a * kVocab + b];
    }
  }
  for (int b = 0; b < kVocab; ++b) {
    for (int c = 0; c < kVocab; ++c) ex.marginal3[c] += m2[b] * target[b][c];
  }
  for (int c = 0; c < kVocab; ++c) {
    for (int d = 0; d < kVocab; ++d) ex.marginal4[d] += ex.marginal3[c] * target[c][d];
  }
  return ex;
}

struct Outcome {
  ChiSquare joint12, marginal3, marginal4;
  std::vector<int> accepted_counts;
};

Outcome run_trials(const ModelPair& models, int k, Residual residual, std::uint64_t seed) {
  std::vector<long> joint(kVocab * kVocab, 0), m3(kVocab, 0), m4(kVocab, 0);
  Outcome out;
  out.accepted_counts.assign(k + 1, 0);
  for (int trial = 0; trial < kTrials; ++trial) {
    const SeqRandKey key{seed, static_cast<std::uint64_t>(trial)};
    const std::vector<int> t =
        speculative_generate(models, k, 4, key, residual, &out.accepted_counts);
    ++joint[t[0] * kVocab + t[1]];
    ++m3[t[2]];
    ++m4[t[3]];
  }
  const Exact ex = exact_target(models.target);
  out.joint12 = chi_square(joint, ex.joint12, kTrials);
  out.marginal3 = chi_square(m3, ex.marginal3, kTrials);
  out.marginal4 = chi_square(m4, ex.marginal4, kTrials);
  return out;
}

void expect_matches_target(const ChiSquare& c, const char* what) {
  ASSERT_GT(c.df, 0) << what;
  const double critical = chi2_critical_001(c.df);
  std::printf("  %-40s chi2 %8.2f  df %2d  critical(0.001) %7.2f\n", what, c.statistic, c.df,
              critical);
  EXPECT_LT(c.statistic, critical) << what << ": chi-square " << c.statistic << " with " << c.df
                                   << " df exceeds the p = 0.001 critical value " << critical;
  EXPECT_EQ(c.impossible_hits, 0) << what << ": tokens of target probability 0 were emitted";
}

void expect_rejection_was_exercised(const Outcome& o, int k) {
  // Both rejections and full acceptances must occur, or the test would not cover the residual
  // and the bonus token.
  long total = 0;
  for (int c : o.accepted_counts) total += c;
  EXPECT_GT(o.accepted_counts[0], total / 50) << "too few rejections at the first slot";
  EXPECT_GT(o.accepted_counts[k], total / 50) << "too few full acceptances (bonus tokens)";
}

}  // namespace

TEST(ChiSquareCritical, WilsonHilfertyMatchesTableValues) {
  // chi2.ppf(0.999, df) from statistical tables.
  const struct {
    int df;
    double table;
  } rows[] = {{7, 24.322}, {15, 37.697}, {27, 55.476}, {48, 84.037}, {63, 103.442}};
  for (const auto& row : rows) {
    const double approx = chi2_critical_001(row.df);
    EXPECT_GE(approx, row.table * 0.999) << "df " << row.df;
    EXPECT_LE(approx, row.table * 1.01) << "df " << row.df;
  }
}

TEST(Lossless, PlainTemperatureOneDraftThree) {
  const ModelPair models = make_pair(SamplingParams{1.0f, 0, 1.0f});
  const Outcome o = run_trials(models, 3, Residual::kCorrect, kSeed);
  expect_rejection_was_exercised(o, 3);
  expect_matches_target(o.joint12, "joint of tokens 1-2");
  expect_matches_target(o.marginal3, "marginal of token 3");
  expect_matches_target(o.marginal4, "marginal of token 4");
}

TEST(Lossless, DraftOneCoversBonusInsideTheJoint) {
  const ModelPair models = make_pair(SamplingParams{1.0f, 0, 1.0f});
  const Outcome o = run_trials(models, 1, Residual::kCorrect, kSeed + 1);
  expect_rejection_was_exercised(o, 1);
  expect_matches_target(o.joint12, "joint of tokens 1-2");
  expect_matches_target(o.marginal3, "marginal of token 3");
  expect_matches_target(o.marginal4, "marginal of token 4");
}

TEST(Lossless, TopKTopPAndTemperatureAppliedToBoth) {
  // Top-k 6 and top-p 0.9 at temperature 1.3: target and draft supports differ, so the draft
  // proposes tokens the target cannot produce (p = 0, always rejected) and the target has tokens
  // the draft never proposes (reached only through the residual).
  const ModelPair models = make_pair(SamplingParams{1.3f, 6, 0.9f});
  int draft_only = 0, target_only = 0;
  for (int prev = 0; prev < kVocab; ++prev) {
    for (int t = 0; t < kVocab; ++t) {
      draft_only += models.draft[prev][t] > 0 && models.target[prev][t] == 0;
      target_only += models.target[prev][t] > 0 && models.draft[prev][t] == 0;
    }
  }
  ASSERT_GT(draft_only, 0);
  ASSERT_GT(target_only, 0);
  const Outcome o = run_trials(models, 3, Residual::kCorrect, kSeed + 2);
  expect_rejection_was_exercised(o, 3);
  expect_matches_target(o.joint12, "joint of tokens 1-2 (top-k/top-p)");
  expect_matches_target(o.marginal3, "marginal of token 3 (top-k/top-p)");
  expect_matches_target(o.marginal4, "marginal of token 4 (top-k/top-p)");
}

TEST(Lossless, DraftEqualToTargetAcceptsEverything) {
  ModelPair models = make_pair(SamplingParams{1.0f, 0, 1.0f});
  models.draft = models.target;
  const Outcome o = run_trials(models, 3, Residual::kCorrect, kSeed + 3);
  EXPECT_EQ(o.accepted_counts[3],
            std::accumulate(o.accepted_counts.begin(), o.accepted_counts.end(), 0));
  expect_matches_target(o.joint12, "joint of tokens 1-2 (draft = target)");
  expect_matches_target(o.marginal4, "marginal of token 4 (draft = target)");
}

TEST(Lossless, WrongResidualFailsTheSameTest) {
  // Power check: after a rejection, sampling p itself (or q) instead of norm(max(0, p - q))
  // biases the output; the same test must reject it far beyond the critical value, with and
  // without top-k/top-p.
  for (const SamplingParams& params :
       {SamplingParams{1.0f, 0, 1.0f}, SamplingParams{1.3f, 6, 0.9f}}) {
    const ModelPair models = make_pair(params);
    for (Residual wrong : {Residual::kWrongFromP, Residual::kWrongFromQ}) {
      const Outcome o = run_trials(models, 3, wrong, kSeed);
      const double critical = chi2_critical_001(o.joint12.df);
      const char* what =
          wrong == Residual::kWrongFromP ? "wrong residual = p" : "wrong residual = q";
      std::printf("  %-26s top_k %d  chi2 %9.2f  df %2d  critical(0.001) %7.2f\n", what,
                  params.top_k, o.joint12.statistic, o.joint12.df, critical);
      EXPECT_GT(o.joint12.statistic, 10.0 * critical)
          << what << " (top_k " << params.top_k << "): chi-square " << o.joint12.statistic
          << " vs critical " << critical;
    }
  }
}

// ---- token trees ------------------------------------------------------------------------------
// The tree verifier (verify_tree_sampling_with) against trees of deterministic drafts: at every
// node the children are the draft model's top-k tokens after it, as an EAGLE or draft-model tree
// drafter builds them. The same chi-square test on the first four emitted tokens; its power is
// checked with the naive rule that tries each child in order with probability p(child) and falls
// back to sampling p itself (a rule that ignores that the tried children were already passed over).
namespace {

enum class TreeRule { kCorrect, kWrongSiblingsThenP };

// A full tree of branching `top_k` and `depth` under `context`: breadth-first, parents first.
struct Tree {
  std::vector<std::int32_t> tokens, parents;
};

Tree build_tree(const Model& draft, int context, int top_k, int depth) {
  Tree tree;
  std::vector<int> frontier = {-1};
  for (int level = 0; level < depth; ++level) {
    std::vector<int> next;
    for (int node : frontier) {
      const int after = node < 0 ? context : tree.tokens[node];
      std::vector<int> order(kVocab);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return draft[after][a] > draft[after][b]; });
      for (int j = 0; j < top_k; ++j) {
        tree.tokens.push_back(order[j]);
        tree.parents.push_back(node);
        next.push_back(static_cast<int>(tree.tokens.size()) - 1);
      }
    }
    frontier = std::move(next);
  }
  return tree;
}

specrun::TreeVerdict verify_tree(const ModelPair& models, const Tree& tree, int context,
                                 const SeqRandKey& key, std::int64_t first, TreeRule rule) {
  const specrun::TreeView view{tree.tokens.data(), tree.parents.data(),
                               static_cast<int>(tree.tokens.size())};
  auto after = [&](int node) { return node < 0 ? context : tree.tokens[node]; };
  if (rule == TreeRule::kCorrect) {
    return specrun::verify_tree_sampling_with(view, [&](int node, int level) {
      return specrun::sample_from(models.target[after(node)].data(), kVocab,
                                  key.uniform(first + level, RandPurpose::kTreeSample));
    });
  }
  specrun::TreeVerdict v;
  int node = -1;
  while (true) {
    const std::vector<float>& p = models.target[after(node)];
    const std::int64_t position = first + v.accepted;
    int chosen = -1;
    for (int c = 0, draw = 0; c < view.n; ++c) {
      if (tree.parents[c] != node) continue;
      const double u =
          key.uniform(position, RandPurpose::kAccept, static_cast<std::uint32_t>(draw++));
      if (u < p[tree.tokens[c]]) {
        chosen = c;
        break;
      }
    }
    if (chosen < 0) {
      v.token =
          specrun::sample_from(p.data(), kVocab, key.uniform(position, RandPurpose::kResidual));
      return v;
    }
    v.path[v.accepted++] = chosen;
    node = chosen;
  }
}

std::vector<int> tree_generate(const ModelPair& models, int top_k, int depth, int n,
                               const SeqRandKey& key, TreeRule rule,
                               std::vector<int>* accepted_counts) {
  std::vector<int> sequence = {kPromptToken};
  while (static_cast<int>(sequence.size()) - 1 < n) {
    const std::int64_t first = static_cast<std::int64_t>(sequence.size());
    const int context = sequence.back();
    const Tree tree = build_tree(models.draft, context, top_k, depth);
    const specrun::TreeVerdict v = verify_tree(models, tree, context, key, first, rule);
    if (accepted_counts) ++(*accepted_counts)[v.accepted];
    for (int i = 0; i < v.accepted; ++i) sequence.push_back(tree.tokens[v.path[i]]);
    sequence.push_back(v.token);
  }
  return std::vector<int>(sequence.begin() + 1, sequence.begin() + 1 + n);
}

Outcome run_tree_trials(const ModelPair& models, int top_k, int depth, TreeRule rule,
                        std::uint64_t seed) {
  std::vector<long> joint(kVocab * kVocab, 0), m3(kVocab, 0), m4(kVocab, 0);
  Outcome out;
  out.accepted_counts.assign(depth + 1, 0);
  for (int trial = 0; trial < kTrials; ++trial) {
    const SeqRandKey key{seed, static_cast<std::uint64_t>(trial)};
    const std::vector<int> t =
        tree_generate(models, top_k, depth, 4, key, rule, &out.accepted_counts);
    ++joint[t[0] * kVocab + t[1]];
    ++m3[t[2]];
    ++m4[t[3]];
  }
  const Exact ex = exact_target(models.target);
  out.joint12 = chi_square(joint, ex.joint12, kTrials);
  out.marginal3 = chi_square(m3, ex.marginal3, kTrials);
  out.marginal4 = chi_square(m4, ex.marginal4, kTrials);
  return out;
}

}  // namespace

TEST(LosslessTree, TopThreeDepthThree) {
  const ModelPair models = make_pair(SamplingParams{1.0f, 0, 1.0f});
  const Outcome o = run_tree_trials(models, 3, 3, TreeRule::kCorrect, kSeed + 10);
  expect_rejection_was_exercised(o, 3);
  expect_matches_target(o.joint12, "tree 3x3: joint of tokens 1-2");
  expect_matches_target(o.marginal3, "tree 3x3: marginal of token 3");
  expect_matches_target(o.marginal4, "tree 3x3: marginal of token 4");
}

TEST(LosslessTree, TopKTopPAndAChainOfOne) {
  // Top-k 6 / top-p 0.9 at T = 1.3 (children the target cannot produce), branching 2 depth 2;
  // and the degenerate tree top_k = 1, depth 1.
  const ModelPair models = make_pair(SamplingParams{1.3f, 6, 0.9f});
  const Outcome o = run_tree_trials(models, 2, 2, TreeRule::kCorrect, kSeed + 11);
  expect_rejection_was_exercised(o, 2);
  expect_matches_target(o.joint12, "tree 2x2 top-k/top-p: joint 1-2");
  expect_matches_target(o.marginal4, "tree 2x2 top-k/top-p: marginal 4");
  const Outcome chain = run_tree_trials(models, 1, 1, TreeRule::kCorrect, kSeed + 12);
  expect_rejection_was_exercised(chain, 1);
  expect_matches_target(chain.joint12, "tree 1x1 top-k/top-p: joint 1-2");
}

TEST(LosslessTree, NaiveSiblingRuleFailsTheSameTest) {
  for (const SamplingParams& params :
       {SamplingParams{1.0f, 0, 1.0f}, SamplingParams{1.3f, 6, 0.9f}}) {
    const ModelPair models = make_pair(params);
    const Outcome o = run_tree_trials(models, 3, 3, TreeRule::kWrongSiblingsThenP, kSeed + 10);
    const double critical = chi2_critical_001(o.joint12.df);
    std::printf("  naive sibling rule  top_k %d  chi2 %9.2f  df %2d  critical(0.001) %7.2f\n",
                params.top_k, o.joint12.statistic, o.joint12.df, critical);
    EXPECT_GT(o.joint12.statistic, 10.0 * critical)
        << "naive sibling rule (top_k " << params.top_k << "): chi-square " << o.joint12.statistic
        << " vs critical " << critical;
  }
}
