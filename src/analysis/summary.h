// Derived statistics of a run, computed from the raw records (io/records.h) only: the end-of-run
// summary of `specrun run`, `specrun report` and `specrun compare` share this code. Definitions
// per DESIGN.md "Metrics" (docs/analysis.md states them with formulas):
//   tau   = tokens emitted by verify steps / verify steps (bonus included; 1.0 = no gain); the
//           first token of a sequence comes from the prefill and counts in neither
//   alpha = accepted draft tokens / drafted tokens
//   acceptance at depth i: P(n >= i) over verify steps whose proposal reached depth i
//           (unconditional) and P(n >= i | n >= i-1) over those that also accepted i-1
//           (conditional); for a chain the depth is its length, so this is acceptance by
//           draft position
//   identities: every sequence's step rows sum to its row (steps, drafted, accepted, and the
//           tokens emitted plus the prefill's to generated), every step has
//           0 <= accepted <= depth <= drafted, the accepted-length histogram sums to the
//           verify steps, the stored per-position accepted counts equal those of the step rows
//           (so they sum to the accepted tokens), and every batch has one timing row per step,
//           each with the same ranks reporting. summarize_mode throws when one fails, naming the
//           file and the identity: a broken file is an error, not a number. (tau and alpha are
//           computed from these sums: tokens / verify steps and accepted / drafted.)
//   tokens/s = generated tokens / batch seconds, where a batch's seconds are its slowest
//           sequence's wall time (the throughput of one tensor-parallel group)
//   speedup = baseline seconds per token / speculative seconds per token over paired prompts
//           (each prompt's own wall time), with a bootstrap 95% interval over prompts.
// Intervals are percentile bootstraps with a fixed seed, so the same file gives the same numbers.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "io/records.h"

