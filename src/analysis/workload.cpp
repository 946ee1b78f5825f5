#include "analysis/workload.h"

#include <algorithm>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace specrun {

namespace {

struct BucketBounds {
  const char* name;
  std::int64_t below;
};
constexpr BucketBounds kBuckets[] = {{"<128", 128},
                                     {"128-511", 512},
                                     {"512-2047", 2048},
                                     {"2048-8191", 8192},
                                     {">=8192", INT64_MAX}};

}  // namespace

double unique_ngram_share(const std::vector<std::int32_t>& tokens, int n) {
  if (static_cast<int>(tokens.size()) < n) return 1.0;
  std::set<std::vector<std::int32_t>> seen;
  const std::size_t count = tokens.size() - static_cast<std::size_t>(n) + 1;
  for (std::size_t i = 0; i < count; ++i)
    seen.emplace(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                 tokens.begin() + static_cast<std::ptrdiff_t>(i) + n);
  return static_cast<double>(seen.size()) / static_cast<double>(count);
}

WorkloadSummary summarize_workload(const std::vector<ModeData>& modes) {
  WorkloadSummary w;
  const ModeData* judged = nullptr;
  const ModeData* spec = nullptr;
  for (const ModeData& m : modes) {
    if (m.mode == "speculative") spec = &m;
    if (m.mode == "baseline" && judged == nullptr) judged = &m;
  }
  if (spec != nullptr) judged = spec;
  if (judged == nullptr && !modes.empty()) judged = &modes.front();
  if (judged == nullptr) return w;
  w.mode = judged->mode;
  for (const SequenceRecord& s : judged->sequences) {
    if (static_cast<int>(s.output_tokens.size()) < kMinTokens) continue;
    ++w.judged;
    if (unique_ngram_share(s.output_tokens) < kDegenerateShare) {
      ++w.degenerate;
      if (w.degenerate_ids.size() < 5) w.degenerate_ids.push_back(s.prompt_id);
    }
  }
  const ModeData& lengths = spec != nullptr ? *spec : *judged;
  for (const BucketBounds& b : kBuckets) {
    WorkloadSummary::Bucket bucket{b.name, 0, 0};
    std::int64_t emitted = 0, steps = 0;
    const std::int64_t above = &b == kBuckets ? 0 : (&b - 1)->below;
    for (const SequenceRecord& s : lengths.sequences) {
      if (s.prompt_len < above || s.prompt_len >= b.below) continue;
      ++bucket.prompts;
      if (spec != nullptr) {
        emitted += std::max<std::int64_t>(0, s.generated - 1);  // the prefill's token excluded
        steps += s.verify_steps;
      }
    }
    bucket.tau = steps > 0 ? static_cast<double>(emitted) / static_cast<double>(steps) : 0.0;
    if (bucket.prompts > 0) w.buckets.push_back(bucket);
  }
  return w;
}

nlohmann::json workload_to_json(const WorkloadSummary& w) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const WorkloadSummary::Bucket& b : w.buckets)
    buckets.push_back({{"prompt_len", b.name}, {"prompts", b.prompts}, {"tau", b.tau}});
  return {{"outputs_of", w.mode},
          {"degenerate",
           {{"judged", w.judged},
            {"degenerate", w.degenerate},
            {"rule", "unique " + std::to_string(kNgram) + "-gram share < " +
                         std::to_string(kDegenerateShare).substr(0, 3) +
                         " (outputs of >= " + std::to_string(kMinTokens) + " tokens)"}}},
          {"prompt_length_buckets", buckets}};
}

std::string format_workload(const WorkloadSummary& w) {
  if (w.mode.empty()) return "";
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << "workload: prompt lengths";
  for (const WorkloadSummary::Bucket& b : w.buckets) {
    out << " " << b.name << ": " << b.prompts;
    if (b.tau > 0) out << " (tau " << b.tau << ")";
    out << ";";
  }
  out << " degenerate outputs (" << w.mode << "): " << w.degenerate << " of " << w.judged
      << " judged\n";
  if (w.degenerate > 0) {
    out << "NOTE: " << w.degenerate << " of " << w.judged << " outputs repeat themselves (unique "
        << kNgram << "-gram share < " << std::setprecision(1) << kDegenerateShare << "; e.g.";
    for (const std::string& id : w.degenerate_ids) out << " " << id;
    out << "): acceptance measured on loops is not acceptance on chat\n";
  }
  return out.str();
}

}  // namespace specrun
