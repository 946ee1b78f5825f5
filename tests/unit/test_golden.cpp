// Golden acceptance curves and the gate (analysis/golden.h, analysis/acceptance_metrics.h):
// the metrics against report's (analysis/summary.h, computed by its own loops), the one-sided
// p-value and Holm's rule against hand-computed values, and the gate on synthetic runs whose
// acceptance is known: identical inputs pass, a drop of known size is caught, repeats of an
// unchanged job raise at most the stated false-alarm rate (and a rule that ignores the
// run-to-run spread raises more: the test can tell a wrong noise model), another experiment
// exits 3, missing statistics exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "analysis/golden.h"
#include "common/error.h"
#include "io/result_file.h"

namespace specrun {
namespace {

struct Workload {
  int prompts = 40;
  int steps = 20;           // verify steps per prompt
  int draft_len = 4;        // a chain
  double acceptance = 0.7;  // mean per-token acceptance probability
  double spread = 0.1;      // prompts' acceptance probabilities: uniform +- spread
  double run_offset = 0.0;  // standard deviation of a run-level shift (the machine, kernels)
};

// A speculative mode whose prompt i accepts each draft token with probability a_i (fixed by the
// prompt, the same in every run: the same prompts), steps drawn with `seed` (a repeat run).
ModeData synthetic_mode(const Workload& w, std::uint64_t seed) {
  std::mt19937_64 prompts_rng(12345);  // the prompts: the same in every run
  std::uniform_real_distribution<double> jitter(-w.spread, w.spread);
  std::vector<double> a(w.prompts);
  for (double& x : a) x = w.acceptance + jitter(prompts_rng);
  std::mt19937_64 rng(seed);
  const double offset = std::normal_distribution<double>(0, 1)(rng) * w.run_offset;
  std::uniform_real_distribution<double> u(0, 1);
  ModeData d;
  d.mode = kModeSpeculative;
  d.source = "synthetic.h5";
  for (int i = 0; i < w.prompts; ++i) {
    SequenceRecord s;
    s.prompt_index = i;
    s.category = i % 2 ? "code" : "chat";
    s.generated = 1;
    s.verify_steps = w.steps;
    const double p = std::clamp(a[i] + offset, 0.0, 1.0);
    for (int st = 0; st < w.steps; ++st) {
      int n = 0;
      while (n < w.draft_len && u(rng) < p) ++n;
      StepRecord r;
      r.batch = i;
      r.step = st;
      r.prompt_index = i;
      r.active = 1;
      r.drafted = w.draft_len;
      r.accepted = n;
      r.depth = w.draft_len;
      r.bonus = n == w.draft_len;
      r.emitted = n + 1;
      d.steps.push_back(r);
      s.generated += n + 1;
      s.drafted += w.draft_len;
      s.accepted += n;
    }
    d.sequences.push_back(s);
  }
  return d;
}

GatedRun gated(const ModeData& d, const std::string& path, int resamples = 400) {
  GatedRun r;
  r.path = path;
  r.identity = {{"target model", "xxh3:1"}, {"decode.temperature", "0.8"}, {"prompts", "fnv:1"}};
  r.draft_fingerprint = "xxh3:2";
  r.metrics = estimate_metrics(d, resamples, 1);
  r.prompts = static_cast<std::int64_t>(d.sequences.size());
  return r;
}

Golden golden_of(const Workload& w, std::uint64_t first_seed, int runs) {
  std::vector<GatedRun> v;
  for (int i = 0; i < runs; ++i)
    v.push_back(gated(synthetic_mode(w, first_seed + i), "golden" + std::to_string(i) + ".h5"));
  return make_golden(v, 400);
}

const GateTest* find_test(const GateResult& r, const std::string& name) {
  for (const GateTest& t : r.tests)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(Golden, MetricsEqualReportsValues) {
  const ModeData d = synthetic_mode(Workload{}, 7);
  const ModeSummary s = summarize_mode(d);
  const std::vector<MetricEstimate> m = estimate_metrics(d, 200, 1);
  auto value = [&](const std::string& name) {
    for (const MetricEstimate& e : m)
      if (e.name == name) return e.value;
    ADD_FAILURE() << "no metric " << name;
    return -1.0;
  };
  ASSERT_EQ(s.acceptance_unconditional.size(), 4u);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_NEAR(value("unconditional@" + std::to_string(i)), s.acceptance_unconditional[i - 1],
                1e-12);
    if (i > 1) {
      EXPECT_NEAR(value("conditional@" + std::to_string(i)), s.acceptance_conditional[i - 1],
                  1e-12);
    }
  }
  EXPECT_NEAR(value("tau"), s.tau, 1e-12);
  EXPECT_NEAR(value("tau[code]"), s.categories.at("code").tau, 1e-12);
  EXPECT_NEAR(value("tau[chat]"), s.categories.at("chat").tau, 1e-12);
  // conditional@1 would repeat unconditional@1.
  for (const MetricEstimate& e : m) EXPECT_NE(e.name, "conditional@1");
  // Every metric has a positive noise: the prompts differ and steps are random.
  for (const MetricEstimate& e : m) EXPECT_GT(e.variance, 0) << e.name;
}

// The bootstrap variance of a mean (den 1) is the items' population variance / n (resampling
// n of n with replacement), within the resampling error of 4000 resamples (about 2.2%).
TEST(Golden, BootstrapVarianceOfAMean) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> unit(0, 1);
  std::vector<double> x(50), one(50, 1.0);
  for (double& v : x) v = 3 + 2 * unit(rng);
  double mean = 0, ss = 0;
  for (double v : x) mean += v / 50;
  for (double v : x) ss += (v - mean) * (v - mean);
  const double want = ss / 50 / 50;
  EXPECT_NEAR(bootstrap_ratio_variance(x, one, 4000, 1), want, 0.08 * want);
  EXPECT_EQ(bootstrap_ratio_variance({1.0}, {1.0}, 4000, 1), 0.0);  // one item: nothing to draw
}

TEST(Golden, OnePromptFallsBackToThePerStepFloor) {
  Workload w;
  w.prompts = 1;
  const ModeData d = synthetic_mode(w, 3);
  for (const MetricEstimate& e : estimate_metrics(d, 200, 1)) {
    if (e.name != "unconditional@1") continue;
    // One prompt: the bootstrap has nothing to resample; the binomial floor p (1 - p) / n with
    // Jeffreys' p = (x + 0.5) / (n + 1).
    const double n = static_cast<double>(e.den);
    const double p = (e.value * n + 0.5) / (n + 1);
    EXPECT_NEAR(e.variance, p * (1 - p) / n, 1e-15);
  }
}

TEST(Golden, OneSidedPValue) {
  const double normal = 1e9;  // degrees of freedom: the normal
  EXPECT_NEAR(drop_p_value(1.6448536269514722, 1.0, normal), 0.05, 1e-9);
  EXPECT_NEAR(drop_p_value(0.0, 0.3, normal), 0.5, 1e-15);
  EXPECT_NEAR(drop_p_value(-0.6, 0.3, normal), 1 - 0.022750131948179195, 1e-9);  // a rise
  EXPECT_NEAR(drop_p_value(0.6, 0.3, normal), 0.022750131948179195, 1e-9);
  EXPECT_EQ(drop_p_value(0.1, 0.0, normal), 0.0);
  EXPECT_EQ(drop_p_value(0.0, 0.0, normal), 1.0);
  // Student's t: the 95% quantiles of t with 4 and 2 degrees of freedom (tables).
  EXPECT_NEAR(drop_p_value(2.131846786326649, 1.0, 4), 0.05, 1e-9);
  EXPECT_NEAR(drop_p_value(2.919985580355516, 1.0, 2), 0.05, 1e-9);
  // Welch-Satterthwaite: (a + b)^2 / (a^2 / df_a + b^2 / df_b).
  EXPECT_NEAR(satterthwaite_df(1.0, 2, 1.0, 1e12), 8.0, 1e-9);
  EXPECT_NEAR(satterthwaite_df(2.0, 4, 1.0, 9), 9.0 / (1.0 + 1.0 / 9), 1e-12);
}

TEST(Golden, HolmStepDown) {
  std::vector<GateTest> t(4);
  const double p[] = {0.01, 0.04, 0.03, 0.005};
  for (int i = 0; i < 4; ++i) t[i].p = p[i];
  apply_holm(t, 0.05);
  // Sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop. Uncorrected, all four would be
  // below 0.05.
  EXPECT_TRUE(t[3].significant);
  EXPECT_TRUE(t[0].significant);
  EXPECT_FALSE(t[2].significant);
  EXPECT_FALSE(t[1].significant);
  EXPECT_NEAR(t[3].p_holm, 0.02, 1e-15);
  EXPECT_NEAR(t[0].p_holm, 0.03, 1e-15);
  EXPECT_NEAR(t[2].p_holm, 0.06, 1e-15);
  EXPECT_NEAR(t[1].p_holm, 0.06, 1e-15);  // monotone: max(0.06, 1 x 0.04)
  EXPECT_NEAR(t[2].threshold, 0.025, 1e-15);
}

TEST(Golden, NoiseRule) {
  // One run: the golden's noise is its bootstrap variance; several: between + within, per rule.
  const Golden one = golden_of(Workload{}, 1, 1);
  EXPECT_EQ(one.noise_rule(), "per-prompt bootstrap");
  for (const GoldenMetric& m : one.metrics) {
    EXPECT_EQ(m.between, 0);
    EXPECT_DOUBLE_EQ(m.noise, m.within);
  }
  const Golden three = golden_of(Workload{}, 1, 3);
  EXPECT_EQ(three.noise_rule(), "between-run");
  for (const GoldenMetric& m : three.metrics) {
    ASSERT_EQ(m.run_values.size(), 3u);
    const double mean = (m.run_values[0] + m.run_values[1] + m.run_values[2]) / 3;
    EXPECT_NEAR(m.value, mean, 1e-15);
    double ss = 0;
    for (double v : m.run_values) ss += (v - mean) * (v - mean);
    EXPECT_NEAR(m.between, ss / 2, 1e-15);
    EXPECT_NEAR(m.noise, std::max(0.0, m.between - m.within) + std::max(m.between, m.within) / 3,
                1e-15);
    EXPECT_NEAR(m.run_part, std::max(0.0, m.between - m.within) * 4 / 3, 1e-15);
  }
}

TEST(Golden, IdenticalRunPasses) {
  const ModeData d = synthetic_mode(Workload{}, 1);
  const Golden g = make_golden({gated(d, "a.h5")}, 400);
  const GateResult r = gate_run(g, gated(d, "a.h5"), 0.05);
  EXPECT_EQ(r.exit_code(), kGatePass) << format_gate(r, "a.h5", "g.json");
  ASSERT_EQ(r.tests.size(), g.metrics.size());
  for (const GateTest& t : r.tests) EXPECT_EQ(t.drop, 0) << t.name;
  EXPECT_EQ(format_gate(r, "a.h5", "g.json").rfind("PASS: no significant drop", 0), 0u);
}

TEST(Golden, CatchesADropOfKnownSize) {
  const Golden g = golden_of(Workload{}, 1, 3);
  Workload worse;
  worse.acceptance = 0.6;  // each token accepted with 0.6 instead of 0.7
  const GateResult r = gate_run(g, gated(synthetic_mode(worse, 99), "worse.h5"), 0.05);
  ASSERT_EQ(r.exit_code(), kGateDrop) << format_gate(r, "worse.h5", "g.json");
  const GateTest* t = find_test(r, "unconditional@1");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->significant);
  // The drop is measured, not just flagged: 0.1 in expectation (within 3 sd).
  EXPECT_NEAR(t->drop, 0.1, 3 * t->sd);
  EXPECT_LT(t->p, 1e-3);
  const std::string text = format_gate(r, "worse.h5", "g.json");
  EXPECT_EQ(text.rfind("DROP: ", 0), 0u) << text;
  EXPECT_NE(text.find("Holm"), std::string::npos);
  // A rise is never a drop.
  Workload better;
  better.acceptance = 0.8;
  EXPECT_EQ(gate_run(g, gated(synthetic_mode(better, 98), "better.h5"), 0.05).exit_code(),
            kGatePass);
}

