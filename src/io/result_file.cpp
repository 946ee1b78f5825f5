#include "io/result_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "common/clock.h"
#include "common/error.h"
#include "common/isolated.h"
#include "io/h5.h"
#include "io/result_layout.h"

namespace specrun {

using result_layout::check_mode;
using result_layout::Committed;
using result_layout::ExpertTables;
using result_layout::ModeTables;
using ExpertTablesIt = std::map<std::string, ExpertTables>::const_iterator;

namespace {

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Checks the whole batch before anything is written, so a bad batch leaves the file untouched.
void validate_batch(const std::string& where, const BatchResult& b, int32_t world_size,
                    std::optional<int32_t> draft_len, const std::set<int64_t>& committed) {
  SPEC_CHECK(b.batch >= 0, where << ": batch number " << b.batch << " is negative");
  SPEC_CHECK(!committed.count(b.batch),
             where << ": batch " << b.batch
                   << " is already committed; a resumed job must skip finished batches");
  SPEC_CHECK(b.n_ranks == world_size, where << ": batch " << b.batch << " has timings of "
                                            << b.n_ranks << " ranks, the file's world size is "
                                            << world_size);
  SPEC_CHECK(b.n_steps >= 0 && b.timings_ms.size() == static_cast<size_t>(b.n_steps) *
                                                          static_cast<size_t>(b.n_ranks) *
                                                          kNumPhases,
             where << ": batch " << b.batch << " has " << b.timings_ms.size()
                   << " timing values, expected n_steps x n_ranks x phases = " << b.n_steps << " x "
                   << b.n_ranks << " x " << kNumPhases);
  const size_t cells = static_cast<size_t>(b.n_steps) * static_cast<size_t>(b.n_ranks);
  SPEC_CHECK(b.cpu_ms.empty() || b.cpu_ms.size() == cells * kNumCpuColumns,
             where << ": batch " << b.batch << " has " << b.cpu_ms.size()
                   << " CPU values, expected none or n_steps x n_ranks x " << kNumCpuColumns);
  SPEC_CHECK(b.device_ms.empty() || b.device_ms.size() == cells * kNumDeviceColumns,
             where << ": batch " << b.batch << " has " << b.device_ms.size()
                   << " device values, expected none or n_steps x n_ranks x " << kNumDeviceColumns);
  SPEC_CHECK(b.device_passes.empty() || b.device_passes.size() == cells * kNumPassColumns,
             where << ": batch " << b.batch << " has " << b.device_passes.size()
                   << " device pass counts, expected none or n_steps x n_ranks x "
                   << kNumPassColumns);
  SPEC_CHECK(b.host.empty() || b.host.size() == static_cast<size_t>(b.n_ranks) * kNumHostFields,
             where << ": batch " << b.batch << " has " << b.host.size()
                   << " host values, expected none or n_ranks x " << kNumHostFields);
  SPEC_CHECK(b.host_busy.empty() || b.host_busy.size() == static_cast<size_t>(b.n_ranks),
             where << ": batch " << b.batch << " has " << b.host_busy.size()
                   << " busy-process lists for " << b.n_ranks << " ranks");
  if (draft_len)
    SPEC_CHECK(static_cast<int32_t>(b.accepted_per_position.size()) == *draft_len,
               where << ": batch " << b.batch << " has " << b.accepted_per_position.size()
                     << " accepted_per_position counts, the mode's draft_len is " << *draft_len);
  for (const SequenceRecord& s : b.sequences) {
    SPEC_CHECK(static_cast<size_t>(s.generated) == s.output_tokens.size(),
               where << ": prompt " << s.prompt_index << " has generated = " << s.generated
                     << " but " << s.output_tokens.size() << " output tokens");
    SPEC_CHECK(s.finish_reason == kFinishLength || s.finish_reason == kFinishEos,
               where << ": prompt " << s.prompt_index << " has finish_reason "
                     << int{s.finish_reason} << " (0 = length, 1 = eos)");
  }
  // The step rows add up to the sequence rows (checked here so that a file never holds a batch
  // whose tables disagree; report checks the whole file again, analysis/summary.h).
  struct Sums {
    int64_t steps = 0, drafted = 0, accepted = 0, emitted = 0;
  };
  std::map<int64_t, Sums> sums;
  for (const StepRecord& s : b.steps) {
    SPEC_CHECK(s.batch == b.batch,
               where << ": a step record of batch " << b.batch << " names batch " << s.batch);
    SPEC_CHECK(0 <= s.accepted && s.accepted <= s.depth && s.depth <= s.drafted &&
                   (s.bonus == 0 || s.bonus == 1) && 0 <= s.emitted && s.emitted <= s.accepted + 1,
               where << ": batch " << b.batch << " step " << s.step << " of prompt "
                     << s.prompt_index << " has drafted " << s.drafted << ", depth " << s.depth
                     << ", accepted " << s.accepted << ", bonus " << int{s.bonus} << ", emitted "
                     << s.emitted
                     << " (expected 0 <= accepted <= depth <= drafted, emitted <= "
                        "accepted + 1)");
    Sums& m = sums[s.prompt_index];
    m.steps += 1;
    m.drafted += s.drafted;
    m.accepted += s.accepted;
    m.emitted += s.emitted;
  }
  for (const SequenceRecord& s : b.sequences) {
    const Sums m = sums.count(s.prompt_index) ? sums.at(s.prompt_index) : Sums{};
    const int64_t from_prefill = s.generated > 0 ? 1 : 0;
    SPEC_CHECK(m.steps == s.verify_steps && m.drafted == s.drafted && m.accepted == s.accepted &&
                   m.emitted + from_prefill == s.generated,
               where << ": batch " << b.batch << ", prompt " << s.prompt_index
                     << ": the step rows sum to " << m.steps << " steps, " << m.drafted
                     << " drafted, " << m.accepted << " accepted, " << m.emitted
                     << " emitted but the sequence row has " << s.verify_steps << " steps, "
                     << s.drafted << " drafted, " << s.accepted << " accepted, " << s.generated
                     << " generated (the first from the prefill)");
  }
  for (const auto& [model, r] :
       {std::pair<const char*, const ExpertRecords*>{kExpertTarget, &b.target_experts},
        {kExpertDraft, &b.draft_experts}}) {
    const std::string problem = expert_records_problem(*r);
    SPEC_CHECK(problem.empty(), where << ": batch " << b.batch << ": the " << model
                                      << "'s expert records: " << problem);
    for (int64_t p : r->batch)
      SPEC_CHECK(p == b.batch, where << ": batch " << b.batch << " holds an expert record of the "
                                     << model << " of batch " << p);
  }
}

// The batch's expert records against the mode's tables (`t`: nullptr before its first batch):
// a model's records keep the shape of its first, and a model whose passes the mode has not
// recorded from its first batch on cannot start now (its commit rows would not cover every
// batch).
void check_batch_experts(const std::string& where, const BatchResult& b, const ModeTables* t,
                         int64_t committed) {
  for (const auto& [model, r] :
       {std::pair<const char*, const ExpertRecords*>{kExpertTarget, &b.target_experts},
        {kExpertDraft, &b.draft_experts}}) {
    if (r->empty()) continue;
    const auto it = t == nullptr ? ExpertTablesIt{} : t->experts.find(model);
    const bool exists = t != nullptr && it != t->experts.end();
    SPEC_CHECK(exists || committed == 0,
               where << ": batch " << b.batch << " has expert records of the " << model
                     << " but the mode's " << committed << " earlier batches have none");
    if (exists)
      SPEC_CHECK(it->second.shape.same_shape(*r),
                 where << ": batch " << b.batch << ": the " << model
                       << "'s expert records have another shape than the mode's earlier ones");
  }
}

template <typename T, typename Row, typename Member>
std::vector<T> column(const std::vector<Row>& rows, Member Row::*member) {
  std::vector<T> out;
  out.reserve(rows.size());
  for (const Row& r : rows) out.push_back(static_cast<T>(r.*member));
  return out;
}

std::set<int64_t> committed_batch_set(const ModeTables& t, const Committed& c) {
  std::vector<int64_t> ids = t.batches.at("batch").read<int64_t>(0, c.batches);
  return std::set<int64_t>(ids.begin(), ids.end());
}

}  // namespace

// Writer -----------------------------------------------------------------------------------------

namespace {

// Space the library may need beyond a batch's rows: B-tree nodes, object headers, the heap of
// variable-length strings, and the new tables of a mode's first batch.
constexpr uint64_t kMetadataReserve = 1u << 20;
// One chunk per table before a mode's tables exist (their chunks are at most 64 KiB each,
// h5::RowsOptions, and a mode has about 35 tables), and per model with expert records (21
// tables of 16 KiB chunks).
constexpr uint64_t kNewModeChunks = 35u * 64u * 1024u;
constexpr uint64_t kNewExpertChunks = 21u * 16u * 1024u;

// Bytes a batch's rows take before compression, strings with their heap overhead.
uint64_t batch_bytes(const BatchResult& b) {
  uint64_t n = 0;
  for (const SequenceRecord& s : b.sequences)
    n += 64 + 2 * 16 + s.prompt_id.size() + s.category.size() + 4 * s.output_tokens.size();
  n += 48 * b.steps.size();
  const uint64_t cells =
      static_cast<uint64_t>(std::max(b.n_steps, 0)) * static_cast<uint64_t>(std::max(b.n_ranks, 0));
  n += 4 * cells * (kNumPhases + kNumCpuColumns + kNumDeviceColumns + kNumPassColumns) +
       8 * static_cast<uint64_t>(std::max(b.n_steps, 0));
  n += 4 * static_cast<uint64_t>(std::max(b.n_ranks, 0)) * kNumHostFields;
  for (const std::string& busy : b.host_busy) n += busy.size() + 16;
  n += 16 * b.accepted_per_position.size() + 64;
  for (const ExpertRecords* r : {&b.target_experts, &b.draft_experts}) {
    const uint64_t layers = r->layers.size(), passes = static_cast<uint64_t>(r->passes());
    n += passes * (32 + layers * (36 + 4 * static_cast<uint64_t>(std::max(r->ep, 1))));
    n += static_cast<uint64_t>(r->sequence_rows()) * (16 + 8 * layers) + 16;
  }
  return n;
}

// Bytes of one chunk of every table of a mode: appending rewrites each table's last, partial
// chunk, which the library may move to the end of the file.
uint64_t chunk_footprint(const ModeTables& t) {
  uint64_t n = 0;
  result_layout::for_each_dataset(t, [&](const h5::Dataset& d) {
    if (d.valid()) n += d.chunk_bytes();
  });
  return n;
}

// Refuses (exit code 2) a `path` that specrun must not replace: a symbolic link, something not
// a regular file, or a file that is not a specrun output of `schema` (read in a child: a
// corrupted file may crash or hang libhdf5, common/isolated.h). `what` names it in messages.
void check_replaceable(const std::string& path, const std::string& schema,
                       const std::string& what) {
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0) return;
  SPEC_INPUT_CHECK(!S_ISLNK(link.st_mode), what << " " << path
                                                << " is a symbolic link; specrun does not write "
                                                   "through links: give the real path");
  const std::string found = run_isolated(path, "existing " + what, [&]() -> std::string {
    try {
      h5::File f = h5::File::open(path, h5::File::Access::kReadOnly);
      return f.has_attr("schema") ? f.attr_string("schema") : "(no schema attribute)";
    } catch (const Error&) {
      return "(not an HDF5 file)";
    }
  });
  SPEC_INPUT_CHECK(S_ISREG(link.st_mode) && found == schema,
                   what << " " << path << " exists and is not a specrun output of this kind "
                        << "(schema " << found << ", expected " << schema
                        << "); job.overwrite replaces only those: remove it yourself "
                           "or choose another job.output");
}

// Makes a rename in `dir` durable (errors ignored: the rename itself succeeded).
void sync_directory(const std::string& file) {
  std::string dir = std::filesystem::path(file).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

struct ResultWriter::Impl {
  h5::File file;       // declared first: destroyed last
  std::string path;    // the file written
  std::string output;  // job.output: `path`, or where finish() renames `path` to
  int32_t world_size = 1;
  std::map<std::string, ModeTables> modes;
  std::map<std::string, Committed> committed;
  std::map<std::string, std::set<int64_t>> batch_ids;
  std::map<std::string, std::vector<int64_t>> apos_totals;
  std::map<std::string, uint64_t> chunks;  // chunk_footprint of each mode's tables
  bool broken = false;

  void append(const std::string& mode, const BatchResult& b);
  // After a failed write: every identifier given up without closing (h5::Object::abandon).
  void abandon();
  // What a failed append leaves: the committed batches, and how to continue.
  std::string committed_text() const;
};

ResultWriter::ResultWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ResultWriter::ResultWriter(ResultWriter&&) noexcept = default;
ResultWriter& ResultWriter::operator=(ResultWriter&&) noexcept = default;
ResultWriter::~ResultWriter() = default;

std::string result_replacement_path(const std::string& output) {
  return output + ".replacing";
}

std::string result_resume_path(const std::string& output) {
  const std::string replacement = result_replacement_path(output);
  return path_exists(replacement) ? replacement : output;
}

void check_resume_schema(const std::string& path, int64_t version, const std::string& writer) {
  SPEC_INPUT_CHECK(version == kResultSchemaVersion,
                   "cannot resume " << path << ": it has result schema version " << version
                                    << " (written by specrun " << writer
                                    << "); --resume continues files of version "
                                    << kResultSchemaVersion
                                    << " only: run the job again with a new job.output (report "
                                       "and compare still read this file)");
}

void ResultWriter::check_creatable(const std::string& path, bool overwrite,
                                   const std::string& schema) {
  struct stat link {};
  SPEC_INPUT_CHECK(::lstat(path.c_str(), &link) != 0 || !S_ISLNK(link.st_mode),
                   "job.output " << path
                                 << " is a symbolic link; specrun does not write through links: "
                                    "give the real path");
  SPEC_INPUT_CHECK(overwrite || !path_exists(path),
                   "result file " << path
                                  << " already exists; set job.overwrite = true (or --set "
                                     "job.overwrite=true) to replace it, run with --resume to "
                                     "continue it, or choose another job.output");
  check_replaceable(path, schema, "job.output");
  // A fresh run removes an earlier run's unfinished replacement (create): only one of ours.
  if (schema == kResultSchema)
    check_replaceable(result_replacement_path(path), schema,
                      "the unfinished replacement of job.output");
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat st;
  SPEC_INPUT_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
                   "cannot write result file " << path << ": directory " << dir
                                               << " does not exist (job.output)");
  SPEC_INPUT_CHECK(::access(dir.c_str(), W_OK) == 0, "cannot write result file "
                                                         << path << ": directory " << dir
                                                         << " is not writable (job.output)");
}

void write_job_identity(h5::File& f, const ResultHeader& h) {
  f.set_attr_string("specrun_version", h.specrun_version);
  f.set_attr_string("git_commit", h.git_commit);
  f.set_attr_bool("git_dirty", h.git_dirty);
  f.set_attr_string("started", utc_timestamp());
  f.set_attr_string("finished", "");
  f.set_attr_int32("world_size", h.world_size);
  f.set_attr_int32("tp", h.tp);
  f.set_attr_int32("dp", h.dp);
  f.set_attr_int32("resumes", 0);
  h5::Group job = f.create_group("job");
  job.set_attr_string("toml", h.job_toml);
  job.set_attr_string("resolved", h.resolved_json);
  job.set_attr_string("config_hash", h.config_hash);
  job.set_attr_string("prompts_path", h.prompts_path);
  job.set_attr_string("prompts_hash", h.prompts_hash);
  job.set_attr_string("stop_token_ids", h.stop_token_ids);
  h5::Group prov = f.create_group("provenance");
  h5::Dataset ranks = h5::create_string_rows(prov, "ranks", h5::chunk_rows(64));
  ranks.append_strings(h.provenance);
  h5::create_string_scalar(prov, "mismatches", h.provenance_mismatches);
  prov.set_attr_string("models", h.models);
  if (!h.target_weight_bytes.empty()) {
    h5::Dataset w = h5::create_fixed<int64_t>(
        prov, "target_weight_bytes", {h.target_weight_bytes.size()}, h.target_weight_bytes.data());
    w.set_attr_string("unit", "bytes");
    w.set_attr_string("description",
                      "per world rank: its share of the target's weights as loaded from the "
                      "checkpoint (stored dtype; a tied lm_head once)");
  }
}

ResultWriter ResultWriter::create(const std::string& path, const ResultHeader& h, bool overwrite) {
  check_creatable(path, overwrite);
  SPEC_CHECK(h.world_size >= 1 && h.tp >= 1 && h.dp >= 1 && h.tp * h.dp == h.world_size,
             "result header: world_size " << h.world_size << " != tp " << h.tp << " x dp " << h.dp);
  SPEC_CHECK(h.provenance.empty() || h.provenance.size() == static_cast<size_t>(h.world_size),
             "result header: " << h.provenance.size() << " provenance records for " << h.world_size
                               << " ranks");
  auto impl = std::make_unique<Impl>();
  impl->output = path;
  impl->path = path_exists(path) ? result_replacement_path(path) : path;
  impl->world_size = h.world_size;
  // This run starts afresh: an earlier run's unfinished replacement (checked above) goes.
  const std::string stale = result_replacement_path(path);
  SPEC_CHECK(!path_exists(stale) || std::remove(stale.c_str()) == 0,
             "cannot remove " << stale << ", the unfinished replacement of " << path
                              << " left by an earlier run: " << std::strerror(errno));
  impl->file = h5::File::create(impl->path, /*truncate=*/false);
  h5::File& f = impl->file;
  try {
    uint64_t header_bytes = h.job_toml.size() + h.resolved_json.size() + h.models.size() +
                            h.provenance_mismatches.size() + h.stop_token_ids.size();
    for (const std::string& p : h.provenance) header_bytes += p.size();
    f.reserve(kMetadataReserve + 2 * header_bytes, "the result file's header");
    f.set_attr_string("schema", kResultSchema);
    f.set_attr_int32("schema_version", kResultSchemaVersion);
    write_job_identity(f, h);
    f.flush();
    f.release_reserve();
  } catch (const Error& e) {
    // Nothing of this run is in the new file: it goes; a result it was to replace stays.
    f.abandon();
    std::remove(impl->path.c_str());
    throw Error(
        e.message() + (impl->path == path ? "" : "; the existing " + path + " was left as it was"),
        e.where(), e.exit_code());
  }
  return ResultWriter(std::move(impl));
}

ResultWriter ResultWriter::reopen(const std::string& output) {
  auto impl = std::make_unique<Impl>();
  impl->output = output;
  impl->path = result_resume_path(output);
  impl->file = h5::File::open(impl->path, h5::File::Access::kReadWrite);
  h5::File& f = impl->file;
  check_resume_schema(impl->path, result_layout::check_schema(f), f.attr_string("specrun_version"));
  // What the killed run wrote past the allocated end its last flush recorded stays allocated:
  // its flushed tables may point there (h5::File::cover_written_tail).
  f.cover_written_tail();
  impl->world_size = static_cast<int32_t>(f.attr_int("world_size"));
  for (const char* mode : {kModeBaseline, kModeSpeculative}) {
    if (!f.has(mode)) continue;
    ModeTables t = result_layout::open_mode(f, mode);
    Committed c = result_layout::find_committed(t);
    result_layout::truncate_to(t, c);
    std::vector<int64_t> totals = result_layout::apos_totals(t, c);
    t.apos.write(0, t.draft_len, totals.data());
    impl->batch_ids[mode] = committed_batch_set(t, c);
    impl->apos_totals[mode] = std::move(totals);
    impl->committed[mode] = c;
    impl->chunks[mode] = chunk_footprint(t);
    impl->modes.emplace(mode, std::move(t));
  }
  f.set_attr_string("finished", "");
  f.set_attr_int32("resumes", static_cast<int32_t>(f.attr_int("resumes") + 1));
  f.flush();
  return ResultWriter(std::move(impl));
}

void ResultWriter::append_batch(const std::string& mode, const BatchResult& b) {
  Impl& m = *impl_;
  SPEC_CHECK(m.file.valid(), m.path << ": append_batch after finish()");
  SPEC_CHECK(!m.broken, m.path << ": an earlier write failed; reopen the file (--resume) to "
                                  "continue from its last committed batch");
  check_mode(mode);
  auto it = m.modes.find(mode);
  std::optional<int32_t> draft_len;
  if (it != m.modes.end()) draft_len = it->second.draft_len;
  validate_batch(m.path + ":/" + mode, b, m.world_size, draft_len, m.batch_ids[mode]);
  check_batch_experts(m.path + ":/" + mode, b, it == m.modes.end() ? nullptr : &it->second,
                      m.committed.count(mode) ? m.committed.at(mode).batches : 0);
  // Nothing is written when the space is not there: the file stays as it was, closable.
  uint64_t chunks = m.chunks.count(mode) ? m.chunks.at(mode) : kNewModeChunks;
  for (const ExpertRecords* r : {&b.target_experts, &b.draft_experts})
    if (!r->empty()) chunks += kNewExpertChunks;
  try {
    m.file.reserve(kMetadataReserve + chunks + 2 * batch_bytes(b),
                   "the " + mode + " batch " + std::to_string(b.batch));
  } catch (const Error& e) {
    throw Error(e.message() + m.committed_text(), e.where(), e.exit_code());
  }
  m.broken = true;  // until the commit below succeeds
  try {
    m.append(mode, b);
  } catch (const Error& e) {
    m.abandon();
    throw Error(e.message() + m.committed_text(), e.where(), e.exit_code());
  }
  m.broken = false;
  m.file.release_reserve();  // a job killed between batches leaves no allocated tail
}

std::string ResultWriter::Impl::committed_text() const {
  std::string counts;
  for (const auto& [mode, c] : committed)
    counts += (counts.empty() ? "" : ", ") + std::to_string(c.batches) + " " + mode;
  return "; " + path + " keeps the batches committed before (" +
         (counts.empty() ? std::string("none") : counts) +
         "): make room and continue with `specrun run ... --resume`";
}

void ResultWriter::Impl::abandon() {
  for (auto& [mode, t] : modes) {
    result_layout::for_each_dataset(t, [](h5::Dataset& d) { d.abandon(); });
    t.group.abandon();
  }
  modes.clear();
  file.abandon();
}

void ResultWriter::Impl::append(const std::string& mode, const BatchResult& b) {
  if (!modes.count(mode)) {
    int32_t draft_len = static_cast<int32_t>(b.accepted_per_position.size());
    modes.emplace(mode, result_layout::create_mode(file, mode, draft_len, world_size));
    committed[mode] = Committed{};
    apos_totals[mode].assign(static_cast<size_t>(draft_len), 0);
  }
  for (const auto& [model, r] :
       {std::pair<const char*, const ExpertRecords*>{kExpertTarget, &b.target_experts},
        {kExpertDraft, &b.draft_experts}})
    if (!r->empty() && !modes.at(mode).experts.count(model))  // the mode's first batch
      result_layout::create_experts(modes.at(mode), model, *r);
  if (!chunks.count(mode) || committed.at(mode).batches == 0)
    chunks[mode] = chunk_footprint(modes.at(mode));
  ModeTables& t = modes.at(mode);
  Committed& c = committed.at(mode);
  const auto& seqs = b.sequences;

  // 1. Rows: sequences (output_offsets last), steps, timings.
  auto& s = t.seq;
  s.at("batch").append(std::vector<int64_t>(seqs.size(), b.batch));
  s.at("prompt_index").append(column<int64_t>(seqs, &SequenceRecord::prompt_index));
  s.at("prompt_id").append_strings(column<std::string>(seqs, &SequenceRecord::prompt_id));
  s.at("category").append_strings(column<std::string>(seqs, &SequenceRecord::category));
  s.at("prompt_len").append(column<int32_t>(seqs, &SequenceRecord::prompt_len));
  s.at("generated").append(column<int32_t>(seqs, &SequenceRecord::generated));
  s.at("verify_steps").append(column<int32_t>(seqs, &SequenceRecord::verify_steps));
  s.at("drafted").append(column<int64_t>(seqs, &SequenceRecord::drafted));
  s.at("accepted").append(column<int64_t>(seqs, &SequenceRecord::accepted));
  s.at("finish_reason").append(column<int8_t>(seqs, &SequenceRecord::finish_reason));
  s.at("wall_s").append(column<double>(seqs, &SequenceRecord::wall_s));
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets;
  int64_t end = c.tokens;
  for (const SequenceRecord& r : seqs) {
    tokens.insert(tokens.end(), r.output_tokens.begin(), r.output_tokens.end());
    end += static_cast<int64_t>(r.output_tokens.size());
    offsets.push_back(end);
  }
  s.at("output_tokens").append(tokens);

  auto& st = t.steps;
  st.at("batch").append(column<int64_t>(b.steps, &StepRecord::batch));
  st.at("step").append(column<int32_t>(b.steps, &StepRecord::step));
  st.at("prompt_index").append(column<int64_t>(b.steps, &StepRecord::prompt_index));
  st.at("active").append(column<int32_t>(b.steps, &StepRecord::active));
  st.at("drafted").append(column<int32_t>(b.steps, &StepRecord::drafted));
  st.at("accepted").append(column<int32_t>(b.steps, &StepRecord::accepted));
  st.at("depth").append(column<int32_t>(b.steps, &StepRecord::depth));
  st.at("bonus").append(column<int8_t>(b.steps, &StepRecord::bonus));
  st.at("emitted").append(column<int32_t>(b.steps, &StepRecord::emitted));

  t.timings.append(b.timings_ms.data(), b.n_steps);
  t.timings_batch.append(std::vector<int64_t>(static_cast<size_t>(b.n_steps), b.batch));
  // CPU rows and the host snapshot; NaN where a batch came without them.
  const size_t cells = static_cast<size_t>(b.n_steps) * static_cast<size_t>(b.n_ranks);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (b.cpu_ms.empty())
    t.cpu_timings.append(std::vector<float>(cells * kNumCpuColumns, nan).data(), b.n_steps);
  else
    t.cpu_timings.append(b.cpu_ms.data(), b.n_steps);
  if (b.device_ms.empty())
    t.device_timings.append(std::vector<float>(cells * kNumDeviceColumns, nan).data(), b.n_steps);
  else
    t.device_timings.append(b.device_ms.data(), b.n_steps);
  if (b.device_passes.empty())
    t.device_passes.append(std::vector<float>(cells * kNumPassColumns, nan).data(), b.n_steps);
  else
    t.device_passes.append(b.device_passes.data(), b.n_steps);
  if (b.host.empty())
    t.host.append(std::vector<float>(static_cast<size_t>(b.n_ranks) * kNumHostFields, nan).data(),
                  1);
  else
    t.host.append(b.host.data(), 1);
  std::string busy;
  for (size_t r = 0; r < b.host_busy.size(); ++r)
    if (!b.host_busy[r].empty())
      busy += (busy.empty() ? "" : " | ") + ("rank " + std::to_string(r) + ": ") + b.host_busy[r];
  t.host_busy.append_strings({busy});
  if (t.experts.count(kExpertTarget))
    result_layout::append_expert_rows(t.experts.at(kExpertTarget), b.target_experts);
  if (t.experts.count(kExpertDraft))
    result_layout::append_expert_rows(t.experts.at(kExpertDraft), b.draft_experts);
  s.at("output_offsets").append(offsets);

  // 2. Running totals (rewritten in place; readers recompute them from /<mode>/batches).
  std::vector<int64_t>& totals = apos_totals.at(mode);
  for (size_t i = 0; i < totals.size(); ++i) totals[i] += b.accepted_per_position[i];
  t.apos.write(0, t.draft_len, totals.data());

  // 3. The rows reach the file before anything that commits them: a flush that fails here
  // leaves the last commit record pointing at rows that are all in the file.
  file.flush();

  // 4. The commit record, then the committed counts, then flush.
  Committed next;
  next.batches = c.batches + 1;
  next.sequences = c.sequences + static_cast<int64_t>(seqs.size());
  next.steps = c.steps + static_cast<int64_t>(b.steps.size());
  next.timing_rows = c.timing_rows + b.n_steps;
  next.tokens = end;
  for (auto& [model, e] : t.experts) {
    const ExpertRecords& r = model == kExpertTarget ? b.target_experts : b.draft_experts;
    const auto before =
        c.expert_ends.count(model) ? c.expert_ends.at(model) : std::pair<int64_t, int64_t>{};
    next.expert_ends[model] = {before.first + r.passes(), before.second + r.sequence_rows()};
  }
  auto& bt = t.batches;
  bt.at("batch").append(&b.batch, 1);
  bt.at("sequences_end").append(&next.sequences, 1);
  bt.at("steps_end").append(&next.steps, 1);
  bt.at("timing_rows_end").append(&next.timing_rows, 1);
  bt.at("output_tokens_end").append(&next.tokens, 1);
  bt.at("accepted_per_position").append(b.accepted_per_position.data(), 1);
  for (auto& [model, e] : t.experts)
    result_layout::append_expert_commit(e, next.expert_ends.at(model).first,
                                        next.expert_ends.at(model).second);
  t.group.set_attr_int64("batches_committed", next.batches);
  t.group.set_attr_int64("sequences_committed", next.sequences);
  file.flush();
  c = next;
  batch_ids[mode].insert(b.batch);
}

int64_t ResultWriter::batches_committed(const std::string& mode) const {
  auto it = impl_->committed.find(mode);
  return it == impl_->committed.end() ? 0 : it->second.batches;
}

int64_t ResultWriter::sequences_committed(const std::string& mode) const {
  auto it = impl_->committed.find(mode);
  return it == impl_->committed.end() ? 0 : it->second.sequences;
}

void ResultWriter::record_alarm(const std::string& text) {
  Impl& m = *impl_;
  SPEC_CHECK(m.file.valid() && !m.broken,
             m.path << ": record_alarm() after finish() or a failed write");
  try {
    m.file.reserve(kMetadataReserve + 2 * text.size(), "an alarm");
    std::vector<std::string> alarms =
        m.file.has_attr("alarms") ? m.file.attr_strings("alarms") : std::vector<std::string>{};
    alarms.push_back(utc_timestamp() + " " + text);
    m.file.set_attr_strings("alarms", alarms);
    m.file.flush();
    m.file.release_reserve();
  } catch (const Error& e) {
    m.abandon();
    throw Error(e.message() + m.committed_text(), e.where(), e.exit_code());
  }
}

void ResultWriter::finish(const std::string& models) {
  Impl& m = *impl_;
  SPEC_CHECK(m.file.valid(), m.path << ": finish() called twice");
  SPEC_CHECK(!m.broken, m.path << ": finish() after a failed write");
  try {
    m.file.reserve(kMetadataReserve + 2 * models.size(), "the end of the job");
    if (!models.empty()) m.file.group("provenance").set_attr_string("models", models);
    m.file.set_attr_string("finished", utc_timestamp());
    m.file.flush();
    m.file.release_reserve();
    m.modes.clear();
    m.file.close();
  } catch (const Error& e) {
    m.abandon();
    throw Error(e.message() + "; " + m.path + " keeps every batch, unfinished: continue with " +
                    "`specrun run ... --resume` once there is room",
                e.where(), e.exit_code());
  }
  if (m.path != m.output) {
    SPEC_CHECK(std::rename(m.path.c_str(), m.output.c_str()) == 0,
               "cannot rename " << m.path << " over " << m.output << ": " << std::strerror(errno)
                                << "; the finished result is " << m.path);
    sync_directory(m.output);
    m.path = m.output;
  }
}

const std::string& ResultWriter::path() const {
  return impl_->path;
}

const std::string& ResultWriter::output() const {
  return impl_->output;
}

}  // namespace specrun
