#include "analysis/summary.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "common/error.h"
#include "common/json_depth.h"
#include "io/result_file.h"

namespace specrun {
namespace {

// Linear interpolation between order statistics (numpy's default "linear" method).
double percentile_sorted(const std::vector<double>& v, double f) {
  if (v.empty()) return 0;
  double pos = f * static_cast<double>(v.size() - 1);
  std::size_t i = static_cast<std::size_t>(pos);
  double frac = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
}

Quantiles quantiles(std::vector<double> v) {
  Quantiles q;
  if (v.empty()) return q;
  double sum = 0;
  for (double x : v) sum += x;
  q.mean = sum / static_cast<double>(v.size());
  std::sort(v.begin(), v.end());
  q.p50 = percentile_sorted(v, 0.5);
  q.p90 = percentile_sorted(v, 0.9);
  return q;
}

Interval interval_from(double value, std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return Interval{value, percentile_sorted(samples, 0.025), percentile_sorted(samples, 0.975)};
}

double ratio_of_sums(const std::vector<double>& num, const std::vector<double>& den,
                     const std::vector<std::size_t>& idx) {
  double n = 0, d = 0;
  for (std::size_t i : idx) {
    n += num[i];
    d += den[i];
  }
  return d != 0 ? n / d : 0.0;
}

std::vector<std::size_t> identity(std::size_t n) {
  std::vector<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = i;
  return idx;
}

void resample(std::mt19937_64& rng, std::size_t n, std::vector<std::size_t>& idx) {
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  idx.resize(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = pick(rng);
}

// prompt index -> batch number, from the step records, else from the batch size.
std::map<std::int64_t, std::int64_t> batch_of_sequences(const ModeData& data) {
  std::map<std::int64_t, std::int64_t> batch_of;
  for (const StepRecord& st : data.steps) batch_of[st.prompt_index] = st.batch;
  for (const SequenceRecord& s : data.sequences) {
    if (batch_of.count(s.prompt_index)) continue;
    // No step: the sequence finished at the prefill. Without a batch size it counts as a batch
    // of its own (a distinct negative key).
    batch_of[s.prompt_index] =
        data.batch_size > 0 ? s.prompt_index / data.batch_size : -1 - s.prompt_index;
  }
  return batch_of;
}

// batch -> (wall seconds = slowest sequence, sequences)
std::map<std::int64_t, std::pair<double, std::int64_t>> batch_walls(
    const ModeData& data, const std::map<std::int64_t, std::int64_t>& batch_of) {
  std::map<std::int64_t, std::pair<double, std::int64_t>> walls;
  for (const SequenceRecord& s : data.sequences) {
    auto& w = walls[batch_of.at(s.prompt_index)];
    w.first = std::max(w.first, s.wall_s);
    w.second += 1;
  }
  return walls;
}

std::string category_name(const std::string& c) {
  return c.empty() ? "(none)" : c;
}

}  // namespace

namespace {

// The ratio of sums of `resamples` resamples of the items (with replacement).
std::vector<double> ratio_resamples(const std::vector<double>& num, const std::vector<double>& den,
                                    int resamples, std::uint64_t seed) {
  const std::size_t n = num.size();
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> idx;
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(std::max(0, resamples)));
  for (int r = 0; r < resamples; ++r) {
    resample(rng, n, idx);
    samples.push_back(ratio_of_sums(num, den, idx));
  }
  return samples;
}

}  // namespace

Interval bootstrap_ratio(const std::vector<double>& num, const std::vector<double>& den,
                         int resamples, std::uint64_t seed) {
  const std::size_t n = num.size();
  if (n == 0 || den.size() != n) return Interval{};
  double value = ratio_of_sums(num, den, identity(n));
  return interval_from(value, ratio_resamples(num, den, resamples, seed));
}

double bootstrap_ratio_variance(const std::vector<double>& num, const std::vector<double>& den,
                                int resamples, std::uint64_t seed) {
  const std::size_t n = num.size();
  if (n < 2 || den.size() != n || resamples < 2) return 0;
  return sample_variance(ratio_resamples(num, den, resamples, seed));
}

double sample_variance(const std::vector<double>& x) {
  if (x.size() < 2) return 0;
  double mean = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return ss / static_cast<double>(x.size() - 1);
}

Interval bootstrap_relative_change(const std::vector<double>& base_num,
                                   const std::vector<double>& base_den,
                                   const std::vector<double>& new_num,
                                   const std::vector<double>& new_den, int resamples,
                                   std::uint64_t seed) {
  const std::size_t nb = base_num.size(), nn = new_num.size();
  if (nb == 0 || nn == 0 || base_den.size() != nb || new_den.size() != nn) return Interval{};
  auto change = [](double base, double next) { return base != 0 ? next / base - 1.0 : 0.0; };
  double value = change(ratio_of_sums(base_num, base_den, identity(nb)),
                        ratio_of_sums(new_num, new_den, identity(nn)));
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> ib, in;
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(std::max(0, resamples)));
  for (int r = 0; r < resamples; ++r) {
    resample(rng, nb, ib);
    resample(rng, nn, in);
    samples.push_back(
        change(ratio_of_sums(base_num, base_den, ib), ratio_of_sums(new_num, new_den, in)));
  }
  return interval_from(value, std::move(samples));
}

