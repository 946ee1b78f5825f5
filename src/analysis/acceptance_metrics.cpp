#include "analysis/acceptance_metrics.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "analysis/compare.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "io/result_file.h"

namespace specrun {
namespace {

// Per prompt (in sequence-row order): the numerators and denominators of every metric, and the
// emitted tokens of its steps (tau's per-step floor).
struct PromptSamples {
  std::vector<std::string> category;
  // [depth d-1][prompt]
  std::vector<std::vector<double>> offered, reached, prior;
  std::vector<double> tau_num, tau_den;
  std::vector<std::vector<double>> emitted;  // [prompt]: each step's emitted tokens (known ones)
};

PromptSamples prompt_samples(const ModeData& data) {
  PromptSamples p;
  int depth = 0;
  for (const StepRecord& st : data.steps) depth = std::max(depth, st.depth);
  const std::size_t n = data.sequences.size();
  std::map<std::int64_t, std::size_t> row_of;
  for (std::size_t i = 0; i < n; ++i) {
    const SequenceRecord& s = data.sequences[i];
    row_of[s.prompt_index] = i;
    p.category.push_back(s.category.empty() ? "(none)" : s.category);
    p.tau_num.push_back(static_cast<double>(s.generated) - 1.0);
    p.tau_den.push_back(static_cast<double>(s.verify_steps));
  }
  p.emitted.resize(n);
  for (auto* v : {&p.offered, &p.reached, &p.prior}) v->assign(depth, std::vector<double>(n, 0));
  for (const StepRecord& st : data.steps) {
    const auto it = row_of.find(st.prompt_index);
    SPEC_INPUT_CHECK(it != row_of.end(), data.source
                                             << ": " << data.mode << ": step rows name prompt "
                                             << st.prompt_index << ", which has no sequence row");
    const std::size_t i = it->second;
    if (st.emitted >= 0) p.emitted[i].push_back(st.emitted);
    for (int d = 1; d <= st.depth; ++d) {
      p.offered[d - 1][i] += 1;
      if (st.accepted >= d - 1) p.prior[d - 1][i] += 1;
      if (st.accepted >= d) p.reached[d - 1][i] += 1;
    }
  }
  return p;
}

// The prompts `keep` of a per-prompt vector.
std::vector<double> subset(const std::vector<double>& v, const std::vector<std::size_t>& keep) {
  std::vector<double> out;
  out.reserve(keep.size());
  for (std::size_t i : keep) out.push_back(v[i]);
  return out;
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

MetricEstimate ratio_metric(const std::string& name, const std::vector<double>& num,
                            const std::vector<double>& den, double floor_variance, int resamples,
                            std::uint64_t seed) {
  MetricEstimate m;
  m.name = name;
  m.prompts = static_cast<std::int64_t>(num.size());
  const double d = sum(den);
  m.den = static_cast<std::int64_t>(d);
  if (d <= 0) return m;
  m.value = sum(num) / d;
  m.variance = std::max(bootstrap_ratio_variance(num, den, resamples, seed), floor_variance);
  return m;
}

// An acceptance's per-step floor: the binomial variance of a proportion over `den` steps, with
// Jeffreys' half a success and half a failure added to p, so that a proportion of exactly 0 or 1
// (every step accepted a position) still has noise.
double binomial_floor(const std::vector<double>& num, const std::vector<double>& den) {
  const double d = sum(den);
  if (d <= 0) return 0;
  const double p = (sum(num) + 0.5) / (d + 1);
  return p * (1 - p) / d;
}

// tau's per-step floor over the prompts `keep`: the variance of a step's emitted tokens / steps,
// with half a step at each extreme (1 and depth + 1) added, as for an acceptance, so that steps
// that all emitted the same still have noise.
double tau_floor(const PromptSamples& p, const std::vector<std::size_t>& keep) {
  const double top = static_cast<double>(p.offered.size()) + 1;
  double s = 0.5 * (1 + top), ss = 0.5 * (1 + top * top), n = 0;
  for (std::size_t i : keep)
    for (double e : p.emitted[i]) {
      s += e;
      ss += e * e;
      n += 1;
    }
  if (n < 1) return 0;
  const double mean = s / (n + 1);
  return std::max(0.0, (ss - (n + 1) * mean * mean) / n) / n;
}

std::string config_text(const std::map<std::string, std::string>& config, const std::string& key,
                        const std::string& path) {
  const auto it = config.find(key);
  SPEC_INPUT_CHECK(it != config.end(), path << ": /job resolved has no " << key
                                            << ": the experiment's identity cannot be read");
  return it->second;
}

// The entry `role` of the file's /provenance models attribute, or null.
nlohmann::json model_entry(const ResultInfo& info, const std::string& role,
                           const std::string& path) {
  const nlohmann::json models = parse_json_or_discarded(info.header.models);
  SPEC_INPUT_CHECK(!models.is_discarded() && models.is_object(),
                   path << ": /provenance models is not a JSON object");
  if (!models.contains(role) || !models[role].is_object()) return nullptr;
  return models[role];
}

}  // namespace

std::string metric_label(const std::string& name) {
  const auto at = name.find('@');
  if (at != std::string::npos)
    return "position " + name.substr(at + 1) + " (" + name.substr(0, at) + " acceptance)";
  if (name.rfind("tau[", 0) == 0 && name.back() == ']')
    return "tau of category " + name.substr(4, name.size() - 5);
  return name;
}

std::vector<MetricEstimate> estimate_metrics(const ModeData& speculative, int resamples,
                                             std::uint64_t seed) {
  const PromptSamples p = prompt_samples(speculative);
  std::vector<MetricEstimate> out;
  const int depth = static_cast<int>(p.offered.size());
  for (int d = 1; d <= depth; ++d) {
    const auto& num = p.reached[d - 1];
    out.push_back(ratio_metric("unconditional@" + std::to_string(d), num, p.offered[d - 1],
                               binomial_floor(num, p.offered[d - 1]), resamples, seed));
  }
  for (int d = 2; d <= depth; ++d) {
    const auto& num = p.reached[d - 1];
    out.push_back(ratio_metric("conditional@" + std::to_string(d), num, p.prior[d - 1],
                               binomial_floor(num, p.prior[d - 1]), resamples, seed));
  }
  std::vector<std::size_t> all(p.tau_num.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  out.push_back(ratio_metric("tau", p.tau_num, p.tau_den, tau_floor(p, all), resamples, seed));
  const std::set<std::string> categories(p.category.begin(), p.category.end());
  if (categories.size() > 1)
    for (const std::string& c : categories) {
      std::vector<std::size_t> keep;
      for (std::size_t i = 0; i < p.category.size(); ++i)
        if (p.category[i] == c) keep.push_back(i);
      out.push_back(ratio_metric("tau[" + c + "]", subset(p.tau_num, keep), subset(p.tau_den, keep),
                                 tau_floor(p, keep), resamples, seed));
    }
  return out;
}

std::map<std::string, std::string> experiment_identity(const ResultInfo& info,
                                                       const std::string& path) {
  std::map<std::string, std::string> config;
  const nlohmann::json resolved = parse_json_or_discarded(info.header.resolved_json);
  SPEC_INPUT_CHECK(!resolved.is_discarded() && resolved.is_object(),
                   path << ": /job resolved is not a JSON object");
  flatten_json(resolved, "", config);
  std::map<std::string, std::string> id;
  const nlohmann::json target = model_entry(info, "target", path);
  SPEC_INPUT_CHECK(target.is_object() && target.value("fingerprint", std::string()) != "",
                   path << ": the file records no fingerprint of the target model (/provenance "
                           "models): it was written with debug.fingerprints = false or by a "
                           "specrun before fingerprints; rerun the job to gate it");
  id["target model"] = target["fingerprint"].get<std::string>();
  for (const auto& [key, value] : config)
    if (key.rfind("draft.", 0) == 0 && key != "draft.path" && key != "draft.placement")
      id[key] = value;
  for (const char* key :
       {"decode.draft_len", "decode.tree_top_k", "decode.tree_depth", "decode.tree_nodes",
        "decode.acceptance", "decode.temperature", "decode.top_k", "decode.top_p",
        "decode.max_new_tokens", "decode.stop_at_eos", "decode.stop_tokens", "data.max_prompts"})
    id[key] = config_text(config, key, path);
  SPEC_INPUT_CHECK(!info.header.prompts_hash.empty(),
                   path << ": /job has no prompts_hash: the workload cannot be identified");
  id["prompts"] = info.header.prompts_hash;
  return id;
}

std::string draft_fingerprint(const ResultInfo& info, const std::string& path) {
  const nlohmann::json draft = model_entry(info, "draft", path);
  return draft.is_object() ? draft.value("fingerprint", std::string()) : std::string();
}

GatedRun read_gated_run(const ResultReader& reader, int resamples) {
  const ResultInfo& info = reader.info();
  GatedRun run;
  run.path = reader.path();
  SPEC_INPUT_CHECK(!info.finished.empty(),
                   run.path << ": the job did not finish: its acceptance covers part of the "
                               "workload only (finish it with --resume)");
  run.identity = experiment_identity(info, run.path);
  run.draft_fingerprint = draft_fingerprint(info, run.path);
  run.seed = resolved_seed(info.header.resolved_json);
  run.git_commit = info.header.git_commit + (info.header.git_dirty ? " (dirty)" : "");
  const std::vector<ModeData> modes = load_mode_data(reader);
  const ModeData* spec = nullptr;
  for (const ModeData& m : modes)
    if (m.mode == kModeSpeculative) spec = &m;
  SPEC_INPUT_CHECK(spec != nullptr, run.path << ": no speculative mode (a baseline-only job): "
                                                "there is no acceptance to gate");
  check_identities(*spec);
  SPEC_INPUT_CHECK(!spec->steps.empty(),
                   run.path << ": the speculative mode has no verify steps: no acceptance to gate");
  run.prompts = static_cast<std::int64_t>(spec->sequences.size());
  run.metrics = estimate_metrics(*spec, resamples, 1);
  return run;
}

}  // namespace specrun
