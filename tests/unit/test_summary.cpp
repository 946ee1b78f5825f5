// Derived statistics (analysis/summary.h) on hand-made records whose tau, alpha, per-position
// acceptance, throughput and phase quantiles are worked out by hand in the comments below, and
// properties of the bootstrap intervals (coverage of the true value, width shrinking with n).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "analysis/summary.h"
#include "common/error.h"

using namespace specrun;

namespace {

SequenceRecord seq(int64_t index, const std::string& category, int generated, int verify_steps,
                   int64_t drafted, int64_t accepted, double wall_s) {
  SequenceRecord s;
  s.prompt_index = index;
  s.prompt_id = "p" + std::to_string(index);
  s.category = category;
  s.prompt_len = 5;
  s.generated = generated;
  s.verify_steps = verify_steps;
  s.drafted = drafted;
  s.accepted = accepted;
  s.wall_s = wall_s;
  for (int i = 0; i < generated; ++i) s.output_tokens.push_back(static_cast<int32_t>(index + i));
  return s;
}

// A chain step: depth = drafted, bonus after a fully accepted chain, accepted + 1 emitted.
StepRecord step(int64_t batch, int32_t step, int64_t index, int32_t drafted, int32_t accepted) {
  StepRecord st{batch, step, index, 2, drafted, accepted, drafted};
  st.bonus = drafted > 0 && accepted == drafted ? 1 : 0;
  st.emitted = accepted + 1;
  return st;
}

// Batch 0 (batch_size 2): prompt 0 ("A", code) with steps (k, n) = (4,4) (4,2) (4,0): emitted
// 5+3+1 = 9 plus the prefill token = 10 generated, drafted 12, accepted 6, wall 0.5 s; prompt 1
// ("C", chat) finished at the prefill: 1 token, no step, wall 2.0 s.
// Batch 1: prompt 2 ("B", code) with steps (4,1) (4,4) (2,2): emitted 2+5+3 = 10, generated 11,
// drafted 10, accepted 7, wall 1.0 s.
ModeData hand_made() {
  ModeData d;
  d.mode = kModeSpeculative;
  d.batch_size = 2;
  d.sequences = {seq(0, "code", 10, 3, 12, 6, 0.5), seq(1, "chat", 1, 0, 0, 0, 2.0),
                 seq(2, "code", 11, 3, 10, 7, 1.0)};
  d.steps = {step(0, 0, 0, 4, 4), step(0, 1, 0, 4, 2), step(0, 2, 0, 4, 0),
             step(1, 0, 2, 4, 1), step(1, 1, 2, 4, 4), step(1, 2, 2, 2, 2)};
  // 6 timing rows x 2 ranks: phase p of row r on rank k = 10*r + k + p/10; rank 1 did not run
  // row 5 (NaN, as for another data-parallel group's batch).
  d.n_ranks = 2;
  for (int r = 0; r < 6; ++r)
    for (int k = 0; k < 2; ++k)
      for (int p = 0; p < kNumPhases; ++p)
        d.timings_ms.push_back(r == 5 && k == 1 ? std::numeric_limits<float>::quiet_NaN()
                                                : static_cast<float>(10 * r + k + p / 10.0));
  return d;
}

// summarize_mode's error text, or "no error".
std::string message(const ModeData& d) {
  try {
    summarize_mode(d);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

TEST(Summary, HandMadeTauAlphaAcceptance) {
  ModeSummary m = summarize_mode(hand_made());
  EXPECT_EQ(m.prompts, 3);
  EXPECT_EQ(m.generated, 22);
  EXPECT_EQ(m.verify_steps, 6);
  // tau = tokens from verify steps / verify steps = (22 - 3 prefill tokens) / 6.
  EXPECT_DOUBLE_EQ(m.tau, 19.0 / 6.0);
  // alpha = 13 accepted / 22 drafted.
  EXPECT_DOUBLE_EQ(m.alpha, 13.0 / 22.0);
  // Accepted n per step: 4 2 0 1 4 2 (the last with k = 2).
  // P(n>=1) = 5/6, P(n>=2) = 4/6; positions 3 and 4 were offered by 5 steps, n>=3 in 2 of them.
  ASSERT_EQ(m.acceptance_unconditional.size(), 4u);
  EXPECT_DOUBLE_EQ(m.acceptance_unconditional[0], 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(m.acceptance_unconditional[1], 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(m.acceptance_unconditional[2], 2.0 / 5.0);
  EXPECT_DOUBLE_EQ(m.acceptance_unconditional[3], 2.0 / 5.0);
  // Conditional: position 1: 5/6; position 2: of the 5 steps with n>=1, 4 reached 2; position 3:
  // steps with k>=3 and n>=2 are n = 4, 2, 4 -> 2/3; position 4: both with n>=3 reached 4 -> 1.
  ASSERT_EQ(m.acceptance_conditional.size(), 4u);
  EXPECT_DOUBLE_EQ(m.acceptance_conditional[0], 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(m.acceptance_conditional[1], 4.0 / 5.0);
  EXPECT_DOUBLE_EQ(m.acceptance_conditional[2], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.acceptance_conditional[3], 1.0);
  // Categories: code = prompts 0 and 2: (9 + 10) / 6 steps, alpha 13/22; chat has no steps.
  ASSERT_EQ(m.categories.size(), 2u);
  EXPECT_EQ(m.categories.at("code").prompts, 2);
  EXPECT_DOUBLE_EQ(m.categories.at("code").tau, 19.0 / 6.0);
  EXPECT_DOUBLE_EQ(m.categories.at("chat").tau, 0.0);
}

// Trees: prompt 0 drafts trees (nodes, depth, accepted) = (15,5,3) (15,4,4 ending at a leaf)
// (9,3,0); prompt 2 finishes at EOS in the middle of its second step's accepted path: steps
// (15,5,2) (15,5,5; bonus; 6 tokens verified, EOS cut it to 2). Generated: 1 + 4+5+1 = 11 and
// 1 + 3+2 = 6.
ModeData tree_made() {
  ModeData d;
  d.mode = kModeSpeculative;
  d.batch_size = 3;
  auto tree_step = [](int32_t s, int64_t index, int32_t nodes, int32_t depth, int32_t accepted,
                      int8_t bonus, int32_t emitted) {
    StepRecord st{0, s, index, 2, nodes, accepted, depth};
    st.bonus = bonus;
    st.emitted = emitted;
    return st;
  };
  d.steps = {tree_step(0, 0, 15, 5, 3, 0, 4), tree_step(0, 2, 15, 5, 2, 0, 3),
             tree_step(1, 0, 15, 4, 4, 1, 5), tree_step(1, 2, 15, 5, 5, 1, 2),
             tree_step(2, 0, 9, 3, 0, 0, 1)};
  d.sequences = {seq(0, "code", 11, 3, 39, 7, 1.0), seq(2, "code", 6, 2, 30, 7, 1.0)};
  d.n_ranks = 1;
  d.timings_ms.assign(3 * kNumPhases, 1.0f);
  return d;
}

TEST(Summary, TreeMetricsAndAcceptanceByDepth) {
  const ModeSummary m = summarize_mode(tree_made());
  EXPECT_EQ(m.verify_steps, 5);
  EXPECT_DOUBLE_EQ(m.tau, (11.0 + 6.0 - 2.0) / 5.0);
  EXPECT_DOUBLE_EQ(m.alpha, 14.0 / 69.0);
  EXPECT_EQ(m.nodes_histogram, (std::map<int, std::int64_t>{{9, 1}, {15, 4}}));
  EXPECT_EQ(m.accepted_histogram, (std::vector<std::int64_t>{1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(m.depth_histogram, (std::vector<std::int64_t>{0, 0, 0, 1, 1, 3}));
  EXPECT_EQ(m.bonus_steps, 2);
  EXPECT_DOUBLE_EQ(m.mean_nodes, 69.0 / 5.0);
  EXPECT_DOUBLE_EQ(m.mean_depth, 22.0 / 5.0);
  // Depth 4 was offered by the 4 steps of depth >= 4, of which those accepting >= 4: 2.
  // Depth 5: offered by 3 (depths 5, 5, 5), reached by 1; conditional: of those 3 with n >= 4
  // there is only the one with n = 5.
  ASSERT_EQ(m.acceptance_unconditional.size(), 5u);
  EXPECT_DOUBLE_EQ(m.acceptance_unconditional[0], 4.0 / 5.0);
  EXPECT_DOUBLE_EQ(m.acceptance_unconditional[3], 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(m.acceptance_unconditional[4], 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.acceptance_conditional[4], 1.0);
  const std::string text = format_summary(summarize_run({tree_made()}, true));
  EXPECT_NE(text.find("tree size (nodes: steps)   9:1 15:4"), std::string::npos) << text;
  EXPECT_NE(text.find("accepted length (n: steps) 0:1 2:1 3:1 4:1 5:1"), std::string::npos) << text;
  EXPECT_NE(text.find("bonus token in 40.0% of steps"), std::string::npos) << text;
  const nlohmann::json j = summary_to_json(summarize_run({tree_made()}, true));
  EXPECT_EQ(j["modes"]["speculative"]["nodes_histogram"]["15"], 4);
  EXPECT_EQ(j["modes"]["speculative"]["accepted_histogram"].size(), 6u);
}

TEST(Summary, BrokenIdentitiesAreErrors) {
  ModeData d = tree_made();
  d.sequences[0].accepted += 1;
  EXPECT_NE(message(d).find("prompt 0: its step rows sum to 3 verify steps, 39 drafted, 7 "
                            "accepted, 10 emitted, but its sequence row has 3, 39, 8 and 11"),
            std::string::npos)
      << message(d);
  d = tree_made();
  d.sequences[1].generated += 1;
  d.sequences[1].output_tokens.push_back(0);
  EXPECT_NE(message(d).find("prompt 2:"), std::string::npos) << message(d);
  d = tree_made();
  d.steps[0].depth = 16;
  EXPECT_NE(message(d).find("expected 0 <= accepted <= depth <= drafted"), std::string::npos)
      << message(d);
  d = tree_made();
  d.steps[4].prompt_index = 9;
  EXPECT_NE(message(d).find("prompt 0:"), std::string::npos) << message(d);
  d = tree_made();
  d.sequences.pop_back();
  EXPECT_NE(message(d).find("step rows name prompt 2, which has no sequence row"),
            std::string::npos)
      << message(d);
  // Unknown emitted counts (result schema 1) skip that one identity.
  d = tree_made();
  for (StepRecord& st : d.steps) st.emitted = -1;
  d.sequences[1].generated = 9;
  d.sequences[1].output_tokens.resize(9);
  EXPECT_EQ(message(d), "no error");
}

// The stored per-position counts and the timing rows are checked against the step rows too (a
// file whose per-position counts disagree with its steps would report a wrong acceptance by
// depth), and the message names the file and the identity.
TEST(Summary, PerPositionCountsAndTimingRowsAreIdentities) {
  ModeData d = hand_made();
  d.source = "run.h5";
  // Steps accept (4, 2, 0, 1, 4, 2): position 0 in 5 steps, 1 in 4, 2 in 2, 3 in 2.
  d.accepted_per_position = {5, 4, 2, 2};
  d.timing_batch = {0, 0, 0, 1, 1, 1};
  // In a file, one group decodes a batch: its ranks report every step (hand_made leaves rank 1
  // out of row 5, as if it were another group's, which a batch of three steps cannot be).
  d.timings_ms[5 * 2 * kNumPhases + kNumPhases + kPhaseTotal] = 1.0f;
  EXPECT_EQ(message(d), "no error");
  ModeData bad = d;
  bad.accepted_per_position[1] = 5;
  EXPECT_NE(message(bad).find("run.h5: speculative: accepted_per_position[1] is 5 but the step "
                              "rows accept 4 tokens at position 1"),
            std::string::npos)
      << message(bad);
  bad = d;
  bad.timing_batch = {0, 0, 1, 1, 1, 1};
  EXPECT_NE(message(bad).find("run.h5: speculative: batch 0 has 3 steps but 2 timing rows"),
            std::string::npos)
      << message(bad);
  bad = d;
  bad.timings_ms[1 * 2 * kNumPhases + kNumPhases + kPhaseTotal] =
      std::numeric_limits<float>::quiet_NaN();  // rank 1 missing from row 1 of batch 0
  EXPECT_NE(message(bad).find("batch 0 has timing rows from 2 and from 1 ranks"), std::string::npos)
      << message(bad);
}

TEST(Summary, ThroughputUsesBatchWallTime) {
  ModeData d = hand_made();
  ModeSummary m = summarize_mode(d);
  // Batch 0's wall = max(0.5, 2.0) = 2.0 (prompt 1 belongs to it through batch_size 2);
  // batch 1's = 1.0. 22 tokens / 3 s.
  EXPECT_EQ(m.batches, 2);
  EXPECT_DOUBLE_EQ(m.seconds, 3.0);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 22.0 / 3.0);
  std::vector<double> tokens, seconds;
  throughput_samples(d, tokens, seconds);
  // One sample per batch: batch 0 = prompts 0 and 1 (10 + 1 tokens, 2.0 s), batch 1 = prompt 2.
  EXPECT_EQ(tokens, (std::vector<double>{11, 11}));
  EXPECT_EQ(seconds, (std::vector<double>{2.0, 1.0}));
  // Without the batch size, the step-less sequence is a batch of its own: 0.5 + 2.0 + 1.0.
  d.batch_size = 0;
  m = summarize_mode(d);
  EXPECT_EQ(m.batches, 3);
  EXPECT_DOUBLE_EQ(m.seconds, 3.5);
}

TEST(Summary, PhasesPerStepAndPerRank) {
  ModeSummary m = summarize_mode(hand_made());
  EXPECT_EQ(m.step_rows, 6);
  // verify (p = 1): rows 0-4 average ranks 0 and 1: 10r + 0.5 + 0.1; row 5 only rank 0: 50.1.
  // Per-step values 0.6, 10.6, 20.6, 30.6, 40.6, 50.1.
  const Quantiles& q = m.phases.at("verify");
  EXPECT_NEAR(q.mean, (0.6 + 10.6 + 20.6 + 30.6 + 40.6 + 50.1) / 6, 1e-5);
  EXPECT_NEAR(q.p50, (20.6 + 30.6) / 2, 1e-5);
  // p90 at position 0.9 * 5 = 4.5: halfway between 40.6 and 50.1.
  EXPECT_NEAR(q.p90, (40.6 + 50.1) / 2, 1e-5);
  const auto& per_rank = m.phases_per_rank.at("verify");
  ASSERT_EQ(per_rank.size(), 2u);
  EXPECT_NEAR(per_rank[0].mean, 25.1, 1e-5);        // rows 0..5 of rank 0: 10r + 0.1
  EXPECT_NEAR(per_rank[1].mean, 20.0 + 1.1, 1e-5);  // rows 0..4 of rank 1: 10r + 1.1
  EXPECT_NEAR(per_rank[1].p50, 21.1, 1e-5);
}

TEST(Summary, RunPairsPromptsAndCountsGreedyEquality) {
  ModeData spec = hand_made();
  ModeData base = hand_made();
  base.mode = kModeBaseline;
  // Baseline takes twice as long per prompt: speedup exactly 2, and the same for every
  // resample, so the interval is [2, 2].
  for (SequenceRecord& s : base.sequences) s.wall_s *= 2;
  base.sequences[2].output_tokens[3] += 1;  // one prompt differs
  RunSummary run = summarize_run({base, spec}, true, 7);
  EXPECT_TRUE(run.paired);
  EXPECT_EQ(run.paired_prompts, 3);
  EXPECT_EQ(run.greedy_identical, 2);
  EXPECT_NEAR(run.speedup.value, 2.0, 1e-12);
  EXPECT_NEAR(run.speedup.low, 2.0, 1e-12);
  EXPECT_NEAR(run.speedup.high, 2.0, 1e-12);
  EXPECT_EQ(run.speedup_by_category.size(), 2u);

  nlohmann::json j = summary_to_json(run);
  EXPECT_EQ(j["greedy_identical"], 2);
  EXPECT_DOUBLE_EQ(j["modes"]["speculative"]["tau"].get<double>(), 19.0 / 6.0);
  EXPECT_EQ(j["modes"]["speculative"]["acceptance_conditional"].size(), 4u);
  EXPECT_EQ(j["modes"]["baseline"]["phases_ms_per_rank"]["verify"]["ranks"].size(), 2u);
  std::string text = format_summary(run);
  EXPECT_NE(text.find("greedy outputs identical: 2 / 3 prompts  <-- MISMATCH"), std::string::npos)
      << text;
}

TEST(Summary, ResolvedGreedy) {
  EXPECT_TRUE(resolved_is_greedy(R"({"decode": {"temperature": 0.0}})"));
  EXPECT_FALSE(resolved_is_greedy(R"({"decode": {"temperature": 0.7}})"));
  EXPECT_FALSE(resolved_is_greedy("not json"));
  EXPECT_EQ(resolved_seed(R"({"job": {"seed": 1234}})"), 1234u);
  EXPECT_EQ(resolved_seed("{}"), 1u);
}

// Width of the interval of the mean of n draws from N(10, 2^2).
double interval_width(int n, std::uint64_t seed, bool* covers) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(10.0, 2.0);
  std::vector<double> x(n), ones(n, 1.0);
  for (double& v : x) v = dist(rng);
  Interval iv = bootstrap_ratio(x, ones, 1000, seed + 1);
  EXPECT_LE(iv.low, iv.value);
  EXPECT_GE(iv.high, iv.value);
  *covers = iv.low <= 10.0 && 10.0 <= iv.high;
  return iv.high - iv.low;
}

TEST(Bootstrap, IntervalCoversTrueMeanAbout95Percent) {
  int covered = 0;
  const int trials = 200;
  for (int t = 0; t < trials; ++t) {
    bool covers = false;
    interval_width(60, 1000 + t, &covers);
    covered += covers;
  }
  // Nominal 95%; the percentile bootstrap runs a little narrow at n = 60. Binomial sd of the
  // count over 200 trials is ~3, so [170, 198] is a wide but failable band.
  EXPECT_GE(covered, 170);
  EXPECT_LE(covered, 198);
}

TEST(Bootstrap, IntervalShrinksWithN) {
  bool covers = false;
  double w50 = interval_width(50, 3, &covers);
  double w5000 = interval_width(5000, 3, &covers);
  EXPECT_TRUE(covers);
  // Width ~ 1/sqrt(n): 100x the data, about a tenth of the width.
  EXPECT_LT(w5000, w50 / 5);
  EXPECT_GT(w5000, w50 / 20);
}

TEST(Bootstrap, RelativeChangeOfKnownRatio) {
  // new = 1.2 x base, item by item: the change is +20% and every resample of each sample keeps
  // its own mean, so the interval straddles 0.2 within the samples' spread.
  std::vector<double> base{8, 9, 10, 11, 12}, next, ones(5, 1.0);
  for (double b : base) next.push_back(1.2 * b);
  Interval iv = bootstrap_relative_change(base, ones, next, ones, 2000, 5);
  EXPECT_NEAR(iv.value, 0.2, 1e-12);
  EXPECT_LT(iv.low, 0.2);
  EXPECT_GT(iv.high, 0.2);
  // Constant samples: no spread, the interval collapses on the value.
  std::vector<double> c1(10, 4.0), c2(10, 5.0), ones10(10, 1.0);
  Interval exact = bootstrap_relative_change(c1, ones10, c2, ones10, 500, 1);
  EXPECT_NEAR(exact.low, 0.25, 1e-12);
  EXPECT_NEAR(exact.high, 0.25, 1e-12);
  // Empty input gives zeros rather than dividing by zero.
  Interval none = bootstrap_relative_change({}, {}, c2, ones10, 100, 1);
  EXPECT_EQ(none.value, 0.0);
}

}  // namespace

namespace {

// One pass of a one-sequence run in ExpertRecords: one MoE layer of 8 experts, top-2, one EP
// rank, 1 MB (1e6 bytes) per expert, so that MB are unique-expert counts.
void add_pass(ExpertRecords& r, int32_t step, PassKind kind, int tokens, int kept, int unique,
              int kept_unique, int max_load) {
  r.top_k = 2;
  r.n_experts = 8;
  r.ep = 1;
  r.expert_bytes = 1000000;
  r.layers = {5};
  r.batch.push_back(0);
  r.step.push_back(step);
  r.kind.push_back(kind);
  r.sequences.push_back(1);
  r.tokens.push_back(tokens);
  r.kept_tokens.push_back(kept);
  r.unique.push_back(unique);
  r.pairs.push_back(2 * tokens);
  r.max_load.push_back(max_load);
  r.kept_unique.push_back(kept_unique);
  r.kept_pairs.push_back(2 * kept);
  r.rank_pairs.push_back(2 * tokens);
  r.seq_prompt_index.push_back(0);
  r.seq_tokens.push_back(tokens);
  r.seq_kept_tokens.push_back(kept);
  r.seq_unique.push_back(unique);
  r.seq_kept_unique.push_back(kept_unique);
}

// Prompt 0 of 4 tokens. Baseline: a prefill reading 5 experts, then 3 decode steps of one token
// each reading 2 (generated 4 = 1 + 3). Speculative: the same prefill, then 2 verify steps of 4
// tokens (the root and 3 drafted): step 0 reads 6 experts, keeps the root and 2 accepted nodes
// (4 experts) and emits 3; step 1 reads 5, keeps the root alone (2 experts) and emits 1
// (generated 5 = 1 + 3 + 1).
//   baseline decode: 2 unique per layer, 2 MB per step, 6 MB / 3 tokens = 2 MB per token
//   speculative verify: 5.5 unique, 3 kept, 5.5 MB per step, 11 MB / 4 tokens = 2.75 MB/token
//   verify / decode: 2.75x unique, 2.75x MB per step, 1.375x MB per emitted token
//   all passes: baseline (5 + 6) / 4 = 2.75 MB per generated token, speculative (5 + 11) / 5
std::vector<ModeData> expert_runs() {
  ModeData b;
  b.mode = kModeBaseline;
  b.batch_size = 1;
  b.sequences = {seq(0, "", 4, 3, 0, 0, 1.0)};
  for (int32_t s = 0; s < 3; ++s) b.steps.push_back(step(0, s, 0, 0, 0));
  add_pass(b.target_experts, -1, kPassPrefill, 4, 4, 5, 5, 2);
  for (int32_t s = 0; s < 3; ++s) add_pass(b.target_experts, s, kPassDecode, 1, 1, 2, 2, 1);
  ModeData v;
  v.mode = kModeSpeculative;
  v.batch_size = 1;
  v.sequences = {seq(0, "", 5, 2, 6, 2, 0.6)};
  v.steps = {step(0, 0, 0, 3, 2), step(0, 1, 0, 3, 0)};
  add_pass(v.target_experts, -1, kPassPrefill, 4, 4, 5, 5, 2);
  add_pass(v.target_experts, 0, kPassVerify, 4, 3, 6, 4, 2);
  add_pass(v.target_experts, 1, kPassVerify, 4, 1, 5, 2, 2);
  return {b, v};
}

}  // namespace

TEST(Summary, ExpertFiguresPerPassKindByHand) {
  const RunSummary run = summarize_run(expert_runs(), true);
  const ExpertSummary& b = run.modes[0].target_experts;
  ASSERT_TRUE(b.present);
  EXPECT_FALSE(run.modes[0].draft_experts.present);
  ASSERT_EQ(b.kinds.size(), 2u);
  EXPECT_EQ(b.kinds[0].kind, "prefill");
  EXPECT_EQ(b.kinds[0].emitted, 0);  // not a step: no per-token figure
  const ExpertPassSummary* d = b.kind("decode");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->passes, 3);
  EXPECT_DOUBLE_EQ(d->unique_per_layer, 2.0);
  EXPECT_DOUBLE_EQ(d->mb_per_pass, 2.0);
  EXPECT_EQ(d->emitted, 3);
  EXPECT_DOUBLE_EQ(d->mb_per_emitted_token, 2.0);
  EXPECT_DOUBLE_EQ(b.mb_per_generated_token, 11.0 / 4.0);
  const ExpertPassSummary* v = run.modes[1].target_experts.kind("verify");
  ASSERT_NE(v, nullptr);
  EXPECT_DOUBLE_EQ(v->tokens_per_pass, 4.0);
  EXPECT_DOUBLE_EQ(v->unique_per_layer, 5.5);
  EXPECT_DOUBLE_EQ(v->kept_unique_per_layer, 3.0);
  EXPECT_DOUBLE_EQ(v->kept_mb_per_pass, 3.0);
  EXPECT_DOUBLE_EQ(v->mb_per_pass, 5.5);
  EXPECT_EQ(v->emitted, 4);
  EXPECT_DOUBLE_EQ(v->mb_per_emitted_token, 2.75);
  EXPECT_EQ(v->rank_share, (std::vector<double>{1.0}));
  EXPECT_DOUBLE_EQ(run.modes[1].target_experts.mb_per_generated_token, 16.0 / 5.0);
  ASSERT_TRUE(run.verify_over_decode.present);
  EXPECT_DOUBLE_EQ(run.verify_over_decode.unique_per_layer, 2.75);
  EXPECT_DOUBLE_EQ(run.verify_over_decode.mb_per_step, 2.75);
  EXPECT_DOUBLE_EQ(run.verify_over_decode.mb_per_emitted_token, 1.375);

  const std::string text = format_summary(run);
  EXPECT_NE(text.find("experts (target: 8 experts, top-2, 1 MoE layer, ep 1, 1.000 MB per expert"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  speculative  verify              2          4.0     5.50     5.50     "
                      "3.00    5.500     2.750"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  baseline     decode              3          1.0     2.00     2.00"
                      "        -    2.000     2.000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("experts, verify / decode (target): 2.75x unique experts per layer, 2.75x "
                      "expert MB per step, 1.38x expert MB per emitted token"),
            std::string::npos)
      << text;
  const nlohmann::json j = summary_to_json(run);
  EXPECT_DOUBLE_EQ(j["experts_verify_over_decode"]["mb_per_emitted_token"].get<double>(), 1.375);
  const nlohmann::json& vj = j["modes"]["speculative"]["experts"]["target"];
  EXPECT_DOUBLE_EQ(vj["passes"]["verify"]["mb_per_emitted_token"].get<double>(), 2.75);
  EXPECT_DOUBLE_EQ(vj["passes"]["verify"]["kept_unique_per_layer"].get<double>(), 3.0);
  EXPECT_EQ(vj["expert_bytes"].get<std::int64_t>(), 1000000);
  EXPECT_TRUE(j["modes"]["speculative"]["experts"]["draft"].is_null());

  // A dense run prints no expert section and has a null ratio.
  std::vector<ModeData> dense = expert_runs();
  for (ModeData& m : dense) m.target_experts = ExpertRecords{};
  const RunSummary plain = summarize_run(dense, true);
  EXPECT_EQ(format_summary(plain).find("experts"), std::string::npos);
  EXPECT_TRUE(summary_to_json(plain)["experts_verify_over_decode"].is_null());
}

// The expert records must describe the steps: one target pass per step, and their own identities.
TEST(Summary, ExpertRecordsThatDoNotMatchTheStepsAreErrors) {
  std::vector<ModeData> runs = expert_runs();
  ModeData twice = runs[1];
  add_pass(twice.target_experts, 1, kPassVerify, 4, 1, 5, 2, 2);
  EXPECT_NE(message(twice).find("batch 0 step 1 has 2 target passes"), std::string::npos)
      << message(twice);
  ModeData missing = runs[0];
  missing.steps.push_back(step(0, 3, 0, 0, 0));
  missing.sequences[0].generated += 1;
  missing.sequences[0].verify_steps += 1;
  EXPECT_NE(message(missing).find("batch 0 step 3 has 0 target passes"), std::string::npos)
      << message(missing);
  ModeData broken = runs[1];
  broken.target_experts.pairs[1] = 9;
  EXPECT_NE(message(broken).find("the target's expert records: pass 1"), std::string::npos)
      << message(broken);
}
