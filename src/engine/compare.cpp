#include "engine/compare.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "common/error.h"
#include "common/json_depth.h"
#include "io/provenance.h"

namespace specrun {
namespace {

const ModeData* find_mode(const std::vector<ModeData>& modes, const std::string& name) {
  for (const ModeData& m : modes)
    if (m.mode == name) return &m;
  return nullptr;
}

// Worse/better than the threshold with confidence, in the direction that is bad.
void classify(TimingChange& c, const CompareOptions& options) {
  const double t = options.threshold_pct / 100.0;
  const Interval& iv = c.relative;
  if (c.higher_is_worse) {
    bool big_enough = c.unit != "ms/step" || std::fabs(c.next - c.base) > options.min_abs_ms;
    c.regression = iv.low > t && big_enough;
    c.improvement = iv.high < -t && big_enough;
  } else {
    // Time per token grew by more than t <=> tokens/s fell below 1 / (1 + t) of the base.
    c.regression = iv.high < 1.0 / (1.0 + t) - 1.0;
    c.improvement = iv.low > t;
  }
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// A phase's milliseconds per generated token: its per-step values summed over the mode's tokens.
double per_token(const std::vector<double>& per_step, const ModeData& data) {
  double ms = 0, tokens = 0;
  for (double x : per_step) ms += x;
  for (const SequenceRecord& sq : data.sequences) tokens += static_cast<double>(sq.generated);
  return tokens > 0 ? ms / tokens : 0;
}

}  // namespace

Comparison compare_modes(const std::vector<ModeData>& base, const std::vector<ModeData>& next,
                         const CompareOptions& options) {
  Comparison out;
  out.options = options;
  std::uint64_t seed = options.seed;
  for (const char* mode : {kModeBaseline, kModeSpeculative}) {
    const ModeData* b = find_mode(base, mode);
    const ModeData* n = find_mode(next, mode);
    if (b == nullptr && n == nullptr) continue;
    if (b == nullptr || n == nullptr) {
      out.notes.push_back(std::string("mode ") + mode + " is only in " +
                          (b == nullptr ? "NEW" : "BASE") + ": not compared");
      continue;
    }
    if (b->sequences.empty() || n->sequences.empty()) {
      out.notes.push_back(std::string("mode ") + mode + " has no committed prompts in " +
                          (b->sequences.empty() ? "BASE" : "NEW") + ": not compared");
      continue;
    }
    for (int p = 0; p < kNumPhases; ++p) {
      std::vector<double> bv = phase_per_step(*b, p), nv = phase_per_step(*n, p);
      if (bv.empty() || nv.empty()) continue;
      TimingChange c;
      c.mode = mode;
      c.name = kPhaseNames[p];
      c.unit = "ms/step";
      c.higher_is_worse = true;
      c.base = mean(bv);
      c.next = mean(nv);
      c.base_n = static_cast<std::int64_t>(bv.size());
      c.next_n = static_cast<std::int64_t>(nv.size());
      // A phase that is zero in both runs (draft in baseline) has nothing to compare.
      if (c.base == 0 && c.next == 0) continue;
      std::vector<double> bones(bv.size(), 1.0), nones(nv.size(), 1.0);
      c.relative = bootstrap_relative_change(bv, bones, nv, nones, options.resamples, ++seed);
      if (c.base == 0) c.relative = Interval{INFINITY, INFINITY, INFINITY};
      c.base_per_token = per_token(bv, *b);
      c.next_per_token = per_token(nv, *n);
      classify(c, options);
      out.timings.push_back(c);
    }
    TimingChange t;
    t.mode = mode;
    t.name = "tokens/s";
    t.unit = "tokens/s";
    t.higher_is_worse = false;
    std::vector<double> btok, bsec, ntok, nsec;
    throughput_samples(*b, btok, bsec);
    throughput_samples(*n, ntok, nsec);
    ModeSummary bs = summarize_mode(*b), ns = summarize_mode(*n);
    t.base = bs.tokens_per_s;
    t.next = ns.tokens_per_s;
    t.base_n = static_cast<std::int64_t>(btok.size());
    t.next_n = static_cast<std::int64_t>(ntok.size());
    t.relative = bootstrap_relative_change(btok, bsec, ntok, nsec, options.resamples, ++seed);
    classify(t, options);
    out.timings.push_back(t);

    if (bs.drafted > 0 || ns.drafted > 0) {
      out.acceptance.push_back(AcceptanceChange{mode, bs.tau, ns.tau, bs.alpha, ns.alpha,
                                                bs.acceptance_unconditional,
                                                ns.acceptance_unconditional});
    }
  }
  const PairedSamples bp = paired_samples(base), np = paired_samples(next);
  if (!bp.b_seconds.empty() && !np.b_seconds.empty()) {
    SpeedupChange& s = out.speedup;
    s.present = true;
    s.base = paired_speedup(bp.b_seconds, bp.b_tokens, bp.s_seconds, bp.s_tokens, options.resamples,
                            ++seed);
    s.next = paired_speedup(np.b_seconds, np.b_tokens, np.s_seconds, np.s_tokens, options.resamples,
                            ++seed);
    s.relative = bootstrap_speedup_change(bp, np, options.resamples, ++seed);
    const double t = options.threshold_pct / 100.0;
    s.regression = s.relative.high < 1.0 / (1.0 + t) - 1.0;
    s.improvement = s.relative.low > t;
  }
  for (const TimingChange& c : out.timings) out.regression = out.regression || c.regression;
  out.regression = out.regression || out.speedup.regression;
  return out;
}

bool is_per_launch_variable(const std::string& name) {
  // Values every launch draws anew (Open MPI 4.1 and Slurm); checked by exact name.
  static constexpr std::array<std::string_view, 19> kNames = {
      "OMPI_MCA_ess_base_jobid",
      "OMPI_MCA_orte_ess_jobid",
      "OMPI_MCA_orte_hnp_uri",
      "OMPI_MCA_orte_local_daemon_uri",
      "OMPI_MCA_orte_jobfam_session_dir",
      "OMPI_MCA_orte_top_session_dir",
      "OMPI_MCA_orte_precondition_transports",  // a random key per job
      "OMPI_FILE_LOCATION",
      // How the launch was written (`mpirun A : B` has two application contexts), not what the
      // ranks run with; a variable given to some contexts only shows as a mismatch instead.
      "OMPI_APP_CTX_NUM_PROCS",
      "OMPI_FIRST_RANKS",
      "OMPI_NUM_APP_CTX",
      "SLURM_JOB_ID",
      "SLURM_JOBID",
      "SLURM_STEP_ID",
      "SLURM_STEPID",
      "SLURM_JOB_START_TIME",
      "SLURM_JOB_END_TIME",
      "SLURM_SRUN_COMM_PORT",
      "SLURM_STEP_LAUNCHER_PORT",
  };
  return std::find(kNames.begin(), kNames.end(), name) != kNames.end();
}

namespace {

nlohmann::json parse_json(const std::string& text, const std::string& what,
                          const std::string& path) {
  nlohmann::json j = parse_json_or_discarded(text);
  SPEC_INPUT_CHECK(!j.is_discarded(), path << ": " << what
                                           << " is not valid JSON; the file is damaged or was "
                                              "not written by specrun");
  return j;
}

std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Adds one (name, base?, next?) difference on `rank`, merging ranks with the same change.
void add_change(std::vector<ProvenanceChange>& list, const std::string& name,
                const std::optional<std::string>& b, const std::optional<std::string>& n,
                std::optional<int> rank) {
  if (b == n) return;
  ProvenanceChange c;
  c.name = name;
  c.kind = !b   ? ProvenanceChange::Kind::kAdded
           : !n ? ProvenanceChange::Kind::kRemoved
                : ProvenanceChange::Kind::kChanged;
  c.base = b.value_or("");
  c.next = n.value_or("");
  for (ProvenanceChange& e : list) {
    if (e.name == c.name && e.kind == c.kind && e.base == c.base && e.next == c.next) {
      if (rank) e.ranks.push_back(*rank);
      return;
    }
  }
  if (rank) c.ranks.push_back(*rank);
  list.push_back(std::move(c));
}

std::optional<std::string> lookup(const std::map<std::string, std::string>& m,
                                  const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
}

}  // namespace

void flatten_json(const nlohmann::json& j, const std::string& prefix,
                  std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten_json(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    out[prefix] = value_text(j);
  }
}

ProvenanceDiff diff_provenance(const ResultInfo& base, const ResultInfo& next,
                               const std::string& base_path, const std::string& next_path) {
  ProvenanceDiff d;
  const ResultHeader& bh = base.header;
  const ResultHeader& nh = next.header;
  auto run_field = [&](const char* name, const std::string& b, const std::string& n) {
    add_change(d.run, name, b, n, std::nullopt);
  };
  run_field("git_commit", bh.git_commit, nh.git_commit);
  run_field("git_dirty", bh.git_dirty ? "true" : "false", nh.git_dirty ? "true" : "false");
  run_field("specrun_version", bh.specrun_version, nh.specrun_version);
  run_field("world_size", std::to_string(bh.world_size), std::to_string(nh.world_size));
  run_field("tp", std::to_string(bh.tp), std::to_string(nh.tp));
  run_field("dp", std::to_string(bh.dp), std::to_string(nh.dp));
  run_field("prompts_hash", bh.prompts_hash, nh.prompts_hash);

  // Models by content (files from before fingerprints were recorded have none: not a change).
  const nlohmann::json bm = parse_json(bh.models, "/provenance models", base_path);
  const nlohmann::json nm = parse_json(nh.models, "/provenance models", next_path);
  for (const char* role : {"target", "draft"}) {
    auto fingerprint = [&](const nlohmann::json& m) -> std::optional<std::string> {
      if (!m.is_object() || !m.contains(role) || !m[role].is_object()) return std::nullopt;
      const nlohmann::json& r = m[role];
      return r.value("fingerprint", std::string()) + " (" + r.value("path", std::string()) + ")";
    };
    const auto b = fingerprint(bm), n = fingerprint(nm);
    if (bh.models != "{}" && nh.models != "{}")
      add_change(d.models, std::string(role) + " model", b, n, std::nullopt);
  }

  // Per rank: record fields and environment, rank r against rank r.
  const std::size_t ranks = std::min(bh.provenance.size(), nh.provenance.size());
  static const std::set<std::string> kSkipFields = {"pid",        "world_rank",     "local_rank",
                                                    "world_size", "environment",    "git_commit",
                                                    "git_dirty",  "specrun_version"};
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::string what = "provenance record of rank " + std::to_string(r);
    nlohmann::json b = parse_json(bh.provenance[r], what, base_path);
    nlohmann::json n = parse_json(nh.provenance[r], what, next_path);
    std::map<std::string, std::string> bf, nf, be, ne;
    for (auto it = b.begin(); b.is_object() && it != b.end(); ++it)
      if (!kSkipFields.count(it.key())) bf[it.key()] = value_text(it.value());
    for (auto it = n.begin(); n.is_object() && it != n.end(); ++it)
      if (!kSkipFields.count(it.key())) nf[it.key()] = value_text(it.value());
    if (b.contains("environment")) flatten_json(b["environment"], "", be);
    if (n.contains("environment")) flatten_json(n["environment"], "", ne);
    std::set<std::string> keys;
    for (const auto& [k, v] : bf) keys.insert(k);
    for (const auto& [k, v] : nf) keys.insert(k);
    for (const std::string& k : keys)
      add_change(d.libraries, k, lookup(bf, k), lookup(nf, k), static_cast<int>(r));
    keys.clear();
    for (const auto& [k, v] : be) keys.insert(k);
    for (const auto& [k, v] : ne) keys.insert(k);
    for (const std::string& k : keys) {
      if (is_per_process_variable(k) || is_per_launch_variable(k)) continue;
      add_change(d.environment, k, lookup(be, k), lookup(ne, k), static_cast<int>(r));
    }
  }
  auto by_name = [](const ProvenanceChange& a, const ProvenanceChange& b) {
    return a.name != b.name ? a.name < b.name : a.ranks.front() < b.ranks.front();
  };
  std::sort(d.libraries.begin(), d.libraries.end(), by_name);
  std::sort(d.environment.begin(), d.environment.end(), by_name);