// Repeats of an unchanged job, each against a golden of 5 others (a fresh golden each time: the
// rate is over goldens and runs): at most the stated rate of false alarms, with and without a
// run-level spread that sampling does not explain. A golden whose noise ignores that spread (the
// within variance only, normal tails) alarms far more often: the rate is a property of the rule,
// and this test can fail.
TEST(Golden, FalseAlarmRateOfUnchangedRepeats) {
  for (const double offset : {0.0, 0.04}) {
    Workload w;
    w.run_offset = offset;
    int alarms = 0, naive_alarms = 0;
    const int trials = 100;
    for (int i = 0; i < trials; ++i) {
      const Golden g = golden_of(w, 1000 + 10 * i, 5);
      Golden naive = g;
      for (GoldenMetric& m : naive.metrics) {
        m.noise = m.within / 5;
        m.run_part = 0;
      }
      const GatedRun run = gated(synthetic_mode(w, 1000 + 10 * i + 7), "repeat.h5");
      alarms += gate_run(g, run, 0.05).exit_code() == kGateDrop;
      naive_alarms += gate_run(naive, run, 0.05).exit_code() == kGateDrop;
    }
    // 5% of 100 is 5; P(X >= 11) < 0.012 for a true rate of 5%.
    EXPECT_LE(alarms, 10) << "run offset " << offset;
    std::cout << "run offset " << offset << ": " << alarms << " false alarms in " << trials
              << " (the within-only rule: " << naive_alarms << ")\n";
    if (offset > 0) {
      EXPECT_GE(naive_alarms, 20) << naive_alarms;
    }
  }
}

