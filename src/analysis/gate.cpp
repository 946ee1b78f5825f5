// The gate: one-sided tests of a run against a golden, Holm's rule, the verdict.
#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>

#include "analysis/golden.h"
#include "common/error.h"

namespace specrun {
namespace {

std::string num(double x, int digits = 3) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

std::string prob(double p) {
  std::ostringstream out;
  out << std::setprecision(2) << (p < 1e-300 ? 0.0 : p);
  return out.str();
}

// "position 1 (unconditional acceptance) 0.312 vs golden 0.702 (-0.390, -55.6%)"
std::string describe(const GateTest& t) {
  std::string s = metric_label(t.name) + " " + num(t.candidate) + " vs golden " + num(t.golden) +
                  " (" + (t.drop > 0 ? "-" : "+") + num(std::fabs(t.drop));
  if (t.golden > 0)
    s += ", " + std::string(t.drop > 0 ? "-" : "+") + num(100 * std::fabs(t.drop) / t.golden, 1) +
         "%";
  return s + ")";
}

}  // namespace

double drop_p_value(double drop, double sd, double df) {
  if (!(sd > 0)) return drop > 0 ? 0.0 : 1.0;
  const double t = drop / sd;
  if (!(df < 1e6)) return 0.5 * std::erfc(t / std::sqrt(2.0));
  return boost::math::cdf(boost::math::complement(boost::math::students_t(std::max(df, 1.0)), t));
}

double satterthwaite_df(double a, double df_a, double b, double df_b) {
  const double den = (df_a > 0 ? a * a / df_a : 0) + (df_b > 0 ? b * b / df_b : 0);
  return den > 0 ? (a + b) * (a + b) / den : 1e9;
}

void apply_holm(std::vector<GateTest>& tests, double alpha) {
  const std::size_t m = tests.size();
  std::vector<std::size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tests[a].p < tests[b].p; });
  double running = 0;
  bool rejecting = true;
  for (std::size_t rank = 0; rank < m; ++rank) {
    GateTest& t = tests[order[rank]];
    const double factor = static_cast<double>(m - rank);
    t.threshold = alpha / factor;
    running = std::max(running, std::min(1.0, factor * t.p));
    t.p_holm = running;
    rejecting = rejecting && t.p <= t.threshold;
    t.significant = rejecting;
  }
}

GateResult gate_run(const Golden& golden, const GatedRun& run, double alpha) {
  GateResult r;
  r.alpha = alpha;
  std::set<std::string> fields;
  for (const auto& [k, v] : golden.identity) fields.insert(k);
  for (const auto& [k, v] : run.identity) fields.insert(k);
  for (const std::string& f : fields) {
    const auto a = golden.identity.find(f);
    const auto b = run.identity.find(f);
    const std::string va = a == golden.identity.end() ? "(absent)" : a->second;
    const std::string vb = b == run.identity.end() ? "(absent)" : b->second;
    if (va != vb) r.mismatches.push_back(f + ": golden " + va + ", run " + vb);
  }
  if (run.draft_fingerprint != golden.draft_fingerprint)
    r.notes.push_back("the draft model changed: golden " + golden.draft_fingerprint + ", run " +
                      run.draft_fingerprint + " (gated: a retrained draft is the same experiment)");
  if (!r.mismatches.empty()) return r;
  std::int64_t fewest_prompts = run.prompts;
  for (const GoldenRun& g : golden.runs) fewest_prompts = std::min(fewest_prompts, g.prompts);
  for (const GoldenMetric& g : golden.metrics) {
    const MetricEstimate* m = nullptr;
    for (const MetricEstimate& e : run.metrics)
      if (e.name == g.name) m = &e;
    if (m == nullptr || m->den == 0) {
      // A conditional acceptance needs a step that reached the position before: none did, so
      // the unconditional acceptance of that position (tested) is 0.
      if (g.name.rfind("conditional@", 0) == 0) {
        r.notes.push_back("not tested: " + metric_label(g.name) +
                          " (no step of the run accepted the position before it)");
        continue;
      }
      r.missing.push_back(metric_label(g.name) + ": the run has no step that measures it");
      continue;
    }
    GateTest t;
    t.name = g.name;
    t.golden = g.value;
    t.candidate = m->value;
    t.drop = g.value - m->value;
    t.sd = std::sqrt(g.noise + m->variance);
    t.z = t.sd > 0 ? t.drop / t.sd : 0;
    t.df = satterthwaite_df(g.run_part, static_cast<double>(golden.runs.size()) - 1,
                            g.noise - g.run_part + m->variance,
                            std::max<double>(1, static_cast<double>(fewest_prompts) - 1));
    t.p = drop_p_value(t.drop, t.sd, t.df);
    r.tests.push_back(t);
  }
  for (const MetricEstimate& e : run.metrics) {
    bool known = false;
    for (const GoldenMetric& g : golden.metrics) known = known || g.name == e.name;
    if (!known && e.den > 0)
      r.notes.push_back("not in the golden, not tested: " + metric_label(e.name));
  }
  apply_holm(r.tests, alpha);
  return r;
}