namespace {

// The paired speedup of the prompts `idx`: baseline seconds per token over speculative seconds
// per token (0 when a sum is not positive).
double speedup_of(const std::vector<double>& b_seconds, const std::vector<double>& b_tokens,
                  const std::vector<double>& s_seconds, const std::vector<double>& s_tokens,
                  const std::vector<std::size_t>& idx) {
  double bs = 0, bt = 0, ss = 0, st = 0;
  for (std::size_t i : idx) {
    bs += b_seconds[i];
    bt += b_tokens[i];
    ss += s_seconds[i];
    st += s_tokens[i];
  }
  if (bt <= 0 || st <= 0 || ss <= 0) return 0.0;
  return (bs / bt) / (ss / st);
}

}  // namespace

Interval paired_speedup(const std::vector<double>& b_seconds, const std::vector<double>& b_tokens,
                        const std::vector<double>& s_seconds, const std::vector<double>& s_tokens,
                        int resamples, std::uint64_t seed) {
  const std::size_t n = b_seconds.size();
  auto stat = [&](const std::vector<std::size_t>& idx) {
    return speedup_of(b_seconds, b_tokens, s_seconds, s_tokens, idx);
  };
  if (n == 0) return Interval{};
  double value = stat(identity(n));
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> idx;
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(std::max(0, resamples)));
  for (int r = 0; r < resamples; ++r) {
    resample(rng, n, idx);
    samples.push_back(stat(idx));
  }
  return interval_from(value, std::move(samples));
}

void throughput_samples(const ModeData& data, std::vector<double>& tokens,
                        std::vector<double>& seconds) {
  tokens.clear();
  seconds.clear();
  auto batch_of = batch_of_sequences(data);
  auto walls = batch_walls(data, batch_of);
  std::map<std::int64_t, double> batch_tokens;
  for (const SequenceRecord& s : data.sequences)
    batch_tokens[batch_of.at(s.prompt_index)] += s.generated;
  for (const auto& [b, w] : walls) {
    tokens.push_back(batch_tokens[b]);
    seconds.push_back(w.first);
  }
}

namespace {

// Per row of [rows x ranks x width], over the ranks with a value in `column`: their mean, or
// their minimum (least). Rows without any value are left out.
std::vector<double> over_ranks(const std::vector<float>& table, int n_ranks, int width, int column,
                               bool least) {
  const int ranks = std::max(1, n_ranks);
  const std::size_t rows = table.size() / (static_cast<std::size_t>(ranks) * width);
  std::vector<double> out;
  out.reserve(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0, low = INFINITY;
    int n = 0;
    for (int k = 0; k < ranks; ++k) {
      const double v = table[(r * ranks + k) * width + column];
      if (std::isnan(v)) continue;
      sum += v;
      low = std::min(low, v);
      ++n;
    }
    if (n > 0) out.push_back(least ? low : sum / n);
  }
  return out;
}

}  // namespace

std::vector<double> per_step_mean(const std::vector<float>& table, int n_ranks, int width,
                                  int column) {
  return over_ranks(table, n_ranks, width, column, false);
}

