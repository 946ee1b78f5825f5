// The expert accounting's summary (summarize_experts): experts and bytes each pass read, per
// pass kind and per emitted token, from a mode's expert records (docs/analysis.md).
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "analysis/summary.h"
#include "io/result_file.h"

namespace specrun {

namespace {

// (batch, step) -> tokens the step emitted over its sequences; steps with an unknown count
// (result schema 1) are left out.
std::map<std::pair<std::int64_t, std::int32_t>, std::int64_t> emitted_by_step(
    const std::vector<StepRecord>& steps) {
  std::map<std::pair<std::int64_t, std::int32_t>, std::int64_t> out;
  std::set<std::pair<std::int64_t, std::int32_t>> unknown;
  for (const StepRecord& st : steps) {
    if (st.emitted < 0) unknown.insert({st.batch, st.step});
    out[{st.batch, st.step}] += std::max(st.emitted, 0);
  }
  for (const auto& key : unknown) out.erase(key);
  return out;
}

double expert_mb(const ExpertRecords& r, std::int64_t p) {
  double bytes = 0;
  for (int l = 0; l < r.n_layers(); ++l) bytes += static_cast<double>(r.bytes(p, l));
  return bytes / 1e6;
}

}  // namespace

ExpertSummary summarize_experts(const ExpertRecords& r, const std::vector<StepRecord>& steps,
                                std::int64_t generated) {
  ExpertSummary out;
  if (r.empty()) return out;
  out.present = true;
  out.top_k = r.top_k;
  out.n_experts = r.n_experts;
  out.ep = r.ep;
  out.layers = r.n_layers();
  out.expert_bytes = r.expert_bytes;
  const auto emitted = emitted_by_step(steps);
  const int L = r.n_layers();
  const std::size_t ep = static_cast<std::size_t>(std::max(r.ep, 1));
  struct Sums {
    std::int64_t passes = 0, tokens = 0, rows = 0;
    double unique = 0, seq_unique = 0, kept_unique = 0, max_load = 0, mb = 0, kept_mb = 0;
    double step_mb = 0;  // of the passes inside steps with a known emitted count
    std::set<std::pair<std::int64_t, std::int32_t>> steps;
    std::vector<double> rank_pairs;
  };
  std::vector<Sums> kinds(kNumPassKinds);
  double total_mb = 0;
  std::size_t row = 0;
  for (std::int64_t p = 0; p < r.passes(); ++p) {
    Sums& k = kinds[static_cast<std::size_t>(r.kind[p])];
    k.rank_pairs.resize(ep, 0);
    k.passes += 1;
    k.tokens += r.tokens[p];
    for (int l = 0; l < L; ++l) {
      const std::size_t at = static_cast<std::size_t>(p) * L + l;
      k.unique += r.unique[at];
      k.kept_unique += r.kept_unique[at];
      k.max_load += r.max_load[at];
      for (std::size_t e = 0; e < ep; ++e) k.rank_pairs[e] += r.rank_pairs[at * ep + e];
    }
    for (std::int32_t s = 0; s < r.sequences[p]; ++s, ++row) {
      k.rows += 1;
      for (int l = 0; l < L; ++l) k.seq_unique += r.seq_unique[row * L + l];
    }
    const double mb = expert_mb(r, p);
    double kept_mb = 0;
    for (int l = 0; l < L; ++l) kept_mb += static_cast<double>(r.kept_bytes(p, l)) / 1e6;
    k.mb += mb;
    k.kept_mb += kept_mb;
    total_mb += mb;
    if (r.step[p] >= 0 && emitted.count({r.batch[p], r.step[p]})) {
      k.step_mb += mb;
      k.steps.insert({r.batch[p], r.step[p]});
    }
  }
  for (int i = 0; i < kNumPassKinds; ++i) {
    const Sums& k = kinds[static_cast<std::size_t>(i)];
    if (k.passes == 0) continue;
    ExpertPassSummary e;
    e.kind = kPassKindNames[static_cast<std::size_t>(i)];
    e.passes = k.passes;
    const double passes = static_cast<double>(k.passes), cells = passes * L;
    e.tokens_per_pass = static_cast<double>(k.tokens) / passes;
    e.unique_per_layer = k.unique / cells;
    e.kept_unique_per_layer = k.kept_unique / cells;
    e.max_load = k.max_load / cells;
    e.seq_unique_per_layer = k.rows > 0 ? k.seq_unique / (static_cast<double>(k.rows) * L) : 0;
    e.mb_per_pass = k.mb / passes;
    e.kept_mb_per_pass = k.kept_mb / passes;
    for (const auto& key : k.steps) e.emitted += emitted.at(key);
    e.mb_per_emitted_token = e.emitted > 0 ? k.step_mb / static_cast<double>(e.emitted) : 0;
    double pairs = 0;
    for (double x : k.rank_pairs) pairs += x;
    for (double x : k.rank_pairs) e.rank_share.push_back(pairs > 0 ? x / pairs : 0);
    out.kinds.push_back(std::move(e));
  }
  out.mb_per_generated_token = generated > 0 ? total_mb / static_cast<double>(generated) : 0;
  return out;
}

void expert_step_samples(const ExpertRecords& r, const std::vector<StepRecord>& steps,
                         std::vector<double>& bytes, std::vector<double>& emitted) {
  bytes.clear();
  emitted.clear();
  const auto by_step = emitted_by_step(steps);
  for (std::int64_t p = 0; p < r.passes(); ++p) {
    if (r.kind[p] != kPassDecode && r.kind[p] != kPassVerify) continue;
    const auto it = by_step.find({r.batch[p], r.step[p]});
    if (it == by_step.end()) continue;
    bytes.push_back(expert_mb(r, p) * 1e6);
    emitted.push_back(static_cast<double>(it->second));
  }
}

}  // namespace specrun
