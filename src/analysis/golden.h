// Golden acceptance curves (`specrun golden RESULT.h5... --out golden.json`) and the gate that
// tests a run against one (`specrun gate RESULT.h5 --golden golden.json`); docs/analysis.md
// "Golden acceptance curves and the gate" states the rules. Pure functions on GatedRun
// (analysis/acceptance_metrics.h) and JSON, so tests build the inputs by hand.
//
// The golden's noise of a metric, from k runs with values x_i and within-run variances w_i
// (per-prompt bootstrap): between = the sample variance of the x_i (k >= 2; 0 for one run),
// within = mean w_i, and
//   run part      = max(0, between - within) x (1 + 1/k)
//   sampling part = within / k
//   noise         = run part + sampling part
// i.e. the run-to-run spread that sampling does not explain (nondeterministic kernels, the
// machine), which the golden's mean carries 1/k of and a new run carries whole, plus the
// sampling noise of the golden's mean (a new run's own comes from that run). It equals
// max(0, between - within) + max(between, within) / k. One run: noise = its bootstrap variance.
//
// The gate tests each metric the golden holds, one-sided (a drop only):
//   t = (golden - candidate) / sqrt(noise + candidate's within variance),  p = P(T_df >= t)
// with Student's t at the Welch-Satterthwaite degrees of freedom of the run part (k - 1) and the
// sampling variances (the fewer prompts - 1): a run-to-run spread estimated from 3 runs is
// itself uncertain, and a normal tail would make a golden whose runs happened to agree alarm on
// later runs. The family-wise false-alarm rate is alpha over all the metrics, with Holm's
// step-down rule (the i-th smallest of m p-values is compared with alpha / (m - i + 1); valid
// under any dependence between the metrics).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analysis/acceptance_metrics.h"

namespace specrun {

inline constexpr const char* kGoldenFormat = "specrun-golden";
inline constexpr int kGoldenVersion = 1;

struct GoldenMetric {
  std::string name;                // "unconditional@1", ... (acceptance_metrics.h)
  double value = 0;                // mean of the runs' values
  std::vector<double> run_values;  // one per run, in the golden's run order
  double between = 0;              // sample variance of run_values (0 for one run)
  double within = 0;               // mean within-run variance (per-prompt bootstrap)
  double noise = 0;                // the golden's noise (rule above)
  double run_part = 0;             // its run part (estimated with k - 1 degrees of freedom)
  std::int64_t den = 0;            // the smallest run's denominator (steps)
};

struct GoldenRun {
  std::string path;
  std::uint64_t seed = 1;
  std::string git_commit;
  std::int64_t prompts = 0;
};

struct Golden {
  std::map<std::string, std::string> identity;  // experiment_identity of every run
  std::string draft_fingerprint;                // the runs' draft ("" without a draft model)
  std::vector<GoldenRun> runs;
  int resamples = 0;
  std::vector<GoldenMetric> metrics;
  // "between-run" (two or more runs) or "per-prompt bootstrap" (one run).
  std::string noise_rule() const;
};

// The golden of `runs` (at least one). Throws (exit code 2) naming the file and the field when
// a run's experiment differs from the first's (identity or draft fingerprint), or when a run
// lacks a metric the first has (a position its proposals never reached).
Golden make_golden(const std::vector<GatedRun>& runs, int resamples);

nlohmann::json golden_to_json(const Golden& golden);
// Throws (exit code 2) naming `path` and the key when the JSON is not a golden of a known
// version or lacks a field the gate needs.
Golden golden_from_json(const nlohmann::json& j, const std::string& path);

// One metric's test.
struct GateTest {
  std::string name;
  double golden = 0, candidate = 0;
  double drop = 0;       // golden - candidate (> 0: the candidate is lower)
  double sd = 0;         // sqrt(golden noise + candidate within variance)
  double z = 0, p = 1;   // one-sided p of a drop at least this large under the noise
  double df = 0;         // Welch-Satterthwaite degrees of freedom of sd^2
  double p_holm = 1;     // Holm-adjusted p (compared with alpha)
  double threshold = 0;  // Holm's per-rank level alpha / (m - rank) for this p
  bool significant = false;
};

// `specrun gate`'s exit codes (docs/analysis.md).
inline constexpr int kGatePass = 0;
inline constexpr int kGateDrop = 1;
inline constexpr int kGateMissing = 2;
inline constexpr int kGateExperiment = 3;

struct GateResult {
  double alpha = 0.05;
  std::vector<GateTest> tests;  // the golden's metric order
  // Identity fields that differ: "decode.temperature: golden 0.8, run 0.5".
  std::vector<std::string> mismatches;
  // Statistics the gate needs and does not have: a metric of the golden the run cannot estimate.
  std::vector<std::string> missing;
  std::vector<std::string> notes;  // a changed draft, metrics not gated
  int exit_code() const {
    if (!mismatches.empty()) return kGateExperiment;
    if (!missing.empty()) return kGateMissing;
    for (const GateTest& t : tests)
      if (t.significant) return kGateDrop;
    return tests.empty() ? kGateMissing : kGatePass;
  }
};

// The one-sided p-value of a drop `drop` under noise of standard deviation `sd` estimated with
// `df` degrees of freedom (Student's t; the normal above 1e6): P(T_df >= drop / sd). sd 0: 0 for
// a drop, 1 otherwise.
double drop_p_value(double drop, double sd, double df);
// Welch-Satterthwaite: the degrees of freedom of a + b, variances estimated with df_a and df_b.
double satterthwaite_df(double a, double df_a, double b, double df_b);
// Holm's step-down rule over `tests`' p at family-wise level `alpha`: sets p_holm, threshold and
// significant.
void apply_holm(std::vector<GateTest>& tests, double alpha);

GateResult gate_run(const Golden& golden, const GatedRun& run, double alpha);

// The verdict first (PASS with the smallest margin, DROP naming each significant metric with
// how much and its probability under noise, EXPERIMENT naming the fields, MISSING naming the
// statistics), then the table of tests.
std::string format_gate(const GateResult& result, const std::string& run_path,
                        const std::string& golden_path);
nlohmann::json gate_to_json(const GateResult& result);

}  // namespace specrun
