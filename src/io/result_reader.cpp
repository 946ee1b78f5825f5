#include "io/result_file.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/h5.h"
#include "io/result_layout.h"

namespace specrun {

using result_layout::check_mode;
using result_layout::Committed;
using result_layout::ModeTables;

void read_job_identity(const h5::File& f, ResultHeader& h) {
  h.specrun_version = f.attr_string("specrun_version");
  h.git_commit = f.attr_string("git_commit");
  h.git_dirty = f.attr_bool("git_dirty");
  h.world_size = static_cast<int32_t>(f.attr_int("world_size"));
  h.tp = static_cast<int32_t>(f.attr_int("tp"));
  h.dp = static_cast<int32_t>(f.attr_int("dp"));
  h5::Group job = f.group("job");
  h.job_toml = job.attr_string("toml");
  h.resolved_json = job.attr_string("resolved");
  h.config_hash = job.attr_string("config_hash");
  h.prompts_path = job.attr_string("prompts_path");
  h.prompts_hash = job.attr_string("prompts_hash");
  h.stop_token_ids = job.has_attr("stop_token_ids") ? job.attr_string("stop_token_ids") : "[]";
  h5::Group prov = f.group("provenance");
  h5::Dataset ranks = prov.dataset("ranks");
  h.provenance = ranks.read_strings(0, ranks.rows());
  h.provenance_mismatches = prov.dataset("mismatches").read_scalar_string();
  h.models = prov.has_attr("models") ? prov.attr_string("models") : "{}";
  if (prov.has("target_weight_bytes"))
    h.target_weight_bytes = prov.dataset("target_weight_bytes").read_all<int64_t>();
}

// Reader -----------------------------------------------------------------------------------------

struct ResultReader::Impl {
  h5::File file;
  std::string path;
  ResultInfo info;
  std::map<std::string, ModeTables> modes;
  std::map<std::string, Committed> committed;

  const ModeTables* mode(const std::string& name) const {
    check_mode(name);
    auto it = modes.find(name);
    return it == modes.end() ? nullptr : &it->second;
  }
};

ResultReader::ResultReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.file = h5::File::open(path, h5::File::Access::kReadOnly);
  const h5::File& f = m.file;
  ResultInfo& info = m.info;
  info.schema_version = result_layout::check_schema(f);
  info.schema = f.attr_string("schema");
  read_job_identity(f, info.header);
  info.started = f.attr_string("started");
  info.finished = f.attr_string("finished");
  info.resumes = static_cast<int32_t>(f.attr_int("resumes"));
  if (f.has_attr("alarms")) info.alarms = f.attr_strings("alarms");
  for (const char* mode : {kModeBaseline, kModeSpeculative}) {
    if (!f.has(mode)) continue;
    ModeTables t = result_layout::open_mode(f, mode);
    m.committed[mode] = result_layout::find_committed(t);
    m.modes.emplace(mode, std::move(t));
  }
}

ResultReader::~ResultReader() = default;
ResultReader::ResultReader(ResultReader&&) noexcept = default;
ResultReader& ResultReader::operator=(ResultReader&&) noexcept = default;

const std::string& ResultReader::path() const {
  return impl_->path;
}
const ResultInfo& ResultReader::info() const {
  return impl_->info;
}

std::vector<std::string> ResultReader::modes() const {
  std::vector<std::string> out;
  for (const char* mode : {kModeBaseline, kModeSpeculative})
    if (impl_->modes.count(mode)) out.push_back(mode);
  return out;
}

std::vector<std::string> ResultReader::warnings() const {
  std::vector<std::string> out;
  for (const auto& [mode, c] : impl_->committed)
    if (!c.ignored.empty())
      out.push_back(impl_->path + ":/" + mode + ": " + std::to_string(c.recorded - c.batches) +
                    " of " + std::to_string(c.recorded) +
                    " recorded batches left out, read up to the last sound commit record (" +
                    std::to_string(c.batches) + " batches): " + c.ignored);
  return out;
}

bool ResultReader::has_mode(const std::string& mode) const {
  return impl_->mode(mode) != nullptr;
}

int32_t ResultReader::draft_len(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  return t ? t->draft_len : 0;
}

int64_t ResultReader::batches_committed(const std::string& mode) const {
  return impl_->mode(mode) ? impl_->committed.at(mode).batches : 0;
}

std::vector<int64_t> ResultReader::committed_batches(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  if (!t) return {};
  return t->batches.at("batch").read<int64_t>(0, impl_->committed.at(mode).batches);
}

std::vector<int64_t> ResultReader::committed_prompt_indices(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  if (!t) return {};
  return t->seq.at("prompt_index").read<int64_t>(0, impl_->committed.at(mode).sequences);
}