TEST(Golden, AnotherExperimentExits3NamingTheField) {
  const Golden g = golden_of(Workload{}, 1, 2);
  GatedRun run = gated(synthetic_mode(Workload{}, 9), "hot.h5");
  run.identity["decode.temperature"] = "1.2";
  const GateResult r = gate_run(g, run, 0.05);
  EXPECT_EQ(r.exit_code(), kGateExperiment);
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_EQ(r.mismatches[0], "decode.temperature: golden 0.8, run 1.2");
  EXPECT_EQ(format_gate(r, "hot.h5", "g.json").rfind("EXPERIMENT: ", 0), 0u);
  // A retrained draft is the same experiment: gated, with a note.
  GatedRun retrained = gated(synthetic_mode(Workload{}, 9), "retrained.h5");
  retrained.draft_fingerprint = "xxh3:3";
  const GateResult r2 = gate_run(g, retrained, 0.05);
  EXPECT_EQ(r2.exit_code(), kGatePass);
  ASSERT_EQ(r2.notes.size(), 1u);
  EXPECT_NE(r2.notes[0].find("the draft model changed"), std::string::npos);
}

TEST(Golden, RefusesRunsOfDifferentExperiments) {
  GatedRun a = gated(synthetic_mode(Workload{}, 1), "a.h5");
  GatedRun b = gated(synthetic_mode(Workload{}, 2), "b.h5");
  b.identity["target model"] = "xxh3:9";
  try {
    make_golden({a, b}, 400);
    FAIL() << "runs of two experiments made a golden";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(e.message().find("b.h5: target model = xxh3:9 but a.h5 has xxh3:1"),
              std::string::npos)
        << e.message();
  }
  b = gated(synthetic_mode(Workload{}, 2), "b.h5");
  b.draft_fingerprint = "xxh3:8";
  EXPECT_THROW(make_golden({a, b}, 400), Error);
}

