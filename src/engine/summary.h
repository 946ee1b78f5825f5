// Derived statistics of a run, computed from the raw records (io/records.h) only: the end-of-run
// summary of `specrun run` and `specrun report` share this code. Definitions per DESIGN.md
// "Metrics":
//   tau   = tokens emitted by verify steps / verify steps (bonus included; 1.0 = no gain); the
//           first token of a sequence comes from the prefill and counts in neither
//   alpha = accepted draft tokens / drafted tokens
//   acceptance at position i: P(n >= i) over verify steps that drafted >= i tokens
//   (unconditional) and P(n >= i | n >= i-1) (conditional)
//   speedup = baseline seconds per token / speculative seconds per token, per prompt and overall,
//   with a bootstrap 95% interval over prompts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/records.h"

namespace specrun {

// One mode's raw data as stored in (or about to be stored in) a result file.
struct ModeData {
  std::string mode;
  std::vector<SequenceRecord> sequences;
  std::vector<StepRecord> steps;
  // [rows x ranks x kNumPhases] ms, one row per batch step.
  std::vector<float> timings_ms;
  int n_ranks = 1;
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
  std::int64_t generated = 0;
  std::int64_t verify_steps = 0;
  double seconds = 0;                            // sum over batches of the batch's wall time
  double tokens_per_s = 0;                       // generated / seconds (one tp group)
  double tau = 0;                                // emitted per verify step
  double alpha = 0;                              // accepted / drafted
  std::vector<double> acceptance_unconditional;  // index i-1: P(n >= i)
  std::vector<double> acceptance_conditional;    // index i-1: P(n >= i | n >= i-1)
  // phase name -> per-step ms quantiles (over steps, averaged over ranks)
  std::map<std::string, Quantiles> phases;
  // phase name -> per-rank mean ms per step
  std::map<std::string, std::vector<double>> phases_per_rank;
  // category -> (tau, alpha, tokens/s) for the categories present
  struct Category {
    std::int64_t prompts = 0;
    double tau = 0, alpha = 0;
  };
  std::map<std::string, Category> categories;
};

struct RunSummary {
  std::vector<ModeSummary> modes;
  bool paired = false;  // both modes present with common prompts
  Interval speedup;     // overall
  std::int64_t paired_prompts = 0;
  std::int64_t greedy_identical = 0;  // prompts whose two outputs are token-identical
  bool greedy = false;
  std::map<std::string, Interval> speedup_by_category;
};

ModeSummary summarize_mode(const ModeData& data);
// `seed` drives the bootstrap resampling (deterministic).
RunSummary summarize_run(const std::vector<ModeData>& modes, bool greedy, std::uint64_t seed = 1);

// Speedup of paired prompts: (sum b_seconds / sum b_tokens) / (sum s_seconds / sum s_tokens),
// with a percentile bootstrap 95% interval over prompts (resampled with replacement).
Interval paired_speedup(const std::vector<double>& b_seconds, const std::vector<double>& b_tokens,
                        const std::vector<double>& s_seconds, const std::vector<double>& s_tokens,
                        int resamples, std::uint64_t seed);

class ResultReader;
// Every mode's committed data from a result file, baseline first.
std::vector<ModeData> load_mode_data(const ResultReader& reader);

// Human-readable text of the summary (what `run` prints at the end and `report` prints).
std::string format_summary(const RunSummary& summary);

}  // namespace specrun