std::vector<double> per_step_min(const std::vector<float>& table, int n_ranks, int width,
                                 int column) {
  return over_ranks(table, n_ranks, width, column, true);
}

std::vector<double> phase_per_step(const ModeData& data, int phase) {
  return per_step_mean(data.timings_ms, data.n_ranks, kNumPhases, phase);
}

double ms_per_token(const std::vector<double>& per_step, const ModeData& data) {
  double ms = 0, tokens = 0;
  for (double x : per_step) ms += x;
  for (const SequenceRecord& sq : data.sequences) tokens += static_cast<double>(sq.generated);
  return tokens > 0 ? ms / tokens : 0;
}

std::map<std::string, double> phase_ms_per_token(const ModeData& data) {
  std::map<std::string, double> out;
  for (int p = 0; p < kNumPhases; ++p)
    out[kPhaseNames[p]] = ms_per_token(phase_per_step(data, p), data);
  return out;
}

std::vector<double> cpu_per_step(const ModeData& data, int column) {
  return per_step_mean(data.cpu_ms, data.n_ranks, kNumCpuColumns, column);
}

std::vector<double> device_per_step(const ModeData& data, int column) {
  return per_step_mean(data.device_ms, data.n_ranks, kNumDeviceColumns, column);
}

std::map<std::string, DevicePassCounts> device_pass_counts(const ModeData& data) {
  std::map<std::string, DevicePassCounts> out;
  const std::size_t w = kNumPassColumns;
  for (std::size_t at = 0; at + w <= data.device_passes.size(); at += w) {
    const float* cell = data.device_passes.data() + at;
    if (std::isnan(cell[0])) continue;  // a rank without a device, or not in this row's batch
    for (const Phase p : {kPhaseDraft, kPhaseVerify}) {
      const float* c = cell + pass_column(p);
      if (c[0] + c[1] + c[2] + c[3] <= 0) continue;
      DevicePassCounts& n = out[kPhaseNames[p]];
      n.replayed += c[0];
      n.captured += c[1];
      n.eager += c[2];
      n.unrecorded += c[3];
    }
  }
  return out;
}

const char* const kIdentitiesChecked =
    "step rows sum to each sequence's row (steps, drafted, accepted, emitted + 1 = generated); "
    "0 <= accepted <= depth <= drafted; histogram = verify steps; per-position counts = step "
    "rows; one timing row per step, the same ranks in each; expert records: pairs = tokens x "
    "top_k, unique <= min(experts, pairs), one target pass per step";

