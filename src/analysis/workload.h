// What a run's workload was (issue 47, "workload provenance"), from its records: acceptance
// measured on degenerate outputs (a model looping on a phrase) is not acceptance on chat, and
// acceptance depends on the context length, so `report` shows both next to the acceptance:
//  - degenerate outputs: a prompt whose output (the speculative mode's, else the baseline's) of at
//    least kMinTokens tokens has fewer than kDegenerateShare unique n-grams (n = kNgram) among
//    its n-grams (a loop of period p over T tokens has about p / (T - n + 1));
//  - prompt-length buckets (< 128, 128-511, 512-2047, 2048-8191, >= 8192 tokens): prompts and
//    the speculative tau of each (emitted / verify steps of its prompts).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace specrun {

inline constexpr int kNgram = 4;
inline constexpr int kMinTokens = 16;
inline constexpr double kDegenerateShare = 0.3;

struct WorkloadSummary {
  std::string mode;  // whose outputs were judged
  std::int64_t judged = 0, degenerate = 0;
  std::vector<std::string> degenerate_ids;  // the first few, for the text report
  struct Bucket {
    std::string name;  // "<128", "128-511", ...
    std::int64_t prompts = 0;
    double tau = 0;  // speculative; 0 without speculative steps
  };
  std::vector<Bucket> buckets;  // those with prompts
};

// The unique share of n-grams of `tokens` (1 when it has fewer than n tokens).
double unique_ngram_share(const std::vector<std::int32_t>& tokens, int n = kNgram);

WorkloadSummary summarize_workload(const std::vector<ModeData>& modes);
nlohmann::json workload_to_json(const WorkloadSummary& w);
// "workload: ..." lines for the text report.
std::string format_workload(const WorkloadSummary& w);

}  // namespace specrun