namespace specrun {

// One mode's raw data as stored in (or about to be stored in) a result file.
struct ModeData {
  std::string mode;
  std::vector<SequenceRecord> sequences;
  std::vector<StepRecord> steps;
  // [rows x n_ranks x kNumPhases] ms, one row per batch step; NaN for ranks that did not take
  // part in that row's batch (other data-parallel groups).
  std::vector<float> timings_ms;
  int n_ranks = 1;
  // Prompts per batch (data.batch_size) when known, else 0. Places sequences without any step
  // record (finished at the prefill) in their batch: batch = prompt_index / batch_size.
  std::int64_t batch_size = 0;
  // From a file (load_mode_data): the batch of each timing row, the stored per-position accepted
  // counts (/<mode>/batches totals), and the file, named in identity errors. Empty when unknown.
  std::vector<std::int64_t> timing_batch;
  std::vector<std::int64_t> accepted_per_position;
  std::string source;
  // The timings rows' CPU rows, [rows x n_ranks x kNumCpuColumns] ms (io/records.h kCpuColumns),
  // and each rank's host snapshot per batch, [batches x n_ranks x kNumHostFields], with the busy
  // processes of each batch. Empty for files before schema version 3.
  std::vector<float> cpu_ms;
  std::vector<float> host;
  std::vector<std::string> host_busy;
  // The timings rows' device rows, [rows x n_ranks x kNumDeviceColumns] ms (io/records.h
  // kDeviceColumns; NaN for ranks without a device). Empty for files before schema version 5.
  std::vector<float> device_ms;
  // The timings rows' pass rows, [rows x n_ranks x kNumPassColumns] counts (io/records.h
  // kPassColumns; NaN for ranks without a device). Empty for files before schema version 6.
  std::vector<float> device_passes;
  // The expert accounting of the target's passes and of a draft model's (io/records.h
  // ExpertRecords); empty for dense models and files before schema version 7.
  ExpertRecords target_experts;
  ExpertRecords draft_experts;
};

// One pass kind's expert figures (one model, one mode). Means are over the kind's passes (and
// their MoE layers); MB are 1e6 bytes.
struct ExpertPassSummary {
  std::string kind;  // kPassKindNames
  std::int64_t passes = 0;
  double tokens_per_pass = 0;
  double unique_per_layer = 0;       // the batch's unique experts per MoE layer
  double seq_unique_per_layer = 0;   // each sequence's, mean over its rows
  double kept_unique_per_layer = 0;  // the kept tokens' (a verify's accepted paths and roots)
  double max_load = 0;               // the most tokens on one expert
  double mb_per_pass = 0;            // expert bytes read by a pass, all MoE layers
  double kept_mb_per_pass = 0;       // what the kept tokens alone would read
  // Passes inside decoding steps (decode, verify, a drafter's): their expert bytes over the
  // tokens those steps emitted; 0 for passes outside steps (prefill) or without known emitted
  // tokens.
  std::int64_t emitted = 0;
  double mb_per_emitted_token = 0;
  // Per expert-parallel rank, its share of the kind's (token, expert) pairs.
  std::vector<double> rank_share;
};

// One model's expert accounting in one mode.
struct ExpertSummary {
  bool present = false;  // false: a dense model (or a file before schema 7)
  int top_k = 0, n_experts = 0, ep = 1, layers = 0;
  std::int64_t expert_bytes = 0;
  std::vector<ExpertPassSummary> kinds;  // the kinds with passes, in kPassKindNames order
  // Every pass's expert bytes over the mode's generated tokens (the prefill's included).
  double mb_per_generated_token = 0;
  const ExpertPassSummary* kind(const std::string& name) const {
    for (const ExpertPassSummary& k : kinds)
      if (k.kind == name) return &k;
    return nullptr;
  }
};

// The expert figures of `records` in a mode whose step rows are `steps` and which generated
// `generated` tokens.
ExpertSummary summarize_experts(const ExpertRecords& records, const std::vector<StepRecord>& steps,
                                std::int64_t generated);
// Per step pass (decode, verify) of `records`: its expert bytes and the tokens its step emitted,
// in pass order (compare's samples of expert bytes per emitted token); passes of other kinds and
// of steps without step rows are left out.
void expert_step_samples(const ExpertRecords& records, const std::vector<StepRecord>& steps,
                         std::vector<double>& bytes, std::vector<double>& emitted);

// How a phase's forward passes were issued on the device (io/records.h kPassColumns), summed over
// the rows and the ranks with a device.
struct DevicePassCounts {
  double replayed = 0, captured = 0, eager = 0, unrecorded = 0;
  double launched() const { return eager + unrecorded; }  // kernel by kernel
  double total() const { return replayed + captured + launched(); }
  // The share of the passes that ran as CUDA graphs (replayed, or captured and launched); 0
  // without passes.
  double graph_share() const { return total() > 0 ? (replayed + captured) / total() : 0; }
};

struct Quantiles {
  double mean = 0, p50 = 0, p90 = 0;
};

struct Interval {
  double value = 0, low = 0, high = 0;  // estimate and bootstrap 95% interval
};

struct ModeSummary {
  std::string mode;
  std::int64_t prompts = 0;
  std::int64_t batches = 0;
  std::int64_t generated = 0;
  std::int64_t verify_steps = 0;
  std::int64_t drafted = 0;
  std::int64_t accepted = 0;
  std::int64_t step_rows = 0;                    // rows of the timings table
  double seconds = 0;                            // sum over batches of the batch's wall time
  double tokens_per_s = 0;                       // generated / seconds (one tp group)
  double tau = 0;                                // emitted per verify step
  double alpha = 0;                              // accepted / drafted
  std::vector<double> acceptance_unconditional;  // index i-1: P(n >= i), by depth i
  std::vector<double> acceptance_conditional;    // index i-1: P(n >= i | n >= i-1)
  // Proposals (speculative steps): nodes -> steps drafting that many (the tree-size
  // histogram), index n -> steps accepting n, index d -> steps whose proposal had depth d;
  // steps whose emitted token was the bonus (the accepted path ended at a leaf).
  std::map<int, std::int64_t> nodes_histogram;
  std::vector<std::int64_t> accepted_histogram;
  std::vector<std::int64_t> depth_histogram;
  std::int64_t bonus_steps = 0;
  double mean_nodes = 0, mean_depth = 0;  // per verify step
  // phase name -> per-step ms quantiles (over steps; a step's value is the mean over the ranks
  // that ran it)
  std::map<std::string, Quantiles> phases;
  // phase name -> per-rank quantiles of ms per step (index = world rank; zeros for a rank
  // without rows)
  std::map<std::string, std::vector<Quantiles>> phases_per_rank;
  // Device column name (kDeviceColumns) -> per-step ms quantiles of the device time (mean over
  // the ranks with a device); empty when no rank recorded device time (CPU runs, older files).
  std::map<std::string, Quantiles> device_phases;
  // "draft" / "verify" -> how the phase's forward passes were issued on the device
  // (device_pass_counts); empty when no rank recorded passes (CPU runs, older files).
  std::map<std::string, DevicePassCounts> device_passes;
  struct Category {
    std::int64_t prompts = 0;
    std::int64_t generated = 0;
    double tau = 0, alpha = 0;
  };
  std::map<std::string, Category> categories;  // "(none)" for prompts without a category
  // The expert accounting (mixture-of-experts models): the target's passes, a draft model's.
  ExpertSummary target_experts, draft_experts;
};

// A verify pass against a decode step, when the run has both (baseline decode, speculative
// verify) for a mixture-of-experts target: the ratios of the unique experts per layer, of the
// expert MB per step and of the expert MB per emitted token (verify over decode).
struct ExpertRatio {
  bool present = false;
  double unique_per_layer = 0, mb_per_step = 0, mb_per_emitted_token = 0;
};

struct RunSummary {
  std::vector<ModeSummary> modes;
  bool paired = false;  // both modes present with common prompts
  Interval speedup;     // overall
  std::int64_t paired_prompts = 0;
  std::int64_t greedy_identical = 0;  // prompts whose two outputs are token-identical
  bool greedy = false;                // temperature 0: the outputs must be identical
  std::map<std::string, Interval> speedup_by_category;  // only with more than one category
  ExpertRatio verify_over_decode;                       // the target's experts, verify / decode
};

// Throws (exit code 2) naming the file, mode and prompt when the records break an identity above.
void check_identities(const ModeData& data);
// What check_identities checks, one line for `report`.
extern const char* const kIdentitiesChecked;
// Checks the identities, then derives the statistics.
ModeSummary summarize_mode(const ModeData& data);
// `greedy`: the job decoded at temperature 0. `seed` drives the bootstrap (deterministic).
RunSummary summarize_run(const std::vector<ModeData>& modes, bool greedy, std::uint64_t seed = 1);

// Percentile bootstrap over items: value = sum(num) / sum(den); each resample draws n items
// with replacement. Empty input or a zero denominator gives 0.
Interval bootstrap_ratio(const std::vector<double>& num, const std::vector<double>& den,
                         int resamples, std::uint64_t seed);
// The bootstrap variance of the same statistic (the sample variance of its resamples, the same
// resamples as bootstrap_ratio's for the same seed): the statistic's noise from which items were
// drawn. 0 for fewer than two items.
double bootstrap_ratio_variance(const std::vector<double>& num, const std::vector<double>& den,
                                int resamples, std::uint64_t seed);
// The sample variance of `x` (denominator n - 1); 0 for fewer than two values.
double sample_variance(const std::vector<double>& x);

// Relative change between two independent samples of ratio statistics:
// value = (sum new_num / sum new_den) / (sum base_num / sum base_den) - 1 (0.2 = +20%), each
// sample resampled on its own. Empty input or zero denominators give 0.
Interval bootstrap_relative_change(const std::vector<double>& base_num,
                                   const std::vector<double>& base_den,
                                   const std::vector<double>& new_num,
                                   const std::vector<double>& new_den, int resamples,
                                   std::uint64_t seed);

// Speedup of paired prompts: (sum b_seconds / sum b_tokens) / (sum s_seconds / sum s_tokens),
// with a percentile bootstrap 95% interval over prompts (resampled with replacement).
Interval paired_speedup(const std::vector<double>& b_seconds, const std::vector<double>& b_tokens,
                        const std::vector<double>& s_seconds, const std::vector<double>& s_tokens,
                        int resamples, std::uint64_t seed);

// The speedup's inputs: per prompt decoded in both modes (in speculative order), the baseline
// and speculative wall seconds and generated tokens. Empty without both modes.
struct PairedSamples {
  std::vector<double> b_seconds, b_tokens, s_seconds, s_tokens;
  std::vector<std::string> categories;  // category_name of each prompt
  std::int64_t identical = 0;           // prompts whose two outputs are token-identical
};
PairedSamples paired_samples(const std::vector<ModeData>& modes);

// Relative change of the paired speedup between two runs, S_new / S_base - 1, each run's prompts
// resampled on their own (percentile bootstrap 95% interval).
Interval bootstrap_speedup_change(const PairedSamples& base, const PairedSamples& next,
                                  int resamples, std::uint64_t seed);

// Per-batch throughput samples of a mode, in batch order: tokens[b] = tokens the batch generated,
// seconds[b] = its wall time (its slowest sequence), so that
// sum(tokens) / sum(seconds) == summarize_mode(data).tokens_per_s. Batches, not prompts, are the
// unit to resample: the sequences of one batch share its wall time.
void throughput_samples(const ModeData& data, std::vector<double>& tokens,
                        std::vector<double>& seconds);

// Per row of a [rows x n_ranks x width] table, the mean of `column` over the ranks with a value
// (NaN: the rank did not run that row); rows without any value are left out.
std::vector<double> per_step_mean(const std::vector<float>& table, int n_ranks, int width,
                                  int column);
// The same with the minimum over those ranks.
std::vector<double> per_step_min(const std::vector<float>& table, int n_ranks, int width,
                                 int column);
// Per-step values of one phase (ms, the mean over the ranks that ran the step), in row order.
std::vector<double> phase_per_step(const ModeData& data, int phase);
// Per-step milliseconds (one value per step of `data`) summed over the mode's generated tokens;
// 0 for a mode without tokens.
double ms_per_token(const std::vector<double>& per_step, const ModeData& data);
// Each phase's (and the total's) milliseconds per generated token: its per-step values summed
// over the mode's generated tokens; the cost that stays comparable when a step changes shape
// (draft length, tree size). 0 for a mode without tokens.
std::map<std::string, double> phase_ms_per_token(const ModeData& data);
// Per-step values of one CPU column (io/records.h kCpuColumns; ms, the same rows); empty for
// files without CPU rows.
std::vector<double> cpu_per_step(const ModeData& data, int column);
// Per-step values of one device column (io/records.h kDeviceColumns; ms, the same rows, mean
// over the ranks with a device); empty for runs without device rows.
std::vector<double> device_per_step(const ModeData& data, int column);
// "draft" and "verify" -> their pass counts over every row and every rank with a device, for the
// phases with at least one pass; empty for runs without pass rows.
std::map<std::string, DevicePassCounts> device_pass_counts(const ModeData& data);

class ResultReader;
// Every mode's committed data from a result file, baseline first.
std::vector<ModeData> load_mode_data(const ResultReader& reader);
// Whether the file's resolved configuration (/job resolved) decoded greedily (temperature 0).
bool resolved_is_greedy(const std::string& resolved_json);
// job.seed of the resolved configuration (1 when absent): the bootstrap seed `run` uses for its
// end-of-run summary, so that `report` prints the same intervals.
std::uint64_t resolved_seed(const std::string& resolved_json);

// Human-readable text of the summary (what `run` prints at the end and `report` prints);
// this and summary_to_json live in summary_format.cpp.
std::string format_summary(const RunSummary& summary);
// The same numbers as one JSON object (`report --json`); keys are documented in
// docs/analysis.md.
nlohmann::json summary_to_json(const RunSummary& summary);
// One phase's pass counts as JSON: passes, replayed, captured, eager, unrecorded, graph_share.
nlohmann::json passes_to_json(const DevicePassCounts& counts);

}  // namespace specrun
