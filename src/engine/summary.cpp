#include "engine/summary.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <random>
#include <sstream>

#include "io/result_file.h"

namespace specrun {
namespace {

Quantiles quantiles(std::vector<double> v) {
  Quantiles q;
  if (v.empty()) return q;
  double sum = 0;
  for (double x : v) sum += x;
  q.mean = sum / v.size();
  std::sort(v.begin(), v.end());
  auto at = [&](double f) {
    double pos = f * (v.size() - 1);
    std::size_t i = static_cast<std::size_t>(pos);
    double frac = pos - i;
    return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
  };
  q.p50 = at(0.5);
  q.p90 = at(0.9);
  return q;
}

double percentile(std::vector<double> v, double f) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = f * (v.size() - 1);
  std::size_t i = static_cast<std::size_t>(pos);
  double frac = pos - i;
  return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
}

// Batch wall time = the latest finishing sequence of the batch.
double mode_seconds(const ModeData& data, const std::map<std::int64_t, std::int64_t>& batch_of) {
  std::map<std::int64_t, double> batch_wall;
  for (const SequenceRecord& s : data.sequences) {
    auto it = batch_of.find(s.prompt_index);
    std::int64_t b = it == batch_of.end() ? s.prompt_index : it->second;
    batch_wall[b] = std::max(batch_wall[b], s.wall_s);
  }
  double total = 0;
  for (auto& [b, w] : batch_wall) total += w;
  return total;
}

}  // namespace

ModeSummary summarize_mode(const ModeData& data) {
  ModeSummary m;
  m.mode = data.mode;
  std::map<std::int64_t, std::int64_t> batch_of;
  for (const StepRecord& st : data.steps) batch_of[st.prompt_index] = st.batch;
  std::int64_t drafted = 0, accepted = 0;
  std::map<std::string, std::array<std::int64_t, 3>> cat;  // steps, emitted, drafted/accepted
  std::map<std::string, std::array<std::int64_t, 2>> cat_da;
  for (const SequenceRecord& s : data.sequences) {
    ++m.prompts;
    m.generated += s.generated;
    m.verify_steps += s.verify_steps;
    drafted += s.drafted;
    accepted += s.accepted;
    auto& c = cat[s.category];
    c[0] += s.verify_steps;
    c[1] += s.generated - 1;
    c[2] += 1;
    cat_da[s.category][0] += s.drafted;
    cat_da[s.category][1] += s.accepted;
  }
  m.seconds = mode_seconds(data, batch_of);
  m.tokens_per_s = m.seconds > 0 ? m.generated / m.seconds : 0;
  // The first token of every sequence comes from the prefill, not from a verify step.
  std::int64_t from_steps = m.generated - m.prompts;
  m.tau = m.verify_steps > 0 ? static_cast<double>(from_steps) / m.verify_steps : 0;
  m.alpha = drafted > 0 ? static_cast<double>(accepted) / drafted : 0;
  for (auto& [name, c] : cat) {
    ModeSummary::Category out;
    out.prompts = c[2];
    out.tau = c[0] > 0 ? static_cast<double>(c[1]) / c[0] : 0;
    out.alpha = cat_da[name][0] > 0 ? static_cast<double>(cat_da[name][1]) / cat_da[name][0] : 0;
    m.categories[name.empty() ? "(none)" : name] = out;
  }

  // Per-position acceptance over steps that drafted at least i tokens.
  int k_max = 0;
  for (const StepRecord& st : data.steps) k_max = std::max(k_max, st.drafted);
  std::vector<std::int64_t> reached(k_max + 1, 0), offered(k_max + 1, 0);
  for (const StepRecord& st : data.steps) {
    for (int i = 1; i <= st.drafted; ++i) {
      ++offered[i];
      if (st.accepted >= i) ++reached[i];
    }
  }
  for (int i = 1; i <= k_max; ++i) {
    double uncond = offered[i] > 0 ? static_cast<double>(reached[i]) / offered[i] : 0;
    m.acceptance_unconditional.push_back(uncond);
    // Conditional: among steps that offered position i and accepted the i-1 before it.
    std::int64_t prior = 0, now = 0;
    for (const StepRecord& st : data.steps) {
      if (st.drafted < i || st.accepted < i - 1) continue;
      ++prior;
      if (st.accepted >= i) ++now;
    }
    m.acceptance_conditional.push_back(prior > 0 ? static_cast<double>(now) / prior : 0);
  }

  // Phases: per step, mean over ranks; per rank, mean over steps.
  const int ranks = std::max(1, data.n_ranks);
  const std::size_t rows = data.timings_ms.size() / (static_cast<std::size_t>(ranks) * kNumPhases);
  // Ranks outside the tp group that ran a batch hold NaN for its rows (dp > 1): skipped.
  for (int p = 0; p < kNumPhases; ++p) {
    std::vector<double> per_step;
    per_step.reserve(rows);
    std::vector<double> per_rank(ranks, 0.0);
    std::vector<std::int64_t> per_rank_n(ranks, 0);
    for (std::size_t r = 0; r < rows; ++r) {
      double sum = 0;
      int n = 0;
      for (int k = 0; k < ranks; ++k) {
        double v = data.timings_ms[(r * ranks + k) * kNumPhases + p];
        if (std::isnan(v)) continue;
        sum += v;
        ++n;
        per_rank[k] += v;
        ++per_rank_n[k];
      }
      if (n > 0) per_step.push_back(sum / n);
    }
    for (int k = 0; k < ranks; ++k)
      per_rank[k] = per_rank_n[k] > 0 ? per_rank[k] / per_rank_n[k] : 0;
    m.phases[kPhaseNames[p]] = quantiles(per_step);
    m.phases_per_rank[kPhaseNames[p]] = per_rank;
  }
  return m;
}