void check_identities(const ModeData& data) {
  const std::string where = (data.source.empty() ? "" : data.source + ": ") + data.mode;
  struct Sums {
    std::int64_t steps = 0, drafted = 0, accepted = 0, emitted = 0;
    bool emitted_known = true;
  };
  std::map<std::int64_t, Sums> by_prompt;
  for (const StepRecord& st : data.steps) {
    SPEC_INPUT_CHECK(0 <= st.accepted && st.accepted <= st.depth && st.depth <= st.drafted,
                     where << ": the step row of batch " << st.batch << ", step " << st.step
                           << ", prompt " << st.prompt_index << " has drafted " << st.drafted
                           << ", depth " << st.depth << ", accepted " << st.accepted
                           << " (expected 0 <= accepted <= depth <= drafted)");
    Sums& s = by_prompt[st.prompt_index];
    s.steps += 1;
    s.drafted += st.drafted;
    s.accepted += st.accepted;
    if (st.emitted < 0)
      s.emitted_known = false;
    else
      s.emitted += st.emitted;
  }
  std::int64_t verify_steps = 0;
  for (const SequenceRecord& q : data.sequences) {
    auto it = by_prompt.find(q.prompt_index);
    const Sums s = it == by_prompt.end() ? Sums{} : it->second;
    if (it != by_prompt.end()) by_prompt.erase(it);
    const std::int64_t from_prefill = q.generated > 0 ? 1 : 0;
    SPEC_INPUT_CHECK(s.steps == q.verify_steps && s.drafted == q.drafted &&
                         s.accepted == q.accepted &&
                         (!s.emitted_known || s.emitted + from_prefill == q.generated),
                     where << ": prompt " << q.prompt_index << ": its step rows sum to " << s.steps
                           << " verify steps, " << s.drafted << " drafted, " << s.accepted
                           << " accepted, " << (s.emitted_known ? std::to_string(s.emitted) : "?")
                           << " emitted, but its sequence row has " << q.verify_steps << ", "
                           << q.drafted << ", " << q.accepted << " and " << q.generated
                           << " generated (one from the prefill): the result file is inconsistent");
    verify_steps += q.verify_steps;
  }
  SPEC_INPUT_CHECK(by_prompt.empty(), where << ": step rows name prompt "
                                            << by_prompt.begin()->first
                                            << ", which has no sequence row");
  SPEC_INPUT_CHECK(static_cast<std::int64_t>(data.steps.size()) == verify_steps,
                   where << ": the accepted-length histogram holds " << data.steps.size()
                         << " steps but the sequences made " << verify_steps);
  // The stored per-position counts (written per batch, apart from the step rows) against the
  // step rows: position i counts the steps that accepted more than i tokens.
  if (!data.accepted_per_position.empty()) {
    std::vector<std::int64_t> from_steps(data.accepted_per_position.size(), 0);
    for (const StepRecord& st : data.steps)
      for (std::int64_t i = 0; i < st.accepted && i < static_cast<std::int64_t>(from_steps.size());
           ++i)
        ++from_steps[static_cast<std::size_t>(i)];
    for (std::size_t i = 0; i < from_steps.size(); ++i)
      SPEC_INPUT_CHECK(from_steps[i] == data.accepted_per_position[i],
                       where << ": accepted_per_position[" << i << "] is "
                             << data.accepted_per_position[i] << " but the step rows accept "
                             << from_steps[i] << " tokens at position " << i
                             << ": the result file is inconsistent");
  }
  // Timings: one row per step of each batch, and in each batch the same ranks report.
  if (!data.timing_batch.empty()) {
    const std::size_t width = static_cast<std::size_t>(data.n_ranks) * kNumPhases;
    SPEC_INPUT_CHECK(data.timings_ms.size() == data.timing_batch.size() * width,
                     where << ": " << data.timing_batch.size() << " timing rows but "
                           << data.timings_ms.size() << " values");
    std::map<std::int64_t, std::set<std::int32_t>> steps_of;
    for (const StepRecord& st : data.steps) steps_of[st.batch].insert(st.step);
    std::map<std::int64_t, std::int64_t> rows_of;
    std::map<std::int64_t, int> ranks_of;
    for (std::size_t row = 0; row < data.timing_batch.size(); ++row) {
      const std::int64_t b = data.timing_batch[row];
      ++rows_of[b];
      int ranks = 0;
      for (int r = 0; r < data.n_ranks; ++r)
        ranks +=
            std::isfinite(data.timings_ms[row * width + static_cast<std::size_t>(r) * kNumPhases +
                                          kPhaseTotal])
                ? 1
                : 0;
      auto [it, fresh] = ranks_of.emplace(b, ranks);
      SPEC_INPUT_CHECK(ranks > 0 && it->second == ranks,
                       where << ": batch " << b << " has timing rows from " << it->second
                             << " and from " << ranks
                             << " ranks: every rank of its group reports every step");
    }
    for (const auto& [b, steps] : steps_of)
      SPEC_INPUT_CHECK(rows_of[b] == static_cast<std::int64_t>(steps.size()),
                       where << ": batch " << b << " has " << steps.size() << " steps but "
                             << rows_of[b] << " timing rows");
  }
  // The expert accounting: its own identities, and one target pass (decode or verify) per step.
  for (const auto& [model, r] :
       {std::pair<const char*, const ExpertRecords*>{kExpertTarget, &data.target_experts},
        {kExpertDraft, &data.draft_experts}}) {
    const std::string problem = expert_records_problem(*r);
    SPEC_INPUT_CHECK(problem.empty(), where << ": the " << model << "'s expert records: " << problem
                                            << ": the result file is inconsistent");
  }
  if (!data.target_experts.empty()) {
    const ExpertRecords& r = data.target_experts;
    std::map<std::pair<std::int64_t, std::int32_t>, int> passes;
    for (std::int64_t p = 0; p < r.passes(); ++p)
      if (r.kind[p] == kPassDecode || r.kind[p] == kPassVerify) ++passes[{r.batch[p], r.step[p]}];
    std::set<std::pair<std::int64_t, std::int32_t>> steps;
    for (const StepRecord& st : data.steps) steps.insert({st.batch, st.step});
    for (const auto& key : steps) {
      const auto it = passes.find(key);
      const int n = it == passes.end() ? 0 : it->second;
      SPEC_INPUT_CHECK(n == 1, where << ": batch " << key.first << " step " << key.second << " has "
                                     << n
                                     << " target passes in the expert records (one per step): "
                                        "the result file is inconsistent");
    }
    SPEC_INPUT_CHECK(passes.size() == steps.size(),
                     where << ": the target's expert records hold " << passes.size()
                           << " decoding steps, the step rows " << steps.size()
                           << ": the result file is inconsistent");
  }
}

