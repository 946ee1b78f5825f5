// `specrun compare` on what the run recorded beyond host timings: device phase rows (whether a
// phase change ran on the device), device passes that lost their graphs, and the experts each
// pass read (more expert bytes per emitted token is a regression).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "analysis/compare.h"
#include "common/error.h"
#include "compare_fixtures.h"

using namespace specrun;
using namespace specrun::compare_test;

namespace {

// Device rows for every timings row of `d` (2 ranks): verify ~ N(verify_ms, 10%), the other
// columns fixed, total their sum.
void add_device_rows(ModeData& d, double verify_ms, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> unit(0.0, 1.0);
  const std::size_t rows = d.timings_ms.size() / (2 * kNumPhases);
  for (std::size_t r = 0; r < rows * 2; ++r) {
    const float verify = static_cast<float>(verify_ms * (1.0 + 0.1 * unit(rng)));
    for (float v : {0.5f, verify, 0.2f, 0.1f, 0.8f + verify}) d.device_ms.push_back(v);
  }
}

// A speculative run (BASE) and one whose verify phase is 20% slower on the host's clock (NEW),
// with device rows (device verify base_device_ms and new_device_ms); seeds seed..seed + 3.
struct RunPair {
  std::vector<ModeData> base, next;
};
RunPair slower_verify(double base_device_ms, double new_device_ms, std::uint64_t seed) {
  Synthetic base_params, slow_params;
  slow_params.verify_ms = base_params.verify_ms * 1.2;
  RunPair p{{make_mode(kModeSpeculative, base_params, seed)},
            {make_mode(kModeSpeculative, slow_params, seed + 1)}};
  add_device_rows(p.base[0], base_device_ms, seed + 2);
  add_device_rows(p.next[0], new_device_ms, seed + 3);
  return p;
}

}  // namespace

