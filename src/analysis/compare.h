// Comparison of two runs (`specrun compare BASE.h5 NEW.h5`): which phase got slower, by how much,
// with what confidence, and what changed in between (code, libraries, environment per rank,
// configuration). Pure functions on ModeData and ResultInfo, so tests build the inputs by hand.
//
// Timing changes are relative changes of a ratio statistic, NEW / BASE - 1, with a percentile
// bootstrap 95% interval (each run resampled on its own):
//   phase (mean ms per step): per-step values (the mean over the ranks that ran the step);
//   tokens/s per mode: batches, each with its generated tokens and its wall time (the point
//   value is report's tokens/s; the sequences of a batch share its wall time, so batches, not
//   prompts, are the independent unit).
// A change is a regression when it is worse than the threshold with confidence: for a phase,
// the whole interval lies above +threshold and the mean moved by more than `min_abs_ms`
// (sub-0.05 ms phases jitter by large fractions); for tokens/s, the whole interval lies below
// 1 / (1 + threshold) - 1, i.e. the time per token grew by more than the threshold (-4.8% of
// tokens/s for 5%), so one threshold means "slower by more than PCT%" everywhere.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analysis/host_load.h"
#include "analysis/summary.h"
#include "io/result_file.h"

namespace specrun {

struct CompareOptions {
  double threshold_pct = 5.0;  // a change must exceed this many percent, with confidence
  double min_abs_ms = 0.05;    // phases: and move the mean by more than this many ms per step
  int resamples = 2000;        // bootstrap resamples per interval
  std::uint64_t seed = 1;      // bootstrap seed (deterministic output)
  // Whether a busier host may take the blame for a timing change (analysis/host_load.h).
  // compare_results turns it off when the runs recorded a difference that can cause one
  // (recorded_causes): a change the run itself recorded is never the environment's.
  bool attribute_host = true;
};

// One timing quantity compared between the two runs.
struct TimingChange {
  std::string mode;  // "baseline" or "speculative"
  std::string name;  // phase name ("verify", ...) or "tokens/s"
  std::string unit;  // "ms/step" or "tokens/s"
  bool higher_is_worse = true;
  double base = 0, next = 0;            // point values in `unit`
  std::int64_t base_n = 0, next_n = 0;  // samples (steps or prompts)
  Interval relative;                    // next / base - 1, with its bootstrap 95% interval
  bool regression = false;              // worse than the threshold with confidence
  bool improvement = false;             // better than the threshold with confidence
  // A change beyond the threshold that the busier host of one run explains better than the code
  // (analysis/host_load.h); regression and improvement are then false.
  bool environment = false;
  // With host attribution off (a recorded cause, CompareOptions::attribute_host): a change the
  // busier host would have explained, judged anyway (regression/improvement kept) and listed
  // after the changes it would not explain.
  bool host_suspect = false;
  // The step total changed beyond the threshold while none of the mode's phases did: a change
  // spread thinly over every phase is run-to-run variance of the machine far more often than
  // code, which concentrates in a phase. Reported, not judged (regression/improvement false).
  bool diffuse = false;
  // Phases: the phase's milliseconds per generated token (all its steps' time over the mode's
  // tokens), the cost that stays comparable when the steps change shape (draft_len, trees).
  double base_per_token = 0, next_per_token = 0;
};

// How one phase's forward passes were issued on the device in each run (analysis/summary.h
// DevicePassCounts), when both runs recorded passes for it.
struct GraphChange {
  std::string mode, phase;  // "speculative", "verify"
  DevicePassCounts base, next;
  // The share of passes run as CUDA graphs moved by at least kGraphShareChange: fell (a step
  // that lost its graph: one host launch per kernel) or rose. Counts, not samples: no interval.
  bool fell = false, rose = false;
};
inline constexpr double kGraphShareChange = 0.10;

// The speedup (baseline over speculative time per token on paired prompts) of each run, and its
// relative change S_new / S_base - 1 with a bootstrap 95% interval.
struct SpeedupChange {
  bool present = false;  // both runs have both modes on common prompts
  Interval base, next, relative;
  bool regression = false;   // fell by more than the threshold with confidence
  bool improvement = false;  // rose by more than the threshold with confidence
  bool environment = false;  // changed beyond the threshold, as the busier host explains
};

// The expert bytes a mixture-of-experts target read per emitted token in one mode's steps
// (baseline: its decode passes, speculative: its verify passes), when both runs recorded them:
// each pass's expert bytes over the tokens its step emitted, resampled over passes. More bytes
// per token with confidence is a regression whatever the timings say: a verify that reads the
// union of more tokens' experts for the tokens it emits is the MoE cost of speculation.
struct ExpertChange {
  std::string mode, kind;                               // "speculative", "verify"
  double base_mb_per_token = 0, next_mb_per_token = 0;  // expert MB (1e6 bytes) per token
  double base_unique = 0, next_unique = 0;              // unique experts per MoE layer per pass
  std::int64_t base_n = 0, next_n = 0;                  // passes
  Interval relative;                                    // next / base - 1 of MB per emitted token
  bool regression = false;                              // more bytes per token beyond the threshold
  bool improvement = false;                             // fewer, beyond it
};

struct AcceptanceChange {
  std::string mode;
  double base_tau = 0, next_tau = 0;
  double base_alpha = 0, next_alpha = 0;
  std::vector<double> base_acceptance, next_acceptance;  // unconditional, per position
};

// One difference of a provenance field, environment variable or configuration key.
struct ProvenanceChange {
  enum class Kind { kChanged, kAdded, kRemoved };
  std::string name;  // "git_commit", "hdf5_version", "NCCL_PROTO", "decode.draft_len"
  Kind kind = Kind::kChanged;
  std::string base, next;  // values ("" for the absent side)
  std::vector<int> ranks;  // world ranks it applies to; empty for file-level fields
};

struct ProvenanceDiff {
  std::vector<ProvenanceChange> run;          // root attributes: commit, dirty, version, world
  std::vector<ProvenanceChange> libraries;    // record fields (build, libraries, host, CPU)
  std::vector<ProvenanceChange> models;       // "target model", "draft model": fingerprints
  std::vector<ProvenanceChange> environment;  // recorded variables, grouped by equal change
  std::vector<ProvenanceChange> config;       // resolved configuration keys, "section.key"
  bool empty() const {
    return run.empty() && libraries.empty() && models.empty() && environment.empty() &&
           config.empty();
  }
};

// `specrun compare`'s exit codes (docs/analysis.md).
inline constexpr int kCompareSame = 0;         // no regression beyond the threshold
inline constexpr int kCompareRegression = 1;   // same experiment, something got slower
inline constexpr int kCompareExperiments = 3;  // the configurations differ: two experiments

struct Comparison {
  std::vector<TimingChange> timings;
  // Per mode and device column (io/records.h kDeviceColumns), when both runs recorded device time
  // (CUDA): the device's time per step, unit "device ms/step", classified like a phase
  // (regression/improvement: the device's work got slower/faster with confidence). Never a
  // regression of the comparison by itself: they say whether a phase's change in `timings` ran
  // on the device (kernels, collectives) or on the host (launches, the CPU).
  std::vector<TimingChange> device;
  // Per mode and phase (draft, verify), when both runs recorded device passes (CUDA): how they
  // were issued. Never a regression by itself: it says why a phase's host time moved.
  std::vector<GraphChange> graphs;
  SpeedupChange speedup;
  std::vector<AcceptanceChange> acceptance;
  // Per mode, the target's expert bytes per emitted token (mixture-of-experts targets recorded in
  // both runs). A regression makes the comparison one (never attributed to the host: bytes are
  // not time).
  std::vector<ExpertChange> experts;
  // Per mode: how busy each run's host was, and whether one was busier (analysis/host_load.h).
  std::vector<HostChange> hosts;
  ProvenanceDiff provenance;
  // Configuration keys whose difference makes the runs two experiments rather than one
  // experiment run twice (everything but job.name/output/overwrite, timeouts and debug.*), and
  // "target model" / "draft model" when a checkpoint's content differs (even at the same path).
  std::vector<std::string> experiment_keys;
  // Cross-rank mismatches recorded in each file (io/provenance.h describe()), printed whether or
  // not they changed between the runs: a variable that reached some ranks only is a suspect in
  // either case.
  std::vector<std::string> base_mismatches, next_mismatches;
  // Each run's code: "836c867 (clean)", "a1b2c3d (dirty)".
  std::string base_code, next_code;
  std::vector<std::string> notes;  // modes present in one file only, unfinished jobs, ...
  bool regression = false;         // some timing change, the speedup or the expert bytes regressed
  CompareOptions options;
  int exit_code() const {
    return !experiment_keys.empty() ? kCompareExperiments
           : regression             ? kCompareRegression
                                    : kCompareSame;
  }
};

// "section.key" -> value text (strings as they are, other values as JSON) for every leaf of a
// nested object.
void flatten_json(const nlohmann::json& j, const std::string& prefix,
                  std::map<std::string, std::string>& out);

// Whether a difference in configuration key `key` ("decode.draft_len") makes two runs different
// experiments: true but for bookkeeping keys (job.name, job.output, job.overwrite,
// parallel.comm_timeout_s, dataset.commit_s) and debug.* (test knobs that stand in for code).
bool is_experiment_key(const std::string& key);

// The cross-rank mismatches stored in a file's header, one description each (io/provenance.h).
std::vector<std::string> recorded_mismatches(const ResultInfo& info, const std::string& path);

// Timing and acceptance changes for the modes present in both runs (others produce a note).
Comparison compare_modes(const std::vector<ModeData>& base, const std::vector<ModeData>& next,
                         const CompareOptions& options);

// Launcher variables that change on every launch (job ids, URIs, session directories, random
// transport keys) and therefore say nothing about a regression; diff_provenance skips them,
// as it skips the per-process ones (io/provenance.h).
bool is_per_launch_variable(const std::string& name);

// Differences between the two files' provenance: root attributes, every rank's record fields
// and environment (rank r of BASE against rank r of NEW; ranks present in one file only count as
// all added/removed), and the resolved configuration's keys. Malformed JSON in a file is an
// input error naming the file.
ProvenanceDiff diff_provenance(const ResultInfo& base, const ResultInfo& next,
                               const std::string& base_path, const std::string& next_path);

// The recorded differences that can cause a timing change, most likely first: the run's root
// attributes (code commit and state, version, world size), build and libraries (the CPU kernel
// variant included), models, configuration (experiment keys and debug.*, not bookkeeping), and
// environment variables. Not causes: the hostname and the GPUs' identities (another node of the
// same kind; its load and clocks are judged by the host attribution).
std::vector<const ProvenanceChange*> recorded_causes(const ProvenanceDiff& diff);

// Both files: modes, speedup, provenance, experiment keys, mismatches, notes about unfinished
// jobs. Host attribution only when recorded_causes is empty.
Comparison compare_results(const ResultReader& base, const ResultReader& next,
                           const CompareOptions& options);

// The verdict first (at most five lines: what got slower or faster, per step and per token; the
// speedup change; acceptance; what differs, ranked code > build > configuration > environment;
// cross-rank mismatches), then the full tables.
std::string format_comparison(const Comparison& comparison, const std::string& base_path,
                              const std::string& next_path);
// The verdict alone (five lines).
std::string format_verdict(const Comparison& comparison);
nlohmann::json comparison_to_json(const Comparison& comparison);

}  // namespace specrun