TEST(Golden, MissingStatisticsExit2) {
  const Golden g = golden_of(Workload{}, 1, 2);
  Workload shorter;
  shorter.draft_len = 2;  // positions 3 and 4 are never offered
  GatedRun run = gated(synthetic_mode(shorter, 5), "short.h5");
  const GateResult r = gate_run(g, run, 0.05);
  EXPECT_EQ(r.exit_code(), kGateMissing);
  ASSERT_FALSE(r.missing.empty());
  EXPECT_NE(r.missing[0].find("position 3 (unconditional acceptance)"), std::string::npos);
  // No test at all is never a pass.
  EXPECT_EQ(GateResult{}.exit_code(), kGateMissing);
}

// The identity read from a result file's header: the drafter's keys but its path and placement,
// the sampling, the workload, the target's fingerprint; the draft's fingerprint apart.
TEST(Golden, ExperimentIdentityFromTheHeader) {
  ResultInfo info;
  info.header.resolved_json = R"({"job": {"seed": 3, "output": "a.h5"},
    "draft": {"kind": "model", "path": "/d", "placement": "replicated", "ngram_max": 4},
    "decode": {"draft_len": 4, "tree_top_k": 0, "tree_depth": 0, "tree_nodes": 0,
               "acceptance": "real", "temperature": 0.8, "top_k": 0, "top_p": 1.0,
               "max_new_tokens": 32, "stop_at_eos": false, "stop_tokens": [],
               "modes": ["speculative"]},
    "data": {"max_prompts": 0, "batch_size": 8}, "parallel": {"tp": 2}})";
  info.header.models =
      R"({"target": {"path": "/t", "fingerprint": "xxh3:aa"},
          "draft": {"path": "/d", "fingerprint": "xxh3:bb"}})";
  info.header.prompts_hash = "fnv1a64:cc";
  const std::map<std::string, std::string> id = experiment_identity(info, "a.h5");
  EXPECT_EQ(id.at("target model"), "xxh3:aa");
  EXPECT_EQ(id.at("prompts"), "fnv1a64:cc");
  EXPECT_EQ(id.at("decode.temperature"), "0.8");
  EXPECT_EQ(id.at("draft.kind"), "model");
  EXPECT_EQ(id.at("draft.ngram_max"), "4");
  EXPECT_EQ(id.at("decode.draft_len"), "4");
  for (const char* not_identity : {"draft.path", "draft.placement", "job.seed", "data.batch_size",
                                   "parallel.tp", "decode.modes"})
    EXPECT_EQ(id.count(not_identity), 0u) << not_identity;
  EXPECT_EQ(draft_fingerprint(info, "a.h5"), "xxh3:bb");
  // Without the target's fingerprint (debug.fingerprints = false): refused, exit 2.
  info.header.models = R"({"target": {"path": "/t"}})";
  try {
    experiment_identity(info, "a.h5");
    FAIL() << "an identity without the target's fingerprint";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(e.message().find("a.h5: the file records no fingerprint of the target model"),
              std::string::npos)
        << e.message();
  }
}

