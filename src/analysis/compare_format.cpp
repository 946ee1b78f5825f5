// Presentation of a Comparison (analysis/compare.h): the five-line verdict, the full text
// report and the JSON of `specrun compare`.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/compare.h"
#include "io/provenance.h"

namespace specrun {

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

// "speculative verify expert MB per emitted token +23.1% [95% CI +20.0%, +26.4%] (12.110 ->
// 14.906 MB/token; unique experts per layer 6.10 -> 7.52)"
std::string describe_experts(const ExpertChange& e) {
  return e.mode + " " + e.kind + " expert MB per emitted token " + pct(e.relative.value) + " " +
         ci(e.relative) + " (" + fixed(e.base_mb_per_token, 3) + " -> " +
         fixed(e.next_mb_per_token, 3) + " MB/token; unique experts per layer " +
         fixed(e.base_unique, 2) + " -> " + fixed(e.next_unique, 2) + ")";
}

// Up to `limit` items joined by "; ", then "; +N more".
std::string join_limited(const std::vector<std::string>& items, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > limit) out += "; +" + std::to_string(items.size() - limit) + " more";
  return out;
}

// A host-attributed total or tokens/s that a host-attributed phase of its mode already names.
bool explained_by_host(const Comparison& c, const TimingChange& t) {
  if (t.name != "total" && t.name != "tokens/s") return false;
  for (const TimingChange& o : c.timings)
    if (o.mode == t.mode && o.name != "total" && o.name != "tokens/s" && o.environment) return true;
  return false;
}

// Where a phase's change ran, when both runs recorded device time: "; on the device +47.9% [95%
// CI ...]: the device's work" when the device's time moved the same way with confidence, else
// "...: not the device's (the host's: launches, the CPU)". Empty without device rows.
std::string device_note(const Comparison& c, const TimingChange& t) {
  for (const TimingChange& d : c.device) {
    if (d.mode != t.mode || d.name != t.name) continue;
    const bool same_way = t.regression    ? d.regression
                          : t.improvement ? d.improvement
                                          : d.regression || d.improvement;
    return "; on the device " + pct(d.relative.value) + " " + ci(d.relative) +
           (same_way ? ": the device's work"
                     : ": not the device's (the host's: launches, the CPU)");
  }
  return "";
}

std::string share(double x) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(0) << 100.0 * x << "%";
  return out.str();
}

// How NEW's passes that did not run as graphs were launched, the larger kind first: never
// recorded (graphs off, passes too large for a step graph) or recorded and run eagerly (shapes
// that do not repeat, a capture the driver refused, the ranks agreeing on eager).
std::string why_launched(const DevicePassCounts& n) {
  return n.unrecorded >= n.eager
             ? "launched kernel by kernel, unrecorded: graphs off or passes too large for a step "
               "graph"
             : "launched kernel by kernel, recorded but not captured: shapes that do not repeat "
               "or a capture that failed (the job log's step-graph line)";
}

// Why a phase's host time moved, when its passes changed how they were issued: "; its passes as
// CUDA graphs 100% -> 0% (launched kernel by kernel, unrecorded: ...)". Empty otherwise.
std::string graph_note(const Comparison& c, const TimingChange& t) {
  for (const GraphChange& g : c.graphs)
    if (g.mode == t.mode && g.phase == t.name && (g.fell || g.rose))
      return "; its passes as CUDA graphs " + share(g.base.graph_share()) + " -> " +
             share(g.next.graph_share()) + (g.fell ? " (" + why_launched(g.next) + ")" : "");
  return "";
}