std::vector<SequenceRecord> ResultReader::sequences(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  if (!t) return {};
  const Committed& c = impl_->committed.at(mode);
  const int64_t n = c.sequences;
  const auto& s = t->seq;
  auto prompt_index = s.at("prompt_index").read<int64_t>(0, n);
  auto prompt_id = s.at("prompt_id").read_strings(0, n);
  auto category = s.at("category").read_strings(0, n);
  auto prompt_len = s.at("prompt_len").read<int32_t>(0, n);
  auto generated = s.at("generated").read<int32_t>(0, n);
  auto verify_steps = s.at("verify_steps").read<int32_t>(0, n);
  auto drafted = s.at("drafted").read<int64_t>(0, n);
  auto accepted = s.at("accepted").read<int64_t>(0, n);
  auto finish_reason = s.at("finish_reason").read<int8_t>(0, n);
  auto wall_s = s.at("wall_s").read<double>(0, n);
  auto offsets = s.at("output_offsets").read<int64_t>(0, n + 1);
  auto tokens = s.at("output_tokens").read<int32_t>(0, c.tokens);
  std::vector<SequenceRecord> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    SequenceRecord& r = out[i];
    r.prompt_index = prompt_index[i];
    r.prompt_id = prompt_id[i];
    r.category = category[i];
    r.prompt_len = prompt_len[i];
    r.generated = generated[i];
    r.verify_steps = verify_steps[i];
    r.drafted = drafted[i];
    r.accepted = accepted[i];
    r.finish_reason = finish_reason[i];
    r.wall_s = wall_s[i];
    SPEC_INPUT_CHECK(0 <= offsets[i] && offsets[i] <= offsets[i + 1] && offsets[i + 1] <= c.tokens,
                     t->seq.at("output_offsets").where()
                         << " is not monotone within [0, " << c.tokens << "] at row " << i << " ("
                         << offsets[i] << ", " << offsets[i + 1] << "): the file is damaged");
    r.output_tokens.assign(tokens.begin() + offsets[i], tokens.begin() + offsets[i + 1]);
  }
  return out;
}

std::vector<StepRecord> ResultReader::steps(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  if (!t) return {};
  const int64_t n = impl_->committed.at(mode).steps;
  const auto& st = t->steps;
  auto batch = st.at("batch").read<int64_t>(0, n);
  auto step = st.at("step").read<int32_t>(0, n);
  auto prompt_index = st.at("prompt_index").read<int64_t>(0, n);
  auto active = st.at("active").read<int32_t>(0, n);
  auto drafted = st.at("drafted").read<int32_t>(0, n);
  auto accepted = st.at("accepted").read<int32_t>(0, n);
  std::vector<StepRecord> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = StepRecord{batch[i], step[i], prompt_index[i], active[i], drafted[i], accepted[i]};
  if (t->version >= 2) {
    auto depth = st.at("depth").read<int32_t>(0, n);
    auto bonus = st.at("bonus").read<int8_t>(0, n);
    auto emitted = st.at("emitted").read<int32_t>(0, n);
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].depth = depth[i];
      out[i].bonus = bonus[i];
      out[i].emitted = emitted[i];
    }
  } else {
    // Version 1 recorded chains only: the depth is the chain's length and a bonus follows a
    // fully accepted chain; the tokens a step emitted are unknown.
    for (StepRecord& r : out) {
      r.depth = r.drafted;
      r.bonus = r.drafted > 0 && r.accepted == r.drafted ? 1 : 0;
      r.emitted = -1;
    }
  }
  return out;
}

TimingTable ResultReader::cpu_timings(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  return t ? timing_rows(mode, t->cpu_timings, "columns") : TimingTable{};
}

TimingTable ResultReader::device_timings(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  return t ? timing_rows(mode, t->device_timings, "columns") : TimingTable{};
}

TimingTable ResultReader::device_passes(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  return t ? timing_rows(mode, t->device_passes, "columns") : TimingTable{};
}

HostTable ResultReader::host(const std::string& mode) const {
  HostTable out;
  const ModeTables* t = impl_->mode(mode);
  if (!t || !t->host.valid()) return out;
  out.batches = impl_->committed.at(mode).batches;
  out.ranks = t->n_ranks;
  const std::vector<float> stored = t->host.read<float>(0, out.batches);
  const std::size_t width = static_cast<std::size_t>(t->host.dims().at(2));
  // Schema 3 files lack the GPU fields: every snapshot widened with NaN.
  out.fields.assign(kHostFields.begin(), kHostFields.end());
  out.values.assign(
      static_cast<std::size_t>(out.batches) * static_cast<std::size_t>(out.ranks) * kNumHostFields,
      std::nanf(""));
  for (std::size_t row = 0; row * width < stored.size(); ++row)
    std::copy(stored.begin() + static_cast<std::ptrdiff_t>(row * width),
              stored.begin() + static_cast<std::ptrdiff_t>((row + 1) * width),
              out.values.begin() + static_cast<std::ptrdiff_t>(row * kNumHostFields));
  out.busy = t->host_busy.read_strings(0, out.batches);
  return out;
}

TimingTable ResultReader::timings(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  return t ? timing_rows(mode, t->timings, "phases") : TimingTable{};
}

TimingTable ResultReader::timing_rows(const std::string& mode, const h5::Dataset& rows,
                                      const char* names_attr) const {
  TimingTable out;
  const ModeTables* t = impl_->mode(mode);
  if (!t || !rows.valid()) return out;
  out.rows = impl_->committed.at(mode).timing_rows;
  out.ranks = t->n_ranks;
  out.phases = rows.attr_strings(names_attr);
  out.ms = rows.read<float>(0, out.rows);
  out.batch = t->timings_batch.read<int64_t>(0, out.rows);
  return out;
}

ExpertRecords ResultReader::experts(const std::string& mode, const std::string& model) const {
  const ModeTables* t = impl_->mode(mode);
  if (!t || !t->experts.count(model)) return {};
  const Committed& c = impl_->committed.at(mode);
  const auto end =
      c.expert_ends.count(model) ? c.expert_ends.at(model) : std::pair<int64_t, int64_t>{};
  return result_layout::read_experts(t->experts.at(model), 0, end.first, 0, end.second);
}

std::vector<int64_t> ResultReader::accepted_per_position(const std::string& mode) const {
  const ModeTables* t = impl_->mode(mode);
  if (!t) return {};
  return result_layout::apos_totals(*t, impl_->committed.at(mode));
}

}  // namespace specrun