// The verify phase 20% slower on the host's clock: whether the device's time moved with it says
// whose it was. Without device rows (CPU runs) the verdict says nothing about a device.
TEST(Compare, DeviceRowsSayWhetherAPhaseChangeRanOnTheDevice) {
  Synthetic base_params, slow_params;
  slow_params.verify_ms = base_params.verify_ms * 1.2;
  auto runs = [&](double base_device_ms, double new_device_ms) {
    RunPair p = slower_verify(base_device_ms, new_device_ms, 31);
    return compare_modes(p.base, p.next, CompareOptions{});
  };

  // The device's verify 8 -> 9.6 ms: the kernels got slower.
  Comparison kernels = runs(8.0, 9.6);
  const TimingChange* dv = nullptr;
  for (const TimingChange& t : kernels.device)
    if (t.mode == kModeSpeculative && t.name == "verify") dv = &t;
  ASSERT_NE(dv, nullptr);
  EXPECT_EQ(dv->unit, "device ms/step");
  EXPECT_NEAR(dv->relative.value, 0.2, 0.03);
  EXPECT_TRUE(dv->regression);
  std::string verdict = format_verdict(kernels);
  EXPECT_NE(verdict.find("speculative verify +"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("; on the device +"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find(": the device's work"), std::string::npos) << verdict;
  const std::string text = format_comparison(kernels, "a.h5", "b.h5");
  EXPECT_NE(text.find("device time (events"), std::string::npos) << text;
  EXPECT_NE(text.find("speculative verify ms/step"), std::string::npos) << text;
  nlohmann::json j = comparison_to_json(kernels);
  EXPECT_EQ(j["device_timings"].size(), static_cast<std::size_t>(kNumDeviceColumns));

  // The device's verify unchanged at 8 ms: the host's side (launches one by one, a slow CPU).
  Comparison host = runs(8.0, 8.0);
  EXPECT_TRUE(host.regression);  // the wall time still regressed: the job is slower
  verdict = format_verdict(host);
  EXPECT_NE(verdict.find(": not the device's (the host's"), std::string::npos) << verdict;
  // Device changes are never regressions by themselves.
  for (const TimingChange& t : host.device) EXPECT_FALSE(t.regression) << t.name;

  // No device rows: no device section, no note.
  Comparison cpu = compare_modes({make_mode(kModeSpeculative, base_params, 31)},
                                 {make_mode(kModeSpeculative, slow_params, 32)}, CompareOptions{});
  EXPECT_TRUE(cpu.device.empty());
  EXPECT_EQ(format_verdict(cpu).find("on the device"), std::string::npos);
}

namespace {

// Pass rows for every timings row of `d` (2 ranks): 4 draft passes replayed and one verify pass
// per step, of which `verify_graphs` (a fraction of the rows) replayed and the rest launched
// kernel by kernel, unrecorded (or eager).
void add_pass_rows(ModeData& d, double verify_graphs, bool eager = false) {
  const std::size_t rows = d.timings_ms.size() / (2 * kNumPhases);
  for (std::size_t r = 0; r < rows; ++r) {
    const bool graph = static_cast<double>(r) < verify_graphs * static_cast<double>(rows);
    const float replayed = graph ? 1.0f : 0.0f;
    const float recorded = !graph && eager ? 1.0f : 0.0f,
                unrecorded = !graph && !eager ? 1.0f : 0.0f;
    for (int k = 0; k < 2; ++k)
      for (float v : {4.0f, 0.0f, 0.0f, 0.0f, replayed, 0.0f, recorded, unrecorded})
        d.device_passes.push_back(v);
  }
}

}  // namespace

// The story specrun exists for: the verify step got slower on the host's clock, not on the
// device's, because its passes stopped running as CUDA graphs. The verdict names the cause beside
// the phase; a small move of the share is not a finding; CPU runs have no pass rows.
TEST(Compare, VerifyPassesThatLostTheirGraphsAreNamedInTheVerdict) {
  auto runs = [&](double base_graphs, double new_graphs) {
    RunPair p = slower_verify(8.0, 8.0, 41);
    add_pass_rows(p.base[0], base_graphs);
    add_pass_rows(p.next[0], new_graphs);
    return compare_modes(p.base, p.next, CompareOptions{});
  };

  Comparison lost = runs(1.0, 0.0);
  ASSERT_EQ(lost.graphs.size(), 2u);  // draft and verify, in that order
  const GraphChange& draft = lost.graphs[0];
  const GraphChange& verify = lost.graphs[1];
  EXPECT_EQ(draft.phase, "draft");
  EXPECT_FALSE(draft.fell || draft.rose);
  EXPECT_EQ(draft.base.replayed, 4.0 * 400 * 2);  // 400 rows, 2 ranks
  EXPECT_EQ(verify.phase, "verify");
  EXPECT_TRUE(verify.fell);
  EXPECT_EQ(verify.base.graph_share(), 1.0);
  EXPECT_EQ(verify.next.graph_share(), 0.0);
  EXPECT_EQ(verify.next.unrecorded, 800);
  EXPECT_EQ(verify.next.launched(), 800);
  EXPECT_TRUE(lost.regression) << "the job is slower: still a regression";
  const std::string verdict = format_verdict(lost);
  EXPECT_NE(verdict.find("REGRESSION: speculative verify +"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find(": not the device's (the host's: launches, the CPU); its passes as CUDA "
                         "graphs 100% -> 0% (launched kernel by kernel, unrecorded: graphs off or "
                         "passes too large for a step graph)"),
            std::string::npos)
      << verdict;
  const std::string text = format_comparison(lost, "a.h5", "b.h5");
  const std::size_t table = text.find("device forward passes as CUDA graphs");
  ASSERT_NE(table, std::string::npos) << text;
  const std::size_t row = text.find("speculative verify", table);
  ASSERT_NE(row, std::string::npos) << text;
  const std::string line = text.substr(row, text.find('\n', row) - row);
  EXPECT_NE(line.find("100%         0%   of 800 -> 800 passes  FELL (launched kernel by kernel, "
                      "unrecorded"),
            std::string::npos)
      << line;
  const nlohmann::json j = comparison_to_json(lost)["device_passes"];
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[1]["fell"].get<bool>());
  EXPECT_EQ(j[1]["base"]["graph_share"].get<double>(), 1.0);

  // Graphs turned off by configuration: two experiments, the fallen share still in the verdict.
  Comparison off = lost;
  off.experiment_keys = {"parallel.cuda_graphs"};
  const std::string experiments = format_verdict(off);
  EXPECT_NE(experiments.find("DIFFERENT EXPERIMENTS (parallel.cuda_graphs differ"),
            std::string::npos)
      << experiments;
  EXPECT_NE(experiments.find("; passes as CUDA graphs: speculative verify 100% -> 0%\n"),
            std::string::npos)
      << experiments;

  // Graphs regained (the runs swapped): named beside the faster phase, without the launch remark.
  RunPair swapped = slower_verify(8.0, 8.0, 45);
  EXPECT_TRUE(compare_modes(swapped.next, swapped.base, {}).graphs.empty())
      << "no pass rows, no graphs";
  add_pass_rows(swapped.next[0], 0.0);
  add_pass_rows(swapped.base[0], 1.0);
  Comparison regained = compare_modes(swapped.next, swapped.base, {});
  ASSERT_EQ(regained.graphs.size(), 2u);
  EXPECT_TRUE(regained.graphs[1].rose);
  const std::string faster = format_verdict(regained);
  EXPECT_NE(faster.find("FASTER: speculative verify -"), std::string::npos) << faster;
  EXPECT_NE(faster.find("; its passes as CUDA graphs 0% -> 100%\n"), std::string::npos) << faster;
  // Recorded but never captured (shapes that do not repeat): the other cause named.
  RunPair shapes = slower_verify(8.0, 8.0, 49);
  add_pass_rows(shapes.base[0], 1.0);
  add_pass_rows(shapes.next[0], 0.0, true);
  const std::string eager = format_verdict(compare_modes(shapes.base, shapes.next, {}));
  EXPECT_NE(eager.find("100% -> 0% (launched kernel by kernel, recorded but not captured: shapes "
                       "that do not repeat or a capture that failed (the job log's step-graph "
                       "line))"),
            std::string::npos)
      << eager;
  // A share that moved by less than kGraphShareChange: reported in the table, not a finding.
  Comparison small = runs(1.0, 0.95);
  EXPECT_FALSE(small.graphs[1].fell || small.graphs[1].rose);
  EXPECT_EQ(format_verdict(small).find("CUDA graphs"), std::string::npos) << format_verdict(small);
}

namespace {

// The target's expert records of a make_mode speculative run: one verify pass per step over its
// 4 sequences, each the root and 4 drafted nodes of which 2 are accepted (20 tokens, 12 kept;
// every step emits 3 tokens per sequence), two MoE layers of 64 experts, top-2, 2 EP ranks,
// 1 MB per expert; `unique` experts per layer per pass. Expert MB per emitted token:
// 2 layers x unique / 12 tokens.
void with_experts(ModeData& d, int unique) {
  ExpertRecords& r = d.target_experts;
  r = ExpertRecords{};
  r.top_k = 2;
  r.n_experts = 64;
  r.ep = 2;
  r.expert_bytes = 1000000;
  r.layers = {1, 2};
  for (StepRecord& st : d.steps) st.emitted = st.accepted + 1;
  std::map<std::pair<std::int64_t, std::int32_t>, std::vector<std::int64_t>> by_step;
  for (const StepRecord& st : d.steps) by_step[{st.batch, st.step}].push_back(st.prompt_index);
  for (const auto& [key, prompts] : by_step) {
    const int n = static_cast<int>(prompts.size()), tokens = 5 * n, kept = 3 * n;
    r.batch.push_back(key.first);
    r.step.push_back(key.second);
    r.kind.push_back(kPassVerify);
    r.sequences.push_back(n);
    r.tokens.push_back(tokens);
    r.kept_tokens.push_back(kept);
    for (int l = 0; l < 2; ++l) {
      r.unique.push_back(unique);
      r.pairs.push_back(2 * tokens);
      r.max_load.push_back(3);
      r.kept_unique.push_back(unique / 2);
      r.kept_pairs.push_back(2 * kept);
      r.rank_pairs.push_back(tokens);
      r.rank_pairs.push_back(tokens);
    }
    for (std::int64_t p : prompts) {
      r.seq_prompt_index.push_back(p);
      r.seq_tokens.push_back(5);
      r.seq_kept_tokens.push_back(3);
      for (int l = 0; l < 2; ++l) {
        r.seq_unique.push_back(8);
        r.seq_kept_unique.push_back(5);
      }
    }
  }
}

std::vector<ModeData> moe_run(int unique, std::uint64_t seed) {
  Synthetic p;
  std::vector<ModeData> run = {make_mode(kModeBaseline, p, seed),
                               make_mode(kModeSpeculative, p, seed + 1)};
  with_experts(run[1], unique);
  return run;
}

}  // namespace

// A verify that reads more experts per emitted token is a regression the verdict names first,
// even when no timing changed; the same experts are not; another experiment reports the change.
TEST(Compare, MoreExpertBytesPerEmittedTokenIsARegression) {
  const std::vector<ModeData> base = moe_run(20, 11), same = moe_run(20, 13),
                              more = moe_run(26, 13);
  Comparison c = compare_modes(base, more, CompareOptions{});
  ASSERT_EQ(c.experts.size(), 1u);
  const ExpertChange& e = c.experts[0];
  EXPECT_EQ(e.mode, kModeSpeculative);
  EXPECT_EQ(e.kind, "verify");
  EXPECT_NEAR(e.base_mb_per_token, 2 * 20 / 12.0, 1e-9);
  EXPECT_NEAR(e.next_mb_per_token, 2 * 26 / 12.0, 1e-9);
  EXPECT_NEAR(e.relative.value, 0.3, 1e-9);
  EXPECT_EQ(e.base_n, 400);
  EXPECT_TRUE(e.regression);
  EXPECT_TRUE(c.regression);
  EXPECT_EQ(c.exit_code(), kCompareRegression);
  for (const TimingChange& t : c.timings) EXPECT_FALSE(t.regression) << t.mode << " " << t.name;
  const std::string verdict = format_verdict(c);
  EXPECT_EQ(verdict.rfind("REGRESSION: speculative verify expert MB per emitted token +30.0% "
                          "[95% CI +30.0%, +30.0%] (3.333 -> 4.333 MB/token; unique experts per "
                          "layer 20.00 -> 26.00)",
                          0),
            0u)
      << verdict;
  const std::string text = format_comparison(c, "a.h5", "b.h5");
  EXPECT_NE(text.find("  speculative verify MB/token     3.333      4.333    +30.0%   [+30.0%, "
                      "+30.0%]  REGRESSION\n  speculative verify unique       20.00      26.00\n"),
            std::string::npos)
      << text;
  EXPECT_TRUE(comparison_to_json(c)["experts"][0]["regression"].get<bool>());

  // Fewer bytes per token: named as better.
  Comparison fewer = compare_modes(more, base, CompareOptions{});
  ASSERT_EQ(fewer.experts.size(), 1u);
  EXPECT_TRUE(fewer.experts[0].improvement);
  EXPECT_FALSE(fewer.regression);

  Comparison unchanged = compare_modes(base, same, CompareOptions{});
  ASSERT_EQ(unchanged.experts.size(), 1u);
  EXPECT_FALSE(unchanged.experts[0].regression);
  EXPECT_FALSE(unchanged.regression);
  EXPECT_EQ(
      format_verdict(unchanged).rfind("SAME: no phase, throughput, speedup or expert bytes", 0), 0u)
      << format_verdict(unchanged);

  c.experiment_keys = {"target.path"};
  EXPECT_NE(format_verdict(c).find("expert MB per emitted token: speculative verify 3.333 -> "
                                   "4.333 (+30.0%)"),
            std::string::npos)
      << format_verdict(c);

  // Runs without expert records (dense targets) compare nothing of it.
  EXPECT_TRUE(compare_modes(base,
                            {make_mode(kModeBaseline, Synthetic{}, 13),
                             make_mode(kModeSpeculative, Synthetic{}, 14)},
                            CompareOptions{})
                  .experts.empty());
}