// What the runs are, and what changed with confidence, worst first.
std::string timing_verdict(const Comparison& c) {
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
    if (a->host_suspect != b->host_suspect) return b->host_suspect;
    const bool sa = a->mode == kModeSpeculative, sb = b->mode == kModeSpeculative;
    if (sa != sb) return sa;
    return std::fabs(a->relative.value) > std::fabs(b->relative.value);
  };
  std::sort(worse.begin(), worse.end(), by_size);
  std::sort(better.begin(), better.end(), by_size);
  // The expert bytes first: when a verify reads more experts per token, that is why it slowed.
  std::vector<std::string> w, b;
  for (const ExpertChange& e : c.experts) {
    if (e.regression) w.push_back(describe_experts(e));
    if (e.improvement) b.push_back(describe_experts(e));
  }
  auto suspect = [](const TimingChange* t) {
    return t->host_suspect ? std::string(" (the busier host could explain it)") : std::string();
  };
  for (const TimingChange* t : worse)
    w.push_back(describe_timing(*t) + device_note(c, *t) + graph_note(c, *t) + suspect(t));
  for (const TimingChange* t : better)
    b.push_back(describe_timing(*t) + device_note(c, *t) + graph_note(c, *t) + suspect(t));
  if (!c.experiment_keys.empty()) {
    std::vector<std::string> costs;
    for (const TimingChange& t : c.timings)
      if (t.unit == "ms/step" && t.mode == kModeSpeculative && t.name != "total")
        costs.push_back(t.name + " " + fixed(t.base_per_token, 3) + " -> " +
                        fixed(t.next_per_token, 3));
    std::vector<std::string> graphs;
    for (const GraphChange& g : c.graphs)
      if (g.fell || g.rose)
        graphs.push_back(g.mode + " " + g.phase + " " + share(g.base.graph_share()) + " -> " +
                         share(g.next.graph_share()));
    std::vector<std::string> experts;
    for (const ExpertChange& e : c.experts)
      experts.push_back(e.mode + " " + e.kind + " " + fixed(e.base_mb_per_token, 3) + " -> " +
                        fixed(e.next_mb_per_token, 3) + " (" + pct(e.relative.value) + ")");
    return "DIFFERENT EXPERIMENTS (" + join_limited(c.experiment_keys, 4) +
           " differ; phases not judged as regressions): speculative ms per token: " +
           (costs.empty() ? std::string("-") : join_limited(costs, 6)) +
           (experts.empty() ? std::string()
                            : "; expert MB per emitted token: " + join_limited(experts, 2)) +
           (graphs.empty() ? std::string() : "; passes as CUDA graphs: " + join_limited(graphs, 4));
  }
  if (!w.empty()) return "REGRESSION: " + join_limited(w, 3);
  if (c.speedup.regression) return "REGRESSION: the speedup fell (below)";
  std::vector<const TimingChange*> host;
  for (const TimingChange& t : c.timings)
    if (t.environment && !explained_by_host(c, t)) host.push_back(&t);
  std::sort(host.begin(), host.end(), by_size);
  if (!host.empty() || c.speedup.environment) {
    std::vector<std::string> h;
    for (const TimingChange* t : host) h.push_back(describe_timing(*t));
    if (c.speedup.environment) h.push_back("the speedup " + pct(c.speedup.relative.value));
    bool gpu_only = false;
    for (const HostChange& hc : c.hosts)
      if (hc.next_busier || hc.base_busier) {
        gpu_only = hc.gpu_slower && !hc.cpu_busier;
        h.push_back(std::string(hc.next_busier ? "NEW" : "BASE") +
                    (gpu_only ? "'s GPU ran slower: " : " ran on a busier host: ") + hc.mode + " " +
                    hc.describe());
        break;
      }
    return std::string(gpu_only ? "ENVIRONMENT (GPU clocks" : "ENVIRONMENT (host load") +
           ", lower confidence; not the code): " + join_limited(h, 4);
  }
  if (!b.empty()) return "FASTER: " + join_limited(b, 3);
  std::vector<std::string> diffuse;
  for (const TimingChange& t : c.timings)
    if (t.diffuse) diffuse.push_back(describe_timing(t));
  return std::string(c.experts.empty() ? "SAME: no phase, throughput or speedup"
                                       : "SAME: no phase, throughput, speedup or expert bytes") +
         " changed by more than " + fixed(c.options.threshold_pct, 1) + "% with 95% confidence" +
         (diffuse.empty()
              ? std::string()
              : " (spread over no phase, not judged: " + join_limited(diffuse, 2) + ")");
}