ModeSummary summarize_mode(const ModeData& data) {
  check_identities(data);
  ModeSummary m;
  m.mode = data.mode;
  for (const SequenceRecord& s : data.sequences) {
    ++m.prompts;
    m.generated += s.generated;
    m.verify_steps += s.verify_steps;
    m.drafted += s.drafted;
    m.accepted += s.accepted;
  }
  auto batch_of = batch_of_sequences(data);
  auto walls = batch_walls(data, batch_of);
  m.batches = static_cast<std::int64_t>(walls.size());
  for (const auto& [b, w] : walls) m.seconds += w.first;
  m.tokens_per_s = m.seconds > 0 ? static_cast<double>(m.generated) / m.seconds : 0;
  // The first token of every sequence comes from the prefill, not from a verify step.
  const std::int64_t from_steps = m.generated - m.prompts;
  m.tau = m.verify_steps > 0 ? static_cast<double>(from_steps) / m.verify_steps : 0;
  m.alpha = m.drafted > 0 ? static_cast<double>(m.accepted) / m.drafted : 0;

  // Per category: tau and alpha from the same sums, restricted to the category.
  struct Sums {
    std::int64_t prompts = 0, generated = 0, steps = 0, drafted = 0, accepted = 0;
  };
  std::map<std::string, Sums> cat;
  for (const SequenceRecord& s : data.sequences) {
    Sums& c = cat[category_name(s.category)];
    c.prompts += 1;
    c.generated += s.generated;
    c.steps += s.verify_steps;
    c.drafted += s.drafted;
    c.accepted += s.accepted;
  }
  for (const auto& [name, c] : cat) {
    ModeSummary::Category out;
    out.prompts = c.prompts;
    out.generated = c.generated;
    out.tau = c.steps > 0 ? static_cast<double>(c.generated - c.prompts) / c.steps : 0;
    out.alpha = c.drafted > 0 ? static_cast<double>(c.accepted) / c.drafted : 0;
    m.categories[name] = out;
  }

  // Acceptance by depth. offered[i]: steps whose proposal reached depth i; reached[i]: of
  // those, steps that accepted >= i; prior[i]: of those, steps that accepted >= i-1.
  int k_max = 0;
  for (const StepRecord& st : data.steps) k_max = std::max(k_max, st.depth);
  std::vector<std::int64_t> offered(k_max + 1, 0), reached(k_max + 1, 0), prior(k_max + 1, 0);
  if (m.drafted > 0) {
    m.accepted_histogram.assign(k_max + 1, 0);
    m.depth_histogram.assign(k_max + 1, 0);
    std::int64_t nodes = 0, depth = 0;
    for (const StepRecord& st : data.steps) {
      ++m.nodes_histogram[st.drafted];
      ++m.accepted_histogram[st.accepted];
      ++m.depth_histogram[st.depth];
      m.bonus_steps += st.bonus;
      nodes += st.drafted;
      depth += st.depth;
    }
    const double steps = static_cast<double>(std::max<std::size_t>(data.steps.size(), 1));
    m.mean_nodes = static_cast<double>(nodes) / steps;
    m.mean_depth = static_cast<double>(depth) / steps;
  }
  for (const StepRecord& st : data.steps) {
    for (int i = 1; i <= st.depth; ++i) {
      ++offered[i];
      if (st.accepted >= i - 1) ++prior[i];
      if (st.accepted >= i) ++reached[i];
    }
  }
  for (int i = 1; i <= k_max; ++i) {
    m.acceptance_unconditional.push_back(
        offered[i] > 0 ? static_cast<double>(reached[i]) / offered[i] : 0);
    m.acceptance_conditional.push_back(prior[i] > 0 ? static_cast<double>(reached[i]) / prior[i]
                                                    : 0);
  }

  // Phases: per step (mean over the ranks that ran it) and per rank (over that rank's steps).
  const int ranks = std::max(1, data.n_ranks);
  const std::size_t rows = data.timings_ms.size() / (static_cast<std::size_t>(ranks) * kNumPhases);
  m.step_rows = static_cast<std::int64_t>(rows);
  for (int p = 0; p < kNumPhases; ++p) {
    m.phases[kPhaseNames[p]] = quantiles(phase_per_step(data, p));
    std::vector<Quantiles> per_rank;
    for (int k = 0; k < ranks; ++k) {
      std::vector<double> v;
      for (std::size_t r = 0; r < rows; ++r) {
        double x = data.timings_ms[(r * ranks + k) * kNumPhases + p];
        if (!std::isnan(x)) v.push_back(x);
      }
      per_rank.push_back(quantiles(std::move(v)));
    }
    m.phases_per_rank[kPhaseNames[p]] = std::move(per_rank);
  }
  for (int c = 0; c < kNumDeviceColumns; ++c) {
    std::vector<double> v = device_per_step(data, c);
    if (!v.empty()) m.device_phases[kDeviceColumns[c]] = quantiles(std::move(v));
  }
  m.device_passes = device_pass_counts(data);
  m.target_experts = summarize_experts(data.target_experts, data.steps, m.generated);
  m.draft_experts = summarize_experts(data.draft_experts, data.steps, m.generated);
  return m;
}

