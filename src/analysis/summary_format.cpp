// The presentation of a run's summary: the text `report` prints and its --json form
// (analysis/summary.h format_summary, summary_to_json). The figures: summary.cpp.
#include <algorithm>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analysis/summary.h"

namespace specrun {

namespace {

// True when the per-rank means of a phase differ by more than 10% of their mean (and 0.01 ms).
bool ranks_differ(const std::vector<Quantiles>& per_rank) {
  double lo = 0, hi = 0, sum = 0;
  int n = 0;
  for (const Quantiles& q : per_rank) {
    if (q.mean == 0 && q.p90 == 0) continue;  // a rank without rows
    lo = n == 0 ? q.mean : std::min(lo, q.mean);
    hi = n == 0 ? q.mean : std::max(hi, q.mean);
    sum += q.mean;
    ++n;
  }
  if (n < 2) return false;
  return hi - lo > 0.01 && hi - lo > 0.1 * (sum / n);
}

}  // namespace

std::string format_summary(const RunSummary& run) {
  std::ostringstream out;
  out << std::fixed;
  out << "summary\nmode          prompts  batches    tokens   tokens/s      tau    alpha\n";
  for (const ModeSummary& m : run.modes) {
    out << std::left << std::setw(12) << m.mode << std::right << std::setw(9) << m.prompts
        << std::setw(9) << m.batches << std::setw(10) << m.generated << std::setw(11)
        << std::setprecision(1) << m.tokens_per_s << std::setprecision(3) << std::setw(9) << m.tau;
    if (m.drafted > 0)
      out << std::setw(9) << m.alpha;
    else
      out << std::setw(9) << "-";
    out << "\n";
  }
  for (const ModeSummary& m : run.modes) {
    if (m.acceptance_unconditional.empty()) continue;
    out << "\nproposals (" << m.mode << "): " << std::setprecision(2) << m.mean_nodes
        << " nodes and depth " << m.mean_depth << " per step, bonus token in "
        << std::setprecision(1)
        << 100.0 * static_cast<double>(m.bonus_steps) /
               static_cast<double>(std::max<std::int64_t>(m.verify_steps, 1))
        << "% of steps\n  tree size (nodes: steps)  ";
    for (const auto& [nodes, steps] : m.nodes_histogram) out << " " << nodes << ":" << steps;
    out << "\n  accepted length (n: steps)";
    for (std::size_t n = 0; n < m.accepted_histogram.size(); ++n)
      if (m.accepted_histogram[n] > 0) out << " " << n << ":" << m.accepted_histogram[n];
    out << "\nacceptance by depth (" << m.mode << "):\n  depth           ";
    for (std::size_t i = 0; i < m.acceptance_unconditional.size(); ++i)
      out << std::setw(7) << (i + 1);
    out << "\n  P(n>=i)         ";
    for (double a : m.acceptance_unconditional) out << std::setprecision(3) << std::setw(7) << a;
    out << "\n  P(n>=i|n>=i-1)  ";
    for (double a : m.acceptance_conditional) out << std::setprecision(3) << std::setw(7) << a;
    out << "\n";
  }
  if (run.paired) {
    out << "\n"
        << std::setprecision(3) << "speedup (speculative vs baseline): " << run.speedup.value
        << "x  [95% CI " << run.speedup.low << ", " << run.speedup.high << "] over "
        << run.paired_prompts << " paired prompts\n";
    if (run.greedy)
      out << "greedy outputs identical: " << run.greedy_identical << " / " << run.paired_prompts
          << " prompts" << (run.greedy_identical == run.paired_prompts ? "" : "  <-- MISMATCH")
          << "\n";
  }

  // Device time beside the host's wall time when the run recorded it (CUDA): a forward pass's
  // host time is its launch, its device time the run.
  bool device = false;
  for (const ModeSummary& m : run.modes) device = device || !m.device_phases.empty();
  out << "\nphases, ms per step        mean      p50      p90"
      << (device ? "   device: mean      p50      p90" : "") << "\n";
  for (const ModeSummary& m : run.modes) {
    for (const char* name : kPhaseNames) {
      const Quantiles& q = m.phases.at(name);
      if (m.drafted == 0 && std::string(name) == "draft") continue;
      out << "  " << std::left << std::setw(12) << m.mode << std::setw(8) << name << std::right
          << std::setprecision(3) << std::setw(9) << q.mean << std::setw(9) << q.p50 << std::setw(9)
          << q.p90;
      const auto d = m.device_phases.find(name);
      if (d != m.device_phases.end())
        out << "   " << std::setw(13) << d->second.mean << std::setw(9) << d->second.p50
            << std::setw(9) << d->second.p90;
      else if (device)
        out << "   " << std::setw(13) << "-";  // comm runs inside the phases on the device
      out << "\n";
    }
  }
  // How the device's passes were issued: a phase whose passes launch kernel by kernel pays a
  // launch per kernel on the host; eager ones were recorded (shapes that do not repeat, a
  // capture that failed), unrecorded ones never (graphs off, passes too large for a graph).
  bool passes = false;
  for (const ModeSummary& m : run.modes) passes = passes || !m.device_passes.empty();
  if (passes)
    out << "device forward passes         passes  as CUDA graphs  captured     eager  unrecorded\n";
  for (const ModeSummary& m : run.modes)
    for (const auto& [name, n] : m.device_passes)
      out << "  " << std::left << std::setw(12) << m.mode << std::setw(8) << name << std::right
          << std::setprecision(0) << std::setw(14) << n.total() << std::setprecision(1)
          << std::setw(15) << 100 * n.graph_share() << "%" << std::setprecision(0) << std::setw(10)
          << n.captured << std::setw(10) << n.eager << std::setw(12) << n.unrecorded
          << (n.graph_share() < 0.5 ? "  <-- mostly kernel by kernel" : "") << "\n";
  bool header = false;
  for (const ModeSummary& m : run.modes) {
    for (const char* name : kPhaseNames) {
      const auto& per_rank = m.phases_per_rank.at(name);
      if (!ranks_differ(per_rank)) continue;
      if (!header) {
        out << "phases whose ranks differ by > 10%, mean ms per step by rank:\n";
        header = true;
      }
      out << "  " << std::left << std::setw(12) << m.mode << std::setw(8) << name << std::right;
      for (std::size_t r = 0; r < per_rank.size(); ++r)
        out << " " << r << ":" << std::setprecision(3) << per_rank[r].mean;
      out << "\n";
    }
  }
  if (!header && !run.modes.empty() && run.modes.front().phases_per_rank.at("total").size() > 1)
    out << "per-rank means agree within 10% in every phase\n";

  // Per category, when there is more than one.
  std::map<std::string, std::map<std::string, ModeSummary::Category>> cats;  // name -> mode -> c
  for (const ModeSummary& m : run.modes)
    for (const auto& [name, c] : m.categories) cats[name][m.mode] = c;
  if (cats.size() > 1) {
    out << "\nby category      prompts      tau    alpha   speedup [95% CI]\n";
    for (const auto& [name, by_mode] : cats) {
      auto it = by_mode.find(kModeSpeculative);
      const ModeSummary::Category& c = it != by_mode.end() ? it->second : by_mode.begin()->second;
      out << "  " << std::left << std::setw(14) << name << std::right << std::setw(9) << c.prompts
          << std::setprecision(3) << std::setw(9) << c.tau << std::setw(9) << c.alpha;
      auto sp = run.speedup_by_category.find(name);
      if (sp != run.speedup_by_category.end())
        out << "   " << sp->second.value << "x [" << sp->second.low << ", " << sp->second.high
            << "]";
      out << "\n";
    }
  }
  return out.str();
}

namespace {

nlohmann::json to_json(const Interval& iv) {
  return nlohmann::json{{"value", iv.value}, {"low", iv.low}, {"high", iv.high}};
}

nlohmann::json to_json(const Quantiles& q) {
  return nlohmann::json{{"mean", q.mean}, {"p50", q.p50}, {"p90", q.p90}};
}

}  // namespace

nlohmann::json passes_to_json(const DevicePassCounts& n) {
  return nlohmann::json{{"passes", n.total()},        {"replayed", n.replayed},
                        {"captured", n.captured},     {"eager", n.eager},
                        {"unrecorded", n.unrecorded}, {"graph_share", n.graph_share()}};
}

nlohmann::json summary_to_json(const RunSummary& run) {
  nlohmann::json modes = nlohmann::json::object();
  for (const ModeSummary& m : run.modes) {
    nlohmann::json phases = nlohmann::json::object(), per_rank = nlohmann::json::object();
    for (const char* name : kPhaseNames) {
      phases[name] = to_json(m.phases.at(name));
      nlohmann::json ranks = nlohmann::json::array();
      for (const Quantiles& q : m.phases_per_rank.at(name)) ranks.push_back(to_json(q));
      per_rank[name] = nlohmann::json{{"ranks", ranks},
                                      {"ranks_differ", ranks_differ(m.phases_per_rank.at(name))}};
    }
    nlohmann::json device_phases = nlohmann::json::object();  // empty: no device time
    for (const auto& [name, q] : m.device_phases) device_phases[name] = to_json(q);
    nlohmann::json device_passes = nlohmann::json::object();  // empty: no pass rows
    for (const auto& [name, n] : m.device_passes) device_passes[name] = passes_to_json(n);
    nlohmann::json nodes = nlohmann::json::object();  // keys: node counts as text
    for (const auto& [n, steps] : m.nodes_histogram) nodes[std::to_string(n)] = steps;
    nlohmann::json cats = nlohmann::json::object();
    for (const auto& [name, c] : m.categories)
      cats[name] = nlohmann::json{
          {"prompts", c.prompts}, {"generated", c.generated}, {"tau", c.tau}, {"alpha", c.alpha}};
    modes[m.mode] = nlohmann::json{
        {"prompts", m.prompts},
        {"batches", m.batches},
        {"generated", m.generated},
        {"verify_steps", m.verify_steps},
        {"drafted", m.drafted},
        {"accepted", m.accepted},
        {"step_rows", m.step_rows},
        {"seconds", m.seconds},
        {"tokens_per_s", m.tokens_per_s},
        {"tau", m.tau},
        {"alpha", m.alpha},
        {"acceptance_unconditional", m.acceptance_unconditional},
        {"acceptance_conditional", m.acceptance_conditional},
        {"nodes_histogram", nodes},
        {"accepted_histogram", m.accepted_histogram},
        {"depth_histogram", m.depth_histogram},
        {"bonus_steps", m.bonus_steps},
        {"mean_nodes", m.mean_nodes},
        {"mean_depth", m.mean_depth},
        {"phases_ms", phases},
        {"phases_ms_per_rank", per_rank},
        {"device_phases_ms", device_phases},
        {"device_passes", device_passes},
        {"categories", cats},
    };
  }
  nlohmann::json j{{"modes", modes}, {"paired", run.paired}, {"greedy", run.greedy}};
  if (run.paired) {
    j["paired_prompts"] = run.paired_prompts;
    j["speedup"] = to_json(run.speedup);
    j["greedy_identical"] = run.greedy_identical;
    nlohmann::json by_cat = nlohmann::json::object();
    for (const auto& [name, iv] : run.speedup_by_category) by_cat[name] = to_json(iv);
    j["speedup_by_category"] = by_cat;
  }
  return j;
}

}  // namespace specrun