// The headline: CHANGED first when the runs recorded a difference that can cause a timing change
// (compare.h recorded_causes; code first), then the timings' verdict.
std::string verdict_line(const Comparison& c) {
  if (!c.experiment_keys.empty()) return timing_verdict(c);
  std::vector<std::string> causes;
  if (c.base_code != c.next_code) causes.push_back("code " + c.base_code + " -> " + c.next_code);
  for (const ProvenanceChange* ch : recorded_causes(c.provenance))
    if (ch->name != "git_commit" && ch->name != "git_dirty") causes.push_back(describe_change(*ch));
  if (causes.empty()) return timing_verdict(c);
  return "CHANGED: " + join_limited(causes, 3) + " | " + timing_verdict(c);
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
  for (const HostChange& hc : c.hosts)
    if (hc.next_busier || hc.base_busier) {
      parts.push_back("host: " + hc.mode + " " + hc.describe());
      break;
    }
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
    if (t.environment) out << "  host load";
    if (t.diffuse) out << "  diffuse";
    out << "\n";
  }
  if (!c.device.empty()) {
    out << "device time (events on the GPU's stream; collectives inside the phases)\n";
    for (const TimingChange& t : c.device) {
      out << "  " << std::left << std::setw(28) << (t.mode + " " + t.name + " ms/step")
          << std::right << std::fixed << std::setprecision(3) << std::setw(9) << t.base
          << std::setw(11) << t.next << std::setw(10) << pct(t.relative.value) << "   ["
          << pct(t.relative.low) << ", " << pct(t.relative.high) << "]";
      if (t.regression) out << "  slower";
      if (t.improvement) out << "  faster";
      out << "\n";
    }
  }
  if (!c.graphs.empty()) {
    out << "device forward passes as CUDA graphs (the rest launched kernel by kernel)\n";
    for (const GraphChange& g : c.graphs) {
      out << "  " << std::left << std::setw(28) << (g.mode + " " + g.phase) << std::right
          << std::setw(9) << share(g.base.graph_share()) << std::setw(11)
          << share(g.next.graph_share()) << "   of " << std::fixed << std::setprecision(0)
          << g.base.total() << " -> " << g.next.total() << " passes";
      if (g.fell) out << "  FELL (" << why_launched(g.next) << ")";
      if (g.rose) out << "  rose";
      out << "\n";
    }
  }
  if (!c.experts.empty()) {
    out << "target experts (expert MB per emitted token; unique experts per MoE layer)\n";
    for (const ExpertChange& e : c.experts) {
      out << "  " << std::left << std::setw(28) << (e.mode + " " + e.kind + " MB/token")
          << std::right << std::fixed << std::setprecision(3) << std::setw(9) << e.base_mb_per_token
          << std::setw(11) << e.next_mb_per_token << std::setw(10) << pct(e.relative.value)
          << "   [" << pct(e.relative.low) << ", " << pct(e.relative.high) << "]";
      if (e.regression) out << "  REGRESSION";
      if (e.improvement) out << "  improved";
      out << "\n  " << std::left << std::setw(28) << (e.mode + " " + e.kind + " unique")
          << std::right << std::setprecision(2) << std::setw(9) << e.base_unique << std::setw(11)
          << e.next_unique << "\n";
    }
  }
  bool host_recorded = false;
  for (const HostChange& h : c.hosts) host_recorded = host_recorded || h.base.recorded;
  if (host_recorded) {
    out << "\nhost                             base        new\n";
    for (const HostChange& h : c.hosts) {
      auto row = [&](const char* name, double b, double n) {
        out << "  " << std::left << std::setw(28) << (h.mode + " " + name) << std::right
            << std::fixed << std::setprecision(2) << std::setw(9) << b << std::setw(11) << n
            << "\n";
      };
      row("run-queue wait ms/step", h.base.wait_ms, h.next.wait_ms);
      row("busy processes", h.base.busy, h.next.busy);
      row("load average", h.base.load1, h.next.load1);
      row("steal %", h.base.steal_pct, h.next.steal_pct);
      if (h.next_busier || h.base_busier)
        out << "  " << h.mode << ": " << (h.next_busier ? "NEW" : "BASE")
            << " ran on a busier host (" << h.describe() << ")\n";
    }
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
    for (const ExpertChange& e : c.experts)
      if (e.regression) out << "  " << describe_experts(e) << "\n";
  } else {
    out << std::defaultfloat << "no regression beyond " << c.options.threshold_pct << "%\n";
  }
  return out.str();
}

