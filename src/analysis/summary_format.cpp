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

// "target: 16 experts, top-2, 6 MoE layers, ep 2, 1.57 MB per expert"
std::string expert_shape(const char* model, const ExpertSummary& e) {
  std::ostringstream out;
  out << std::fixed << model << ": " << e.n_experts << " experts, top-" << e.top_k << ", "
      << e.layers << " MoE layer" << (e.layers == 1 ? "" : "s") << ", ep " << e.ep << ", "
      << std::setprecision(3) << static_cast<double>(e.expert_bytes) / 1e6 << " MB per expert";
  return out.str();
}

// The expert accounting: per model, mode and pass kind, the unique experts per layer (the
// batch's, each sequence's, the kept tokens'), the expert MB per pass and per emitted token;
// then the verify / decode ratios of the target.
std::string format_experts(const RunSummary& run) {
  std::ostringstream out;
  out << std::fixed;
  for (const char* model : {kExpertTarget, kExpertDraft}) {
    bool header = false;
    for (const ModeSummary& m : run.modes) {
      const ExpertSummary& e =
          model == std::string(kExpertTarget) ? m.target_experts : m.draft_experts;
      if (!e.present) continue;
      if (!header) {
        out << "\nexperts (" << expert_shape(model, e)
            << "; unique experts per MoE layer, MB = 1e6 bytes)\n"
            << "  mode         pass           passes  tokens/pass   unique  per seq     kept"
               "  MB/pass  MB/token\n";
        header = true;
      }
      for (const ExpertPassSummary& k : e.kinds) {
        const bool verify = k.kind == kPassKindNames[kPassVerify];
        out << "  " << std::left << std::setw(13) << m.mode << std::setw(13) << k.kind << std::right
            << std::setw(8) << k.passes << std::setprecision(1) << std::setw(13)
            << k.tokens_per_pass << std::setprecision(2) << std::setw(9) << k.unique_per_layer
            << std::setw(9) << k.seq_unique_per_layer;
        if (verify)
          out << std::setw(9) << k.kept_unique_per_layer;
        else
          out << std::setw(9) << "-";
        out << std::setprecision(3) << std::setw(9) << k.mb_per_pass;
        if (k.emitted > 0)
          out << std::setw(10) << k.mb_per_emitted_token;
        else
          out << std::setw(10) << "-";
        out << "\n";
      }
      out << "  " << std::left << std::setw(13) << m.mode << std::right
          << "all passes: " << std::setprecision(3) << e.mb_per_generated_token
          << " MB per generated token (the prefill's included)\n";
    }
  }
  const ExpertRatio& x = run.verify_over_decode;
  if (x.present)
    out << std::setprecision(2) << "experts, verify / decode (target): " << x.unique_per_layer
        << "x unique experts per layer, " << x.mb_per_step << "x expert MB per step, "
        << x.mb_per_emitted_token << "x expert MB per emitted token\n";
  return out.str();
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
  out << format_experts(run);

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

namespace {

// One model's expert figures (null for a dense model).
nlohmann::json experts_to_json(const ExpertSummary& e) {
  if (!e.present) return nullptr;
  nlohmann::json kinds = nlohmann::json::object();
  for (const ExpertPassSummary& k : e.kinds)
    kinds[k.kind] = nlohmann::json{{"passes", k.passes},
                                   {"tokens_per_pass", k.tokens_per_pass},
                                   {"unique_per_layer", k.unique_per_layer},
                                   {"sequence_unique_per_layer", k.seq_unique_per_layer},
                                   {"kept_unique_per_layer", k.kept_unique_per_layer},
                                   {"max_load", k.max_load},
                                   {"mb_per_pass", k.mb_per_pass},
                                   {"kept_mb_per_pass", k.kept_mb_per_pass},
                                   {"emitted", k.emitted},
                                   {"mb_per_emitted_token", k.mb_per_emitted_token},
                                   {"ep_rank_share", k.rank_share}};
  return nlohmann::json{{"experts", e.n_experts},
                        {"top_k", e.top_k},
                        {"ep", e.ep},
                        {"moe_layers", e.layers},
                        {"expert_bytes", e.expert_bytes},
                        {"mb_per_generated_token", e.mb_per_generated_token},
                        {"passes", kinds}};
}

}  // namespace

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
        {"experts",
         {{"target", experts_to_json(m.target_experts)},
          {"draft", experts_to_json(m.draft_experts)}}},
    };
  }
  nlohmann::json j{{"modes", modes}, {"paired", run.paired}, {"greedy", run.greedy}};
  const ExpertRatio& x = run.verify_over_decode;
  j["experts_verify_over_decode"] =
      x.present ? nlohmann::json{{"unique_per_layer", x.unique_per_layer},
                                 {"mb_per_step", x.mb_per_step},
                                 {"mb_per_emitted_token", x.mb_per_emitted_token}}
                : nlohmann::json(nullptr);
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