Interval paired_speedup(const std::vector<double>& b_seconds, const std::vector<double>& b_tokens,
                        const std::vector<double>& s_seconds, const std::vector<double>& s_tokens,
                        int resamples, std::uint64_t seed) {
  const std::size_t n = b_seconds.size();
  auto stat = [&](const std::vector<std::size_t>& idx) {
    double bs = 0, bt = 0, ss = 0, st = 0;
    for (std::size_t i : idx) {
      bs += b_seconds[i];
      bt += b_tokens[i];
      ss += s_seconds[i];
      st += s_tokens[i];
    }
    if (bt <= 0 || st <= 0 || ss <= 0) return 0.0;
    return (bs / bt) / (ss / st);
  };
  Interval out;
  if (n == 0) return out;
  std::vector<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = i;
  out.value = stat(idx);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  std::vector<double> samples;
  samples.reserve(resamples);
  for (int r = 0; r < resamples; ++r) {
    for (std::size_t i = 0; i < n; ++i) idx[i] = pick(rng);
    samples.push_back(stat(idx));
  }
  out.low = percentile(samples, 0.025);
  out.high = percentile(samples, 0.975);
  return out;
}

RunSummary summarize_run(const std::vector<ModeData>& modes, bool greedy, std::uint64_t seed) {
  RunSummary run;
  run.greedy = greedy;
  const ModeData* base = nullptr;
  const ModeData* spec = nullptr;
  for (const ModeData& m : modes) {
    run.modes.push_back(summarize_mode(m));
    if (m.mode == kModeBaseline) base = &m;
    if (m.mode == kModeSpeculative) spec = &m;
  }
  if (base == nullptr || spec == nullptr) return run;
  std::map<std::int64_t, const SequenceRecord*> by_index;
  for (const SequenceRecord& s : base->sequences) by_index[s.prompt_index] = &s;
  std::vector<double> bs, bt, ss, st;
  std::map<std::string, std::array<std::vector<double>, 4>> cats;
  for (const SequenceRecord& s : spec->sequences) {
    auto it = by_index.find(s.prompt_index);
    if (it == by_index.end()) continue;
    const SequenceRecord& b = *it->second;
    ++run.paired_prompts;
    if (b.output_tokens == s.output_tokens) ++run.greedy_identical;
    bs.push_back(b.wall_s);
    bt.push_back(b.generated);
    ss.push_back(s.wall_s);
    st.push_back(s.generated);
    auto& c = cats[s.category.empty() ? "(none)" : s.category];
    c[0].push_back(b.wall_s);
    c[1].push_back(b.generated);
    c[2].push_back(s.wall_s);
    c[3].push_back(s.generated);
  }
  run.paired = run.paired_prompts > 0;
  run.speedup = paired_speedup(bs, bt, ss, st, 2000, seed);
  if (cats.size() > 1)
    for (auto& [name, c] : cats)
      run.speedup_by_category[name] = paired_speedup(c[0], c[1], c[2], c[3], 1000, seed);
  return run;
}