namespace {

nlohmann::json timing_to_json(const TimingChange& t) {
  return nlohmann::json{{"mode", t.mode},
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
                        {"environment", t.environment},
                        {"host_suspect", t.host_suspect},
                        {"diffuse", t.diffuse},
                        {"base_ms_per_token", t.base_per_token},
                        {"new_ms_per_token", t.next_per_token}};
}

}  // namespace

nlohmann::json comparison_to_json(const Comparison& c) {
  nlohmann::json timings = nlohmann::json::array(), device = nlohmann::json::array();
  for (const TimingChange& t : c.timings) timings.push_back(timing_to_json(t));
  for (const TimingChange& t : c.device) device.push_back(timing_to_json(t));
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
               {"improvement", c.speedup.improvement},
               {"environment", c.speedup.environment}};
  nlohmann::json hosts = nlohmann::json::array();
  auto host_json = [](const HostLoad& h) {
    nlohmann::json j{{"recorded", h.recorded},   {"run_queue_wait_ms", h.wait_ms},
                     {"busy_processes", h.busy}, {"load1", h.load1},
                     {"steal_pct", h.steal_pct}, {"busy_names", h.busy_names}};
    if (h.gpu) j["gpu"] = gpu_to_json(h);
    return j;
  };
  for (const HostChange& h : c.hosts)
    hosts.push_back({{"mode", h.mode},
                     {"base", host_json(h.base)},
                     {"new", host_json(h.next)},
                     {"wait_relative_change", h.wait_relative.value},
                     {"wait_ci", {h.wait_relative.low, h.wait_relative.high}},
                     {"new_busier", h.next_busier},
                     {"base_busier", h.base_busier},
                     {"gpu_slower", h.gpu_slower},
                     {"gpu_clock_ratio", h.gpu_clock_ratio}});
  nlohmann::json experts = nlohmann::json::array();
  for (const ExpertChange& e : c.experts)
    experts.push_back({{"mode", e.mode},
                       {"kind", e.kind},
                       {"base_mb_per_emitted_token", e.base_mb_per_token},
                       {"new_mb_per_emitted_token", e.next_mb_per_token},
                       {"base_unique_per_layer", e.base_unique},
                       {"new_unique_per_layer", e.next_unique},
                       {"base_passes", e.base_n},
                       {"new_passes", e.next_n},
                       {"relative_change", e.relative.value},
                       {"ci_low", e.relative.low},
                       {"ci_high", e.relative.high},
                       {"regression", e.regression},
                       {"improvement", e.improvement}});
  nlohmann::json graphs = nlohmann::json::array();
  for (const GraphChange& g : c.graphs)
    graphs.push_back({{"mode", g.mode},
                      {"phase", g.phase},
                      {"base", passes_to_json(g.base)},
                      {"new", passes_to_json(g.next)},
                      {"fell", g.fell},
                      {"rose", g.rose}});
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
      {"device_timings", device},
      {"device_passes", graphs},
      {"experts", experts},
      {"acceptance", acceptance},
      {"hosts", hosts},
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