std::string format_gate(const GateResult& r, const std::string& run_path,
                        const std::string& golden_path) {
  std::ostringstream out;
  const int code = r.exit_code();
  const std::string family =
      std::to_string(r.tests.size()) + " one-sided tests, Holm, alpha " + prob(r.alpha);
  if (code == kGateExperiment) {
    out << "EXPERIMENT: " << run_path << " is not the experiment of " << golden_path << ": ";
    for (std::size_t i = 0; i < r.mismatches.size(); ++i) out << (i ? "; " : "") << r.mismatches[i];
    out << "\n";
  } else if (code == kGateMissing) {
    out << "MISSING: cannot gate " << run_path << " against " << golden_path << ": ";
    if (r.missing.empty()) out << "the golden holds no metric the run measures";
    for (std::size_t i = 0; i < r.missing.size(); ++i) out << (i ? "; " : "") << r.missing[i];
    out << "\n";
  } else if (code == kGateDrop) {
    std::vector<const GateTest*> drops;
    for (const GateTest& t : r.tests)
      if (t.significant) drops.push_back(&t);
    std::sort(drops.begin(), drops.end(),
              [](const GateTest* a, const GateTest* b) { return a->p < b->p; });
    out << "DROP: " << describe(*drops.front()) << ", p " << prob(drops.front()->p)
        << " under noise (sd " << num(drops.front()->sd, 4) << "; Holm-adjusted "
        << prob(drops.front()->p_holm) << ")";
    if (drops.size() > 1) out << "; " << drops.size() - 1 << " more below";
    out << " [" << family << "]\n";
    for (std::size_t i = 1; i < drops.size(); ++i)
      out << "DROP: " << describe(*drops[i]) << ", p " << prob(drops[i]->p) << " (Holm-adjusted "
          << prob(drops[i]->p_holm) << ")\n";
  } else {
    const GateTest* closest = &r.tests.front();
    for (const GateTest& t : r.tests)
      if (t.p < closest->p) closest = &t;
    out << "PASS: no significant drop [" << family << "]; smallest margin: " << describe(*closest)
        << ", p " << prob(closest->p) << " (Holm-adjusted " << prob(closest->p_holm) << " > "
        << prob(r.alpha) << ")\n";
  }
  for (const std::string& n : r.notes) out << "note: " << n << "\n";
  if (r.tests.empty()) return out.str();
  out << "\n"
      << std::left << std::setw(44) << "metric" << std::right << std::setw(9) << "golden"
      << std::setw(9) << "run" << std::setw(9) << "drop" << std::setw(9) << "sd" << std::setw(10)
      << "p" << std::setw(10) << "p(Holm)"
      << "\n";
  for (const GateTest& t : r.tests)
    out << std::left << std::setw(44) << metric_label(t.name) << std::right << std::setw(9)
        << num(t.golden) << std::setw(9) << num(t.candidate) << std::setw(9) << num(t.drop)
        << std::setw(9) << num(t.sd, 4) << std::setw(10) << prob(t.p) << std::setw(10)
        << prob(t.p_holm) << (t.significant ? "  DROP" : "") << "\n";
  return out.str();
}

nlohmann::json gate_to_json(const GateResult& r) {
  static const char* const kVerdicts[] = {"PASS", "DROP", "MISSING", "EXPERIMENT"};
  nlohmann::json j;
  j["verdict"] = kVerdicts[r.exit_code()];
  j["exit_code"] = r.exit_code();
  j["alpha"] = r.alpha;
  j["correction"] = "holm";
  j["mismatches"] = r.mismatches;
  j["missing"] = r.missing;
  j["notes"] = r.notes;
  j["tests"] = nlohmann::json::array();
  for (const GateTest& t : r.tests)
    j["tests"].push_back({{"name", t.name},
                          {"label", metric_label(t.name)},
                          {"golden", t.golden},
                          {"run", t.candidate},
                          {"drop", t.drop},
                          {"sd", t.sd},
                          {"t", t.z},
                          {"df", t.df},
                          {"p", t.p},
                          {"p_holm", t.p_holm},
                          {"level", t.threshold},
                          {"significant", t.significant}});
  return j;
}

}  // namespace specrun