PairedSamples paired_samples(const std::vector<ModeData>& modes) {
  PairedSamples out;
  const ModeData* base = nullptr;
  const ModeData* spec = nullptr;
  for (const ModeData& m : modes) {
    if (m.mode == kModeBaseline) base = &m;
    if (m.mode == kModeSpeculative) spec = &m;
  }
  if (base == nullptr || spec == nullptr) return out;
  std::map<std::int64_t, const SequenceRecord*> by_index;
  for (const SequenceRecord& s : base->sequences) by_index[s.prompt_index] = &s;
  for (const SequenceRecord& s : spec->sequences) {
    auto it = by_index.find(s.prompt_index);
    if (it == by_index.end()) continue;
    const SequenceRecord& b = *it->second;
    out.b_seconds.push_back(b.wall_s);
    out.b_tokens.push_back(b.generated);
    out.s_seconds.push_back(s.wall_s);
    out.s_tokens.push_back(s.generated);
    out.categories.push_back(category_name(s.category));
    if (b.output_tokens == s.output_tokens) ++out.identical;
  }
  return out;
}

Interval bootstrap_speedup_change(const PairedSamples& base, const PairedSamples& next,
                                  int resamples, std::uint64_t seed) {
  auto stat = [](const PairedSamples& p, const std::vector<std::size_t>& idx) {
    return speedup_of(p.b_seconds, p.b_tokens, p.s_seconds, p.s_tokens, idx);
  };
  const std::size_t nb = base.b_seconds.size(), nn = next.b_seconds.size();
  if (nb == 0 || nn == 0) return Interval{};
  auto change = [](double b, double n) { return b > 0 ? n / b - 1.0 : 0.0; };
  const double value = change(stat(base, identity(nb)), stat(next, identity(nn)));
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> ib, in;
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(std::max(0, resamples)));
  for (int r = 0; r < resamples; ++r) {
    resample(rng, nb, ib);
    resample(rng, nn, in);
    samples.push_back(change(stat(base, ib), stat(next, in)));
  }
  return interval_from(value, std::move(samples));
}