std::vector<ModeData> load_mode_data(const ResultReader& reader) {
  std::vector<ModeData> out;
  for (const std::string& mode : reader.modes()) {
    ModeData d;
    d.mode = mode;
    d.sequences = reader.sequences(mode);
    d.steps = reader.steps(mode);
    TimingTable t = reader.timings(mode);
    d.timings_ms = std::move(t.ms);
    d.n_ranks = std::max(1, t.ranks);
    out.push_back(std::move(d));
  }
  return out;
}

std::string format_summary(const RunSummary& run) {
  std::ostringstream out;
  out << std::fixed;
  for (const ModeSummary& m : run.modes) {
    out << "mode " << m.mode << ": " << m.prompts << " prompts, " << m.generated << " tokens, "
        << std::setprecision(1) << m.tokens_per_s << " tokens/s";
    if (m.mode == kModeSpeculative) {
      out << std::setprecision(3) << ", tau " << m.tau << ", alpha " << m.alpha;
    }
    out << "\n";
    if (!m.acceptance_unconditional.empty()) {
      out << "  acceptance by position (P(n>=i) | P(n>=i | n>=i-1)):";
      for (std::size_t i = 0; i < m.acceptance_unconditional.size(); ++i)
        out << std::setprecision(3) << " " << (i + 1) << ":" << m.acceptance_unconditional[i] << "|"
            << m.acceptance_conditional[i];
      out << "\n";
    }
    out << "  phases, ms per step (mean / p50 / p90):";
    for (const char* name : kPhaseNames) {
      const Quantiles& q = m.phases.at(name);
      out << std::setprecision(3) << "  " << name << " " << q.mean << "/" << q.p50 << "/" << q.p90;
    }
    out << "\n";
    const auto& total_by_rank = m.phases_per_rank.at("total");
    if (total_by_rank.size() > 1) {
      out << "  total ms per step by rank:";
      for (std::size_t r = 0; r < total_by_rank.size(); ++r)
        out << std::setprecision(3) << " " << r << ":" << total_by_rank[r];
      out << "\n";
    }
    if (m.categories.size() > 1 && m.mode == kModeSpeculative) {
      out << "  by category:";
      for (auto& [name, c] : m.categories)
        out << std::setprecision(3) << "  " << name << " (" << c.prompts << ") tau " << c.tau
            << " alpha " << c.alpha;
      out << "\n";
    }
  }
  if (run.paired) {
    out << std::setprecision(3) << "speedup (speculative vs baseline, " << run.paired_prompts
        << " paired prompts): " << run.speedup.value << "x  [95% CI " << run.speedup.low << ", "
        << run.speedup.high << "]\n";
    for (auto& [name, iv] : run.speedup_by_category)
      out << "  " << name << ": " << iv.value << "x [" << iv.low << ", " << iv.high << "]\n";
    if (run.greedy)
      out << "greedy outputs identical: " << run.greedy_identical << " / " << run.paired_prompts
          << " prompts\n";
  }
  return out.str();
}

}  // namespace specrun