TEST(Golden, JsonRoundTripAndRefusals) {
  const Golden g = golden_of(Workload{}, 1, 2);
  const nlohmann::json j = golden_to_json(g);
  EXPECT_EQ(j["format"], "specrun-golden");
  EXPECT_EQ(j["version"], 1);
  const Golden back = golden_from_json(nlohmann::json::parse(j.dump()), "g.json");
  EXPECT_EQ(back.identity, g.identity);
  ASSERT_EQ(back.metrics.size(), g.metrics.size());
  for (std::size_t i = 0; i < g.metrics.size(); ++i) {
    EXPECT_EQ(back.metrics[i].name, g.metrics[i].name);
    EXPECT_EQ(back.metrics[i].value, g.metrics[i].value);
    EXPECT_EQ(back.metrics[i].noise, g.metrics[i].noise);
  }
  auto refused = [](nlohmann::json bad, const std::string& want) {
    try {
      golden_from_json(bad, "g.json");
      ADD_FAILURE() << "accepted: " << bad.dump().substr(0, 200);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage);
      EXPECT_NE(e.message().find(want), std::string::npos) << e.message();
    }
  };
  nlohmann::json v2 = j;
  v2["version"] = 2;
  refused(v2, "golden version 2");
  nlohmann::json no_noise = j;
  no_noise["metrics"][0].erase("noise_variance");
  refused(no_noise, "has no \"noise_variance\"");
  nlohmann::json other = j;
  other["format"] = "specrun-other";
  refused(other, "not a golden");
  nlohmann::json no_metrics = j;
  no_metrics["metrics"] = nlohmann::json::array();
  refused(no_metrics, "holds no metrics");
}

}  // namespace
}  // namespace specrun
