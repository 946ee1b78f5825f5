// The acceptance statistics that `specrun golden` records and `specrun gate` tests
// (docs/analysis.md "Golden acceptance curves and the gate"), each with its noise, and the
// identity of the experiment a result file measured. Pure functions on ModeData and ResultInfo.
//
// The gated metrics of a speculative mode, each a ratio of sums over its prompts (the values
// `report` prints, analysis/summary.h):
//   "unconditional@d"  P(n >= d) over the steps whose proposal reached depth d, d = 1..D
//   "conditional@d"    P(n >= d | n >= d-1) over those that also accepted d-1, d = 2..D
//                      (conditional@1 is unconditional@1)
//   "tau"              tokens emitted by verify steps / verify steps
//   "tau[CATEGORY]"    the same over one category's prompts, when the prompts have more than one
// A run's noise of a metric (its "within" variance) is the per-prompt bootstrap variance of the
// ratio (prompts resampled with replacement: the steps of one prompt are correlated, so a
// binomial over steps understates it), never below the per-step floor: p (1 - p) / steps for an
// acceptance, the variance of a step's emitted tokens / steps for tau (what one prompt, or
// prompts that all behave alike, leave to the bootstrap).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace specrun {

struct ResultInfo;

// One metric of one run.
struct MetricEstimate {
  std::string name;      // "unconditional@1", "conditional@2", "tau", "tau[code]"
  double value = 0;      // the ratio of sums (report's value)
  double variance = 0;   // within-run noise: bootstrap over prompts, floored per step
  std::int64_t den = 0;  // the denominator's count: steps
  std::int64_t prompts = 0;
};

// "position 1 (unconditional acceptance)", "tau of category code": the metric as a reader says it.
std::string metric_label(const std::string& name);

// Every gated metric of a speculative mode, in a fixed order (positions, then tau, then
// categories). A metric whose denominator is 0 in this run has den 0 and value 0.
// `resamples`: bootstrap resamples per metric (deterministic with `seed`).
std::vector<MetricEstimate> estimate_metrics(const ModeData& speculative, int resamples,
                                             std::uint64_t seed);

// The experiment a result file measured: field -> value. A golden and a gated run must agree on
// every field (else `gate` exits 3). The fields: "target model" (its content fingerprint), the
// drafter (every draft.* key but draft.path and draft.placement: where a draft lies and how it is
// placed change no acceptance; its content is recorded apart), decode.draft_len, tree_top_k,
// tree_depth, tree_nodes and acceptance, the sampling (decode.temperature, top_k, top_p), and the
// workload: "prompts" (the prompt file's content hash: its tokens, rendered with the chat
// template when it was prepared), data.max_prompts, decode.max_new_tokens, stop_at_eos and
// stop_tokens. The chat template reaches the identity twice: in the prompts' tokens, and in the
// target's fingerprint (tokenizer_config.json, *.jinja).
// Throws (exit code 2) naming `path` and the field when the file does not record one (a file
// written without fingerprints: debug.fingerprints = false, or before issue 17).
std::map<std::string, std::string> experiment_identity(const ResultInfo& info,
                                                       const std::string& path);

// The draft model's content fingerprint, "" without a draft model directory (n-gram): recorded,
// not part of the identity, so that a retrained (worse) draft is gated as a drop.
std::string draft_fingerprint(const ResultInfo& info, const std::string& path);

// One result file, read for golden or gate: its identity, draft fingerprint, the speculative
// mode's metrics, and what says which run it was.
struct GatedRun {
  std::string path;
  std::map<std::string, std::string> identity;
  std::string draft_fingerprint;
  std::vector<MetricEstimate> metrics;
  std::uint64_t seed = 1;  // job.seed
  std::string git_commit;  // the code that ran it
  std::int64_t prompts = 0;
};

class ResultReader;
// Reads `reader`'s speculative mode (identities checked, as `report` does). Throws (exit code 2)
// naming the file when it has no speculative mode with verify steps (a baseline-only job), did
// not finish, or lacks an identity field.
GatedRun read_gated_run(const ResultReader& reader, int resamples);

}  // namespace specrun
