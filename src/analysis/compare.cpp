#include "analysis/compare.h"

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
#include "io/model_fingerprint.h"
#include "io/provenance.h"

namespace specrun {
namespace {

const ModeData* find_mode(const std::vector<ModeData>& modes, const std::string& name) {
  for (const ModeData& m : modes)
    if (m.mode == name) return &m;
  return nullptr;
}

// Worse/better than the threshold with confidence, in the direction that is bad. step_ms: the
// BASE step's mean total: communication and "other" (waits and bookkeeping, a small share of the
// step whose relative changes are large and noisy) must also move the step by the threshold.
void classify(TimingChange& c, const CompareOptions& options, double step_ms) {
  const double t = options.threshold_pct / 100.0;
  const Interval& iv = c.relative;
  if (c.higher_is_worse) {
    const bool wait_phase = c.name == kPhaseNames[kPhaseComm] || c.name == kPhaseNames[kPhaseOther];
    const double moved = std::fabs(c.next - c.base);
    const bool big_enough = moved > options.min_abs_ms && (!wait_phase || moved > t * step_ms);
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

bool is_compute_phase(const std::string& name) {
  return name == kPhaseNames[kPhaseDraft] || name == kPhaseNames[kPhaseVerify] ||
         name == kPhaseNames[kPhaseSample];
}

int phase_index(const std::string& name) {
  for (int p = 0; p < kNumPhases; ++p)
    if (name == kPhaseNames[p]) return p;
  return -1;
}

// A mode's step total that changed while none of its phases did (TimingChange::diffuse):
// reported, not judged. (tokens/s stays judged: it also counts the prefill, which no phase does.)
void mark_diffuse(Comparison& out) {
  for (TimingChange& t : out.timings) {
    if (t.name != kPhaseNames[kPhaseTotal]) continue;
    if (!t.regression && !t.improvement) continue;
    bool phase_moved = false;
    for (const TimingChange& o : out.timings)
      if (o.mode == t.mode && o.unit == "ms/step" && o.name != kPhaseNames[kPhaseTotal] &&
          (t.regression ? o.regression : o.improvement))
        phase_moved = true;
    if (phase_moved) continue;
    t.regression = t.improvement = false;
    t.diffuse = true;
  }
}

// The reference phase for judging `name` of `mode` (host_explains_phase): other code that the
// same host load would inflate alike. Verify (either mode) against the draft; the draft against
// the speculative verify. Null when the job has no such phase.
std::pair<const ModeData*, int> reference_phase(const std::vector<ModeData>& runs,
                                                const std::string& name) {
  const ModeData* spec = find_mode(runs, kModeSpeculative);
  if (spec == nullptr) return {nullptr, 0};
  if (name == kPhaseNames[kPhaseDraft]) return {spec, kPhaseVerify};
  return {spec, kPhaseDraft};
}

// Marks as environment the changes that a busier host explains (analysis/host_load.h): compute
// phases whose CPU time did not follow their wall time; communication and "other"; the step
// total and tokens/s when no compute phase of the mode is the code's; the speedup. A run's modes
// share its host (their batches alternate), so one mode's evidence counts for both.
void attribute_to_host(Comparison& out, const std::vector<ModeData>& base,
                       const std::vector<ModeData>& next, const CompareOptions& options,
                       std::uint64_t seed) {
  bool next_busier = false, base_busier = false;
  for (const char* mode : {kModeBaseline, kModeSpeculative}) {
    const ModeData* b = find_mode(base, mode);
    const ModeData* n = find_mode(next, mode);
    if (b == nullptr || n == nullptr) continue;
    out.hosts.push_back(compare_host(mode, *b, *n, options.threshold_pct, options.min_abs_ms,
                                     options.resamples, ++seed));
    next_busier = next_busier || out.hosts.back().next_busier;
    base_busier = base_busier || out.hosts.back().base_busier;
  }
  if (next_busier == base_busier) return;  // neither (or both: no side to blame)
  // A recorded difference is the suspect: what the host would explain is only marked.
  const bool reattribute = options.attribute_host;
  auto to_host = [&](TimingChange& t) {
    if (!reattribute) {
      t.host_suspect = true;
      return;
    }
    t.regression = t.improvement = false;
    t.environment = true;
  };
  double gpu_ratio = 1;   // the slower GPU's clock against the other's, over the modes
  bool cpu_side = false;  // CPU evidence (not the GPU's alone): CPU-time attribution applies
  for (HostChange& h : out.hosts) {
    h.next_busier = next_busier;
    h.base_busier = base_busier;
    gpu_ratio = std::min(gpu_ratio, h.gpu_clock_ratio);
    cpu_side = cpu_side || h.cpu_busier;
  }
  for (const HostChange& h : out.hosts) {
    const ModeData* b = find_mode(base, h.mode);
    const ModeData* n = find_mode(next, h.mode);
    auto suspect = [&](const TimingChange& t) {
      return t.mode == h.mode && (next_busier ? t.regression : t.improvement);
    };
    bool code_here = false;
    for (TimingChange& t : out.timings) {
      if (!suspect(t) || !is_compute_phase(t.name)) continue;
      const auto [ref_b, ref_phase] = reference_phase(base, t.name);
      const ModeData* ref_n = reference_phase(next, t.name).first;
      if (gpu_explains_change(t.relative.value, gpu_ratio, options.threshold_pct) ||
          (cpu_side && host_explains_phase(*b, *n, phase_index(t.name), ref_b, ref_n, ref_phase,
                                           options.threshold_pct, options.min_abs_ms))) {
        to_host(t);
      } else {
        code_here = true;
      }
    }
    // Communication and "other" are waits and bookkeeping: the host's, whatever the code did.
    // The step total and tokens/s are the code's when a compute phase is.
    for (TimingChange& t : out.timings) {
      if (!suspect(t) || is_compute_phase(t.name)) continue;
      if (code_here && (t.name == "total" || t.name == "tokens/s")) continue;
      to_host(t);
    }
  }
  // The speedup pairs the two modes on the same prompts, and host load weighs on them unequally
  // (the baseline's many more steps wait for partners more often): the host's whenever one run
  // ran on a busier host, even beside a code regression.
  SpeedupChange& s = out.speedup;
  if (reattribute && (s.regression || s.improvement)) {
    s.regression = s.improvement = false;
    s.environment = true;
  }
}

// The change of the mean ms per step between the per-step values of two runs, as a
// TimingChange of `unit`, classified; false when either run has no values or both are zero.
bool per_step_change(const std::string& mode, const std::string& name, const std::string& unit,
                     const std::vector<double>& bv, const std::vector<double>& nv,
                     const ModeData& b, const ModeData& n, const CompareOptions& options,
                     double step_ms, std::uint64_t& seed, TimingChange& c) {
  if (bv.empty() || nv.empty()) return false;
  c = TimingChange{};
  c.mode = mode;
  c.name = name;
  c.unit = unit;
  c.higher_is_worse = true;
  c.base = mean(bv);
  c.next = mean(nv);
  c.base_n = static_cast<std::int64_t>(bv.size());
  c.next_n = static_cast<std::int64_t>(nv.size());
  // A phase that is zero in both runs (draft in baseline) has nothing to compare.
  if (c.base == 0 && c.next == 0) return false;
  std::vector<double> bones(bv.size(), 1.0), nones(nv.size(), 1.0);
  c.relative = bootstrap_relative_change(bv, bones, nv, nones, options.resamples, ++seed);
  if (c.base == 0) c.relative = Interval{INFINITY, INFINITY, INFINITY};
  c.base_per_token = ms_per_token(bv, b);
  c.next_per_token = ms_per_token(nv, n);
  classify(c, options, step_ms);
  return true;
}

// The device columns of a mode that both runs recorded (Comparison::device).
void compare_device(const ModeData& b, const ModeData& n, const CompareOptions& options,
                    double step_ms, std::uint64_t& seed, std::vector<TimingChange>& out) {
  for (int col = 0; col < kNumDeviceColumns; ++col) {
    TimingChange c;
    if (per_step_change(b.mode, kDeviceColumns[col], "device ms/step", device_per_step(b, col),
                        device_per_step(n, col), b, n, options, step_ms, seed, c))
      out.push_back(c);
  }
}

// The phases whose passes both runs recorded (Comparison::graphs).
void compare_graphs(const ModeData& b, const ModeData& n, std::vector<GraphChange>& out) {
  const std::map<std::string, DevicePassCounts> bp = device_pass_counts(b),
                                                np = device_pass_counts(n);
  for (const auto& [phase, base] : bp) {
    const auto found = np.find(phase);
    if (found == np.end()) continue;
    GraphChange g{b.mode, phase, base, found->second};
    const double moved = g.next.graph_share() - g.base.graph_share();
    g.fell = moved <= -kGraphShareChange;
    g.rose = moved >= kGraphShareChange;
    out.push_back(g);
  }
}

// The target's expert bytes per emitted token of a mode's step passes (Comparison::experts).
void compare_experts(const ModeData& b, const ModeData& n, const CompareOptions& options,
                     std::uint64_t& seed, std::vector<ExpertChange>& out) {
  if (b.target_experts.empty() || n.target_experts.empty()) return;
  std::vector<double> bb, be, nb, ne;
  expert_step_samples(b.target_experts, b.steps, bb, be);
  expert_step_samples(n.target_experts, n.steps, nb, ne);
  if (bb.empty() || nb.empty()) return;
  const char* kind = kPassKindNames[b.mode == kModeSpeculative ? kPassVerify : kPassDecode];
  ExpertChange c;
  c.mode = b.mode;
  c.kind = kind;
  const ExpertSummary base = summarize_experts(b.target_experts, b.steps, 0);
  const ExpertSummary next = summarize_experts(n.target_experts, n.steps, 0);
  if (const ExpertPassSummary* k = base.kind(kind)) {
    c.base_mb_per_token = k->mb_per_emitted_token;
    c.base_unique = k->unique_per_layer;
  }
  if (const ExpertPassSummary* k = next.kind(kind)) {
    c.next_mb_per_token = k->mb_per_emitted_token;
    c.next_unique = k->unique_per_layer;
  }
  c.base_n = static_cast<std::int64_t>(bb.size());
  c.next_n = static_cast<std::int64_t>(nb.size());
  c.relative = bootstrap_relative_change(bb, be, nb, ne, options.resamples, ++seed);
  const double t = options.threshold_pct / 100.0;
  c.regression = c.relative.low > t;
  c.improvement = c.relative.high < -t;
  out.push_back(c);
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
    const double step_ms = mean(phase_per_step(*b, kPhaseTotal));
    for (int p = 0; p < kNumPhases; ++p) {
      // Communication is judged on the rank that waited least in each step: the collective's own
      // cost; the others' waits are their partners' lateness (skew), which reruns scatter.
      std::vector<double> bv = p == kPhaseComm
                                   ? per_step_min(b->timings_ms, b->n_ranks, kNumPhases, p)
                                   : phase_per_step(*b, p);
      std::vector<double> nv = p == kPhaseComm
                                   ? per_step_min(n->timings_ms, n->n_ranks, kNumPhases, p)
                                   : phase_per_step(*n, p);
      TimingChange c;
      if (per_step_change(mode, kPhaseNames[p], "ms/step", bv, nv, *b, *n, options, step_ms, seed,
                          c))
        out.timings.push_back(c);
    }
    compare_device(*b, *n, options, step_ms, seed, out.device);
    compare_graphs(*b, *n, out.graphs);
    compare_experts(*b, *n, options, seed, out.experts);
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
    classify(t, options, step_ms);
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
  mark_diffuse(out);
  attribute_to_host(out, base, next, options, ++seed);
  for (const TimingChange& c : out.timings) out.regression = out.regression || c.regression;
  for (const ExpertChange& e : out.experts) out.regression = out.regression || e.regression;
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
  // Two file lists say which files differ; fingerprints of two schemes without them (the
  // first/last-MiB "fnv1a64:" of older files against a newer one) cannot be compared.
  for (const char* role : {"target", "draft"}) {
    auto entry = [&](const nlohmann::json& m) -> const nlohmann::json* {
      if (!m.is_object() || !m.contains(role) || !m[role].is_object()) return nullptr;
      return &m[role];
    };
    const nlohmann::json* be = entry(bm);
    const nlohmann::json* ne = entry(nm);
    auto text = [](const nlohmann::json* e,
                   const std::string& detail) -> std::optional<std::string> {
      if (!e) return std::nullopt;
      return e->value("fingerprint", std::string()) + " (" + e->value("path", std::string()) +
             detail + ")";
    };
    auto scheme = [](const nlohmann::json* e) {
      const std::string f = e->value("fingerprint", std::string());
      return f.substr(0, f.find(':'));
    };
    // How the weights are stored (issue 44): named on its own, whatever the files say.
    auto quantization = [](const nlohmann::json* e) -> std::optional<std::string> {
      if (!e || !e->contains("quantization") || !(*e)["quantization"].is_string())
        return std::nullopt;
      return (*e)["quantization"].get<std::string>();
    };
    if (quantization(be) && quantization(ne))
      add_change(d.models, std::string(role) + " quantization", quantization(be), quantization(ne),
                 std::nullopt);
    if (bh.models == "{}" || nh.models == "{}") continue;
    if (be && ne && be->contains("files") && ne->contains("files")) {
      // File by file, on what both recorded (a job that did not finish has the weights' headers,
      // not their contents): a change only where something differs or the path moved.
      const std::vector<std::string> files = describe_file_changes((*be)["files"], (*ne)["files"]);
      std::string detail;
      for (std::size_t i = 0; i < files.size(); ++i) detail += (i == 0 ? "; " : ", ") + files[i];
      if (files.empty() && be->value("path", std::string()) == ne->value("path", std::string()))
        continue;
      add_change(d.models, std::string(role) + " model", text(be, ""), text(ne, detail),
                 std::nullopt);
      continue;
    }
    if (be && ne && scheme(be) != scheme(ne)) continue;
    add_change(d.models, std::string(role) + " model", text(be, ""), text(ne, ""), std::nullopt);
  }

  // Per rank: record fields and environment, rank r against rank r.
  const std::size_t ranks = std::min(bh.provenance.size(), nh.provenance.size());
  static const std::set<std::string> kSkipFields = {
      "pid",        "world_rank", "local_rank",      "world_size",  "environment",
      "git_commit", "git_dirty",  "specrun_version", "nccl_config", "mpi_config"};
  // The communication libraries' configuration files and parameters, key by key.
  auto config_fields = [](const nlohmann::json& record, const std::string& path,
                          const std::string& what, std::map<std::string, std::string>& out) {
    ProvenanceRecord r;
    try {
      if (record.contains("nccl_config")) record["nccl_config"].get_to(r.nccl_config);
      if (record.contains("mpi_config")) record["mpi_config"].get_to(r.mpi_config);
    } catch (const Error& e) {
      SPEC_INPUT_FAIL(path << ": " << what << ": " << e.what());
    }
    out.merge(comm_config_fields(r));
  };
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::string what = "provenance record of rank " + std::to_string(r);
    nlohmann::json b = parse_json(bh.provenance[r], what, base_path);
    nlohmann::json n = parse_json(nh.provenance[r], what, next_path);
    std::map<std::string, std::string> bf, nf, be, ne;
    for (auto it = b.begin(); b.is_object() && it != b.end(); ++it)
      if (!kSkipFields.count(it.key())) bf[it.key()] = value_text(it.value());
    for (auto it = n.begin(); n.is_object() && it != n.end(); ++it)
      if (!kSkipFields.count(it.key())) nf[it.key()] = value_text(it.value());
    if (b.is_object()) config_fields(b, base_path, what, bf);
    if (n.is_object()) config_fields(n, next_path, what, nf);
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

std::vector<const ProvenanceChange*> recorded_causes(const ProvenanceDiff& diff) {
  std::vector<const ProvenanceChange*> out;
  for (const ProvenanceChange& c : diff.run) out.push_back(&c);
  for (const ProvenanceChange& c : diff.libraries)
    if (c.name != "hostname" && c.name != "cuda_devices") out.push_back(&c);
  for (const ProvenanceChange& c : diff.models) out.push_back(&c);
  for (const ProvenanceChange& c : diff.config)
    if (is_experiment_key(c.name) || c.name.rfind("debug.", 0) == 0) out.push_back(&c);
  for (const ProvenanceChange& c : diff.environment) out.push_back(&c);
  return out;
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
  ProvenanceDiff provenance = diff_provenance(base.info(), next.info(), base.path(), next.path());
  CompareOptions o = options;
  o.attribute_host = options.attribute_host && recorded_causes(provenance).empty();
  Comparison c = compare_modes(load_mode_data(base), load_mode_data(next), o);
  c.provenance = std::move(provenance);
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

}  // namespace specrun