  std::map<std::string, std::string> bc, nc;
  flatten_json(parse_json(bh.resolved_json, "/job resolved", base_path), "", bc);
  flatten_json(parse_json(nh.resolved_json, "/job resolved", next_path), "", nc);
  std::set<std::string> keys;
  for (const auto& [k, v] : bc) keys.insert(k);
  for (const auto& [k, v] : nc) keys.insert(k);
  // job.output differs between any two runs being compared and says nothing about them.
  keys.erase("job.output");
  for (const std::string& k : keys) add_change(d.config, k, lookup(bc, k), lookup(nc, k), {});
  return d;
}

bool is_experiment_key(const std::string& key) {
  static const std::set<std::string> kBookkeeping = {"job.name", "job.output", "job.overwrite",
                                                     "parallel.comm_timeout_s", "dataset.commit_s"};
  return kBookkeeping.count(key) == 0 && key.rfind("debug.", 0) != 0;
}

std::vector<std::string> recorded_mismatches(const ResultInfo& info, const std::string& path) {
  std::vector<std::string> out;
  const nlohmann::json j = parse_json_or_discarded(info.header.provenance_mismatches);
  SPEC_INPUT_CHECK(!j.is_discarded() && j.is_array(),
                   path << ": /provenance/mismatches is not a JSON list");
  for (const nlohmann::json& m : j) {
    try {
      out.push_back(describe(m.get<Mismatch>()));
    } catch (const nlohmann::json::exception& e) {
      SPEC_INPUT_FAIL(path << ": /provenance/mismatches holds a malformed entry (" << e.what()
                           << ")");
    }
  }
  return out;
}

Comparison compare_results(const ResultReader& base, const ResultReader& next,
                           const CompareOptions& options) {
  Comparison c = compare_modes(load_mode_data(base), load_mode_data(next), options);
  c.provenance = diff_provenance(base.info(), next.info(), base.path(), next.path());
  for (const ProvenanceChange& ch : c.provenance.models) c.experiment_keys.push_back(ch.name);
  for (const ProvenanceChange& ch : c.provenance.config)
    if (is_experiment_key(ch.name)) c.experiment_keys.push_back(ch.name);
  c.base_mismatches = recorded_mismatches(base.info(), base.path());
  c.next_mismatches = recorded_mismatches(next.info(), next.path());
  auto code = [](const ResultHeader& h) {
    return (h.git_commit.empty() ? std::string("unknown") : h.git_commit.substr(0, 7)) +
           (h.git_dirty ? " (dirty)" : " (clean)");
  };
  c.base_code = code(base.info().header);
  c.next_code = code(next.info().header);
  if (base.info().finished.empty())
    c.notes.push_back("BASE " + base.path() + " is from a job that did not finish");
  if (next.info().finished.empty())
    c.notes.push_back("NEW " + next.path() + " is from a job that did not finish");
  return c;
}

namespace {

std::string pct(double x) {
  if (std::isinf(x)) return "+inf%";
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100.0 * x << "%";
  return out.str();
}

const char* kind_name(ProvenanceChange::Kind k) {
  switch (k) {
    case ProvenanceChange::Kind::kAdded:
      return "added";
    case ProvenanceChange::Kind::kRemoved:
      return "removed";
    default:
      return "changed";
  }
}

std::string quote(const std::string& s) {
  return "\"" + s + "\"";
}

std::string describe_change(const ProvenanceChange& c) {
  std::string out = c.name + ": ";
  switch (c.kind) {
    case ProvenanceChange::Kind::kAdded:
      out += "added " + quote(c.next);
      break;
    case ProvenanceChange::Kind::kRemoved:
      out += "removed (was " + quote(c.base) + ")";
      break;
    default:
      out += quote(c.base) + " -> " + quote(c.next);
  }
  if (!c.ranks.empty())
    out +=
        std::string(c.ranks.size() == 1 ? " on rank " : " on ranks ") + format_rank_ranges(c.ranks);
  return out;
}

}  // namespace

namespace {

std::string ci(const Interval& iv) {
  return "[95% CI " + pct(iv.low) + ", " + pct(iv.high) + "]";
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

// "speculative verify +48.6% [95% CI +42.8%, +55.2%] per step (0.610 -> 0.905 ms/token)"
std::string describe_timing(const TimingChange& t) {
  std::string out = t.mode + " " + t.name + " " + pct(t.relative.value) + " " + ci(t.relative);
  if (t.unit == "ms/step")
    out += " per step (" + fixed(t.base_per_token, 3) + " -> " + fixed(t.next_per_token, 3) +
           " ms/token)";
  return out;
}

// Up to `limit` items joined by "; ", then "; +N more".
std::string join_limited(const std::vector<std::string>& items, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > limit) out += "; +" + std::to_string(items.size() - limit) + " more";
  return out;
}

// The headline: what the runs are, and what changed with confidence, worst first.
std::string verdict_line(const Comparison& c) {
  // The phases that changed, speculative before baseline, largest first; "total" and tokens/s
  // only when no phase explains them.
  std::vector<const TimingChange*> worse, better;
  auto explained = [&](const TimingChange& t, bool regression) {
    if (t.name != "total" && t.name != "tokens/s") return false;
    for (const TimingChange& o : c.timings)
      if (o.mode == t.mode && o.name != "total" && o.name != "tokens/s" &&
          (regression ? o.regression : o.improvement))
        return true;
    return false;
  };
  for (const TimingChange& t : c.timings) {
    if (t.regression && !explained(t, true)) worse.push_back(&t);
    if (t.improvement && !explained(t, false)) better.push_back(&t);
  }
  auto by_size = [](const TimingChange* a, const TimingChange* b) {
    const bool sa = a->mode == kModeSpeculative, sb = b->mode == kModeSpeculative;
    if (sa != sb) return sa;
    return std::fabs(a->relative.value) > std::fabs(b->relative.value);
  };
  std::sort(worse.begin(), worse.end(), by_size);
  std::sort(better.begin(), better.end(), by_size);
  std::vector<std::string> w, b;
  for (const TimingChange* t : worse) w.push_back(describe_timing(*t));
  for (const TimingChange* t : better) b.push_back(describe_timing(*t));
  if (!c.experiment_keys.empty()) {
    std::vector<std::string> costs;
    for (const TimingChange& t : c.timings)
      if (t.unit == "ms/step" && t.mode == kModeSpeculative && t.name != "total")
        costs.push_back(t.name + " " + fixed(t.base_per_token, 3) + " -> " +
                        fixed(t.next_per_token, 3));
    return "DIFFERENT EXPERIMENTS (" + join_limited(c.experiment_keys, 4) +
           " differ; phases not judged as regressions): speculative ms per token: " +
           (costs.empty() ? std::string("-") : join_limited(costs, 6));
  }
  if (!w.empty()) return "REGRESSION: " + join_limited(w, 3);
  if (c.speedup.regression) return "REGRESSION: the speedup fell (below)";
  if (!b.empty()) return "FASTER: " + join_limited(b, 3);
  return "SAME: no phase, throughput or speedup changed by more than " +
         fixed(c.options.threshold_pct, 1) + "% with 95% confidence";
}

std::string speedup_line(const Comparison& c) {
  const SpeedupChange& s = c.speedup;
  if (!s.present) return "speedup: not measured (needs baseline and speculative modes in both)";
  std::string out = "speedup " + fixed(s.base.value, 3) + "x -> " + fixed(s.next.value, 3) +
                    "x: " + pct(s.relative.value) + " " + ci(s.relative);
  if (s.regression) out += "  REGRESSION";
  if (s.improvement) out += "  improved";
  return out;
}

std::string acceptance_line(const Comparison& c) {
  for (const AcceptanceChange& a : c.acceptance)
    if (a.mode == kModeSpeculative)
      return "acceptance: tau " + fixed(a.base_tau, 3) + " -> " + fixed(a.next_tau, 3) +
             ", alpha " + fixed(a.base_alpha, 3) + " -> " + fixed(a.next_alpha, 3);
  return "acceptance: no speculative mode in both";
}

// What differs between the runs, most likely cause first: code, build and libraries,
// configuration, environment per rank.
std::string differs_line(const Comparison& c) {
  std::vector<std::string> parts;
  if (c.base_code != c.next_code)
    parts.push_back("code " + c.base_code + " -> " + c.next_code);
  else
    parts.push_back("code " + c.base_code + " on both");
  const ProvenanceDiff& p = c.provenance;
  std::vector<std::string> items;
  for (const ProvenanceChange& ch : p.run)
    if (ch.name != "git_commit" && ch.name != "git_dirty") items.push_back(describe_change(ch));
  for (const ProvenanceChange& ch : p.libraries) items.push_back(describe_change(ch));
  if (!items.empty()) parts.push_back("build/libraries: " + join_limited(items, 2));
  items.clear();
  for (const ProvenanceChange& ch : p.models) items.push_back(describe_change(ch));
  if (!items.empty()) parts.push_back("models: " + join_limited(items, 2));
  items.clear();
  for (const ProvenanceChange& ch : p.config) items.push_back(describe_change(ch));
  if (!items.empty()) parts.push_back("configuration: " + join_limited(items, 3));
  items.clear();
  for (const ProvenanceChange& ch : p.environment) items.push_back(describe_change(ch));
  if (!items.empty()) parts.push_back("environment: " + join_limited(items, 3));
  if (parts.size() == 1 && c.base_code == c.next_code)
    parts.push_back(
        "nothing else recorded differs (build, libraries, models, configuration, environment)");
  return "differs: " + join_limited(parts, 8);
}

std::string mismatch_line(const Comparison& c) {
  if (c.base_mismatches.empty() && c.next_mismatches.empty())
    return "cross-rank mismatches: none in either run";
  std::string out = "cross-rank mismatches:";
  if (!c.next_mismatches.empty()) out += " NEW: " + join_limited(c.next_mismatches, 2);
  if (!c.base_mismatches.empty())
    out += std::string(c.next_mismatches.empty() ? "" : " |") +
           " BASE: " + join_limited(c.base_mismatches, 2);
  return out;
}

}  // namespace

std::string format_verdict(const Comparison& c) {
  return verdict_line(c) + "\n" + speedup_line(c) + "\n" + acceptance_line(c) + "\n" +
         differs_line(c) + "\n" + mismatch_line(c) + "\n";
}

std::string format_comparison(const Comparison& c, const std::string& base_path,
                              const std::string& next_path) {
  std::ostringstream out;
  out << format_verdict(c) << "(exit " << c.exit_code()
      << ": 0 same, 1 regression, 3 different experiments, 2 error)\n\n";
  out << "compare BASE " << base_path << "\n     vs NEW  " << next_path << "\n(threshold "
      << c.options.threshold_pct << "%, phases also > " << c.options.min_abs_ms
      << " ms; 95% bootstrap intervals)\n\n";
  out << "timings                          base        new    change   [95% CI]\n";
  for (const TimingChange& t : c.timings) {
    std::string label = t.mode + " " + t.name + (t.unit == "ms/step" ? " ms/step" : "");
    out << "  " << std::left << std::setw(28) << label << std::right << std::fixed
        << std::setprecision(3) << std::setw(9) << t.base << std::setw(11) << t.next
        << std::setw(10) << pct(t.relative.value) << "   [" << pct(t.relative.low) << ", "
        << pct(t.relative.high) << "]";
    if (t.regression) out << "  REGRESSION";
    if (t.improvement) out << "  improved";
    out << "\n";
  }
  if (!c.acceptance.empty()) {
    out << "\nacceptance\n";
    for (const AcceptanceChange& a : c.acceptance)
      out << "  " << a.mode << std::fixed << std::setprecision(3) << ": tau " << a.base_tau
          << " -> " << a.next_tau << " (" << std::showpos << a.next_tau - a.base_tau
          << std::noshowpos << "), alpha " << a.base_alpha << " -> " << a.next_alpha << " ("
          << std::showpos << a.next_alpha - a.base_alpha << std::noshowpos << ")\n";
  }
  out << "\nprovenance";
  const ProvenanceDiff& p = c.provenance;
  if (p.empty()) out << ": no differences (code, libraries, models, environment, configuration)";
  out << "\n";
  auto section = [&](const char* title, const std::vector<ProvenanceChange>& list) {
    if (list.empty()) return;
    out << "  " << title << ":\n";
    for (const ProvenanceChange& ch : list) out << "    " << describe_change(ch) << "\n";
  };
  section("run", p.run);
  section("build, libraries, host", p.libraries);
  section("models (content fingerprints)", p.models);
  section("environment (per rank)", p.environment);
  section("configuration", p.config);
  for (const std::string& note : c.notes) out << "\nnote: " << note << "\n";

  out << "\n";
  if (c.regression) {
    out << "REGRESSION (worse than " << std::defaultfloat << c.options.threshold_pct
        << "% with 95% confidence):\n";
    for (const TimingChange& t : c.timings)
      if (t.regression)
        out << "  " << t.mode << " " << t.name << " " << pct(t.relative.value) << " [95% CI "
            << pct(t.relative.low) << ", " << pct(t.relative.high) << "]\n";
  } else {
    out << std::defaultfloat << "no regression beyond " << c.options.threshold_pct << "%\n";
  }
  return out.str();
}

nlohmann::json comparison_to_json(const Comparison& c) {
  nlohmann::json timings = nlohmann::json::array();
  for (const TimingChange& t : c.timings)
    timings.push_back({{"mode", t.mode},
                       {"name", t.name},
                       {"unit", t.unit},
                       {"higher_is_worse", t.higher_is_worse},
                       {"base", t.base},
                       {"new", t.next},
                       {"base_samples", t.base_n},
                       {"new_samples", t.next_n},
                       {"relative_change", t.relative.value},
                       {"ci_low", t.relative.low},
                       {"ci_high", t.relative.high},
                       {"regression", t.regression},
                       {"improvement", t.improvement},
                       {"base_ms_per_token", t.base_per_token},
                       {"new_ms_per_token", t.next_per_token}});
  nlohmann::json acceptance = nlohmann::json::array();
  for (const AcceptanceChange& a : c.acceptance)
    acceptance.push_back({{"mode", a.mode},
                          {"base_tau", a.base_tau},
                          {"new_tau", a.next_tau},
                          {"base_alpha", a.base_alpha},
                          {"new_alpha", a.next_alpha},
                          {"base_acceptance", a.base_acceptance},
                          {"new_acceptance", a.next_acceptance}});
  auto changes = [](const std::vector<ProvenanceChange>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const ProvenanceChange& ch : list) {
      nlohmann::json j{{"name", ch.name}, {"kind", kind_name(ch.kind)}};
      if (ch.kind != ProvenanceChange::Kind::kAdded) j["base"] = ch.base;
      if (ch.kind != ProvenanceChange::Kind::kRemoved) j["new"] = ch.next;
      if (!ch.ranks.empty()) j["ranks"] = ch.ranks;
      out.push_back(j);
    }
    return out;
  };
  nlohmann::json speedup = nullptr;
  if (c.speedup.present)
    speedup = {{"base", c.speedup.base.value},
               {"base_ci", {c.speedup.base.low, c.speedup.base.high}},
               {"new", c.speedup.next.value},
               {"new_ci", {c.speedup.next.low, c.speedup.next.high}},
               {"relative_change", c.speedup.relative.value},
               {"ci_low", c.speedup.relative.low},
               {"ci_high", c.speedup.relative.high},
               {"regression", c.speedup.regression},
               {"improvement", c.speedup.improvement}};
  std::istringstream verdict(format_verdict(c));
  std::vector<std::string> verdict_lines;
  for (std::string line; std::getline(verdict, line);) verdict_lines.push_back(line);
  return nlohmann::json{
      {"verdict", verdict_lines},
      {"exit_code", c.exit_code()},
      {"experiment_keys", c.experiment_keys},
      {"speedup", speedup},
      {"code", {{"base", c.base_code}, {"new", c.next_code}}},
      {"mismatches", {{"base", c.base_mismatches}, {"new", c.next_mismatches}}},
      {"threshold_pct", c.options.threshold_pct},
      {"min_abs_ms", c.options.min_abs_ms},
      {"regression", c.regression},
      {"timings", timings},
      {"acceptance", acceptance},
      {"provenance",
       {{"run", changes(c.provenance.run)},
        {"libraries", changes(c.provenance.libraries)},
        {"models", changes(c.provenance.models)},
        {"environment", changes(c.provenance.environment)},
        {"config", changes(c.provenance.config)}}},
      {"notes", c.notes},
  };
}

}  // namespace specrun
