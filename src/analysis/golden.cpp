// The golden: made from runs, written and read as JSON (the gate is in gate.cpp).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "analysis/golden.h"
#include "common/error.h"

namespace specrun {
namespace {

const MetricEstimate* find_metric(const std::vector<MetricEstimate>& metrics,
                                  const std::string& name) {
  for (const MetricEstimate& m : metrics)
    if (m.name == name) return &m;
  return nullptr;
}

// A required member of a golden's object, of the wanted JSON type.
const nlohmann::json& member(const nlohmann::json& obj, const char* key, const std::string& where,
                             nlohmann::json::value_t type, const std::string& path) {
  SPEC_INPUT_CHECK(obj.is_object() && obj.contains(key),
                   path << ": " << where << " has no \"" << key
                        << "\": not a golden this specrun can gate against (make it again with "
                           "`specrun golden`)");
  const nlohmann::json& v = obj[key];
  const bool ok = type == nlohmann::json::value_t::number_float ? v.is_number()
                  : type == nlohmann::json::value_t::number_unsigned
                      ? v.is_number_integer() && v.get<std::int64_t>() >= 0
                      : v.type() == type;
  SPEC_INPUT_CHECK(ok, path << ": " << where << " \"" << key << "\" has the wrong type ("
                            << v.type_name() << ")");
  return v;
}

}  // namespace

std::string Golden::noise_rule() const {
  return runs.size() >= 2 ? "between-run" : "per-prompt bootstrap";
}

Golden make_golden(const std::vector<GatedRun>& runs, int resamples) {
  SPEC_INPUT_CHECK(!runs.empty(), "a golden needs at least one result file");
  const GatedRun& first = runs.front();
  Golden g;
  g.identity = first.identity;
  g.draft_fingerprint = first.draft_fingerprint;
  g.resamples = resamples;
  for (const GatedRun& r : runs) {
    std::set<std::string> fields;
    for (const auto& [k, v] : first.identity) fields.insert(k);
    for (const auto& [k, v] : r.identity) fields.insert(k);
    for (const std::string& f : fields) {
      const auto a = first.identity.find(f);
      const auto b = r.identity.find(f);
      const std::string va = a == first.identity.end() ? "(absent)" : a->second;
      const std::string vb = b == r.identity.end() ? "(absent)" : b->second;
      SPEC_INPUT_CHECK(va == vb, r.path << ": " << f << " = " << vb << " but " << first.path
                                        << " has " << va
                                        << ": a golden is made from runs of one experiment");
    }
    SPEC_INPUT_CHECK(r.draft_fingerprint == first.draft_fingerprint,
                     r.path << ": draft model = " << r.draft_fingerprint << " but " << first.path
                            << " has " << first.draft_fingerprint
                            << ": a golden is made from runs of one experiment");
    g.runs.push_back(GoldenRun{r.path, r.seed, r.git_commit, r.prompts});
  }
  const double k = static_cast<double>(runs.size());
  for (const MetricEstimate& m0 : first.metrics) {
    if (m0.den == 0) continue;  // a position the first run's proposals never reached
    GoldenMetric gm;
    gm.name = m0.name;
    gm.den = m0.den;
    double within = 0;
    for (const GatedRun& r : runs) {
      const MetricEstimate* m = find_metric(r.metrics, m0.name);
      SPEC_INPUT_CHECK(m != nullptr && m->den > 0,
                       r.path << ": no " << metric_label(m0.name) << " (no step reached it), but "
                              << first.path << " has one: the runs do not measure the same thing");
      gm.run_values.push_back(m->value);
      gm.den = std::min(gm.den, m->den);
      within += m->variance;
    }
    for (double v : gm.run_values) gm.value += v;
    gm.value /= k;
    gm.within = within / k;
    gm.between = sample_variance(gm.run_values);
    gm.run_part = std::max(0.0, gm.between - gm.within) * (1 + 1 / k);
    gm.noise = gm.run_part + gm.within / k;
    g.metrics.push_back(std::move(gm));
  }
  return g;
}

nlohmann::json golden_to_json(const Golden& g) {
  nlohmann::json j;
  j["format"] = kGoldenFormat;
  j["version"] = kGoldenVersion;
  j["identity"] = g.identity;
  j["draft_model"] = g.draft_fingerprint;
  j["noise_rule"] = g.noise_rule();
  j["resamples"] = g.resamples;
  j["runs"] = nlohmann::json::array();
  for (const GoldenRun& r : g.runs)
    j["runs"].push_back(
        {{"path", r.path}, {"seed", r.seed}, {"git_commit", r.git_commit}, {"prompts", r.prompts}});
  j["metrics"] = nlohmann::json::array();
  for (const GoldenMetric& m : g.metrics)
    j["metrics"].push_back({{"name", m.name},
                            {"label", metric_label(m.name)},
                            {"value", m.value},
                            {"runs", m.run_values},
                            {"between_variance", m.between},
                            {"within_variance", m.within},
                            {"noise_variance", m.noise},
                            {"run_variance", m.run_part},
                            {"steps", m.den}});
  return j;
}

Golden golden_from_json(const nlohmann::json& j, const std::string& path) {
  using T = nlohmann::json::value_t;
  SPEC_INPUT_CHECK(j.is_object() && j.value("format", std::string()) == kGoldenFormat,
                   path << ": not a golden (\"format\" is not \"" << kGoldenFormat
                        << "\"); make one with `specrun golden RESULT.h5... --out FILE`");
  const nlohmann::json& version = member(j, "version", "the golden", T::number_unsigned, path);
  SPEC_INPUT_CHECK(version.get<int>() == kGoldenVersion,
                   path << ": golden version " << version.get<int>() << "; this specrun reads "
                        << kGoldenVersion);
  Golden g;
  const nlohmann::json& id = member(j, "identity", "the golden", T::object, path);
  for (auto it = id.begin(); it != id.end(); ++it) {
    SPEC_INPUT_CHECK(it.value().is_string(),
                     path << ": identity \"" << it.key() << "\" is not a string");
    g.identity[it.key()] = it.value().get<std::string>();
  }
  SPEC_INPUT_CHECK(g.identity.count("target model") && g.identity.count("prompts"),
                   path << ": the golden's identity lacks \"target model\" or \"prompts\"");
  g.draft_fingerprint = member(j, "draft_model", "the golden", T::string, path).get<std::string>();
  g.resamples = member(j, "resamples", "the golden", T::number_unsigned, path).get<int>();
  for (const nlohmann::json& r : member(j, "runs", "the golden", T::array, path)) {
    GoldenRun run;
    run.path = member(r, "path", "a run", T::string, path).get<std::string>();
    run.prompts = member(r, "prompts", "a run", T::number_unsigned, path).get<std::int64_t>();
    g.runs.push_back(std::move(run));
  }
  SPEC_INPUT_CHECK(!g.runs.empty(), path << ": the golden lists no runs");
  for (const nlohmann::json& m : member(j, "metrics", "the golden", T::array, path)) {
    GoldenMetric gm;
    gm.name = member(m, "name", "a metric", T::string, path).get<std::string>();
    const std::string where = "metric " + gm.name;
    gm.value = member(m, "value", where, T::number_float, path).get<double>();
    gm.noise = member(m, "noise_variance", where, T::number_float, path).get<double>();
    gm.run_part = member(m, "run_variance", where, T::number_float, path).get<double>();
    SPEC_INPUT_CHECK(
        gm.noise >= 0 && gm.value >= 0 && gm.run_part >= 0 && gm.run_part <= gm.noise,
        path << ": " << where
             << " has a negative value or variance, or a run variance above its noise");
    gm.between = m.value("between_variance", 0.0);
    gm.within = m.value("within_variance", 0.0);
    gm.den = m.value("steps", std::int64_t{0});
    g.metrics.push_back(std::move(gm));
  }
  SPEC_INPUT_CHECK(!g.metrics.empty(), path << ": the golden holds no metrics");
  return g;
}

}  // namespace specrun
