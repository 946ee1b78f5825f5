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
  for (const TimingChange& c : out.timings) out.regression = out.regression || c.regression;
  return out;
}

bool is_per_launch_variable(const std::string& name) {
  // Values every launch draws anew (Open MPI 4.1 and Slurm); checked by exact name.
  static constexpr std::array<std::string_view, 16> kNames = {
      "OMPI_MCA_ess_base_jobid",
      "OMPI_MCA_orte_ess_jobid",
      "OMPI_MCA_orte_hnp_uri",
      "OMPI_MCA_orte_local_daemon_uri",
      "OMPI_MCA_orte_jobfam_session_dir",
      "OMPI_MCA_orte_top_session_dir",
      "OMPI_MCA_orte_precondition_transports",  // a random key per job
      "OMPI_FILE_LOCATION",
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

// "section.key" -> value text, for every leaf of a nested object.
void flatten(const nlohmann::json& j, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    out[prefix] = value_text(j);
  }
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
    if (b.contains("environment")) flatten(b["environment"], "", be);
    if (n.contains("environment")) flatten(n["environment"], "", ne);
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
  flatten(parse_json(bh.resolved_json, "/job resolved", base_path), "", bc);
  flatten(parse_json(nh.resolved_json, "/job resolved", next_path), "", nc);
  std::set<std::string> keys;
  for (const auto& [k, v] : bc) keys.insert(k);
  for (const auto& [k, v] : nc) keys.insert(k);
  // job.output differs between any two runs being compared and says nothing about them.
  keys.erase("job.output");
  for (const std::string& k : keys) add_change(d.config, k, lookup(bc, k), lookup(nc, k), {});
  return d;
}

Comparison compare_results(const ResultReader& base, const ResultReader& next,
                           const CompareOptions& options) {
  Comparison c = compare_modes(load_mode_data(base), load_mode_data(next), options);
  c.provenance = diff_provenance(base.info(), next.info(), base.path(), next.path());
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

std::string format_comparison(const Comparison& c, const std::string& base_path,
                              const std::string& next_path) {
  std::ostringstream out;
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
  if (p.empty()) out << ": no differences (code, libraries, environment, configuration)";
  out << "\n";
  auto section = [&](const char* title, const std::vector<ProvenanceChange>& list) {
    if (list.empty()) return;
    out << "  " << title << ":\n";
    for (const ProvenanceChange& ch : list) out << "    " << describe_change(ch) << "\n";
  };
  section("run", p.run);
  section("build, libraries, host", p.libraries);
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
                       {"improvement", t.improvement}});
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
  return nlohmann::json{
      {"threshold_pct", c.options.threshold_pct},
      {"min_abs_ms", c.options.min_abs_ms},
      {"regression", c.regression},
      {"timings", timings},
      {"acceptance", acceptance},
      {"provenance",
       {{"run", changes(c.provenance.run)},
        {"libraries", changes(c.provenance.libraries)},
        {"environment", changes(c.provenance.environment)},
        {"config", changes(c.provenance.config)}}},
      {"notes", c.notes},
  };
}

}  // namespace specrun