RunSummary summarize_run(const std::vector<ModeData>& modes, bool greedy, std::uint64_t seed) {
  RunSummary run;
  run.greedy = greedy;
  for (const ModeData& m : modes) run.modes.push_back(summarize_mode(m));
  const ExpertPassSummary* decode = nullptr;
  const ExpertPassSummary* verify = nullptr;
  for (const ModeSummary& m : run.modes) {
    if (m.mode == kModeBaseline && m.target_experts.present)
      decode = m.target_experts.kind(kPassKindNames[kPassDecode]);
    if (m.mode == kModeSpeculative && m.target_experts.present)
      verify = m.target_experts.kind(kPassKindNames[kPassVerify]);
  }
  if (decode != nullptr && verify != nullptr && decode->unique_per_layer > 0 &&
      decode->mb_per_pass > 0) {
    ExpertRatio& x = run.verify_over_decode;
    x.present = true;
    x.unique_per_layer = verify->unique_per_layer / decode->unique_per_layer;
    x.mb_per_step = verify->mb_per_pass / decode->mb_per_pass;
    x.mb_per_emitted_token = decode->mb_per_emitted_token > 0
                                 ? verify->mb_per_emitted_token / decode->mb_per_emitted_token
                                 : 0;
  }
  const PairedSamples p = paired_samples(modes);
  if (p.b_seconds.empty()) return run;
  run.greedy_identical = p.identical;
  std::map<std::string, std::array<std::vector<double>, 4>> cats;
  for (std::size_t i = 0; i < p.b_seconds.size(); ++i) {
    auto& c = cats[p.categories[i]];
    c[0].push_back(p.b_seconds[i]);
    c[1].push_back(p.b_tokens[i]);
    c[2].push_back(p.s_seconds[i]);
    c[3].push_back(p.s_tokens[i]);
  }
  run.paired_prompts = static_cast<std::int64_t>(p.b_seconds.size());
  run.paired = run.paired_prompts > 0;
  run.speedup = paired_speedup(p.b_seconds, p.b_tokens, p.s_seconds, p.s_tokens, 2000, seed);
  if (cats.size() > 1)
    for (auto& [name, c] : cats)
      run.speedup_by_category[name] = paired_speedup(c[0], c[1], c[2], c[3], 1000, seed);
  return run;
}

bool resolved_is_greedy(const std::string& resolved_json) {
  nlohmann::json j = parse_json_or_discarded(resolved_json);
  if (j.is_discarded() || !j.contains("decode") || !j["decode"].contains("temperature"))
    return false;
  const nlohmann::json& t = j["decode"]["temperature"];
  return t.is_number() && t.get<double>() <= 0;
}

std::uint64_t resolved_seed(const std::string& resolved_json) {
  nlohmann::json j = parse_json_or_discarded(resolved_json);
  if (j.is_discarded() || !j.contains("job") || !j["job"].contains("seed") ||
      !j["job"]["seed"].is_number_integer())
    return 1;
  return j["job"]["seed"].get<std::uint64_t>();
}

std::vector<ModeData> load_mode_data(const ResultReader& reader) {
  std::int64_t batch_size = 0;
  nlohmann::json resolved = parse_json_or_discarded(reader.info().header.resolved_json);
  if (!resolved.is_discarded() && resolved.contains("data") &&
      resolved["data"].contains("batch_size") && resolved["data"]["batch_size"].is_number())
    batch_size = resolved["data"]["batch_size"].get<std::int64_t>();
  std::vector<ModeData> out;
  for (const std::string& mode : reader.modes()) {
    ModeData d;
    d.mode = mode;
    d.sequences = reader.sequences(mode);
    d.steps = reader.steps(mode);
    TimingTable t = reader.timings(mode);
    d.timings_ms = std::move(t.ms);
    d.timing_batch = std::move(t.batch);
    d.n_ranks = std::max(1, t.ranks);
    d.batch_size = batch_size;
    d.accepted_per_position = reader.accepted_per_position(mode);
    d.source = reader.path();
    d.cpu_ms = reader.cpu_timings(mode).ms;
    d.device_ms = reader.device_timings(mode).ms;
    d.device_passes = reader.device_passes(mode).ms;
    HostTable host = reader.host(mode);
    d.host = std::move(host.values);
    d.host_busy = std::move(host.busy);
    d.target_experts = reader.experts(mode, kExpertTarget);
    d.draft_experts = reader.experts(mode, kExpertDraft);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace specrun
