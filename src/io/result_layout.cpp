#include "io/result_layout.h"

#include <algorithm>
#include <array>

#include "common/error.h"
#include "io/records.h"
#include "io/result_file.h"

namespace specrun::result_layout {

namespace {

enum class Kind { kI8, kI32, kI64, kF64, kString };

// One column of a row table. `unit` and `description` become dataset attributes, so a file is
// self-describing in h5py (f[...].attrs["description"]).
struct ColumnDef {
  const char* name;
  Kind kind;
  const char* unit;
  const char* description;
};

constexpr ColumnDef kSequenceColumns[] = {
    {"batch", Kind::kI64, "", "batch number that decoded this prompt"},
    {"prompt_index", Kind::kI64, "", "row of the prompt in the prompt file"},
    {"prompt_id", Kind::kString, "", "prompt id from the prompt file (index when it has none)"},
    {"category", Kind::kString, "", "prompt category from the prompt file, '' when none"},
    {"prompt_len", Kind::kI32, "tokens", "prompt length"},
    {"generated", Kind::kI32, "tokens", "tokens generated after the prompt"},
    {"verify_steps", Kind::kI32, "steps", "target forward passes that emitted tokens"},
    {"drafted", Kind::kI64, "tokens", "draft tokens proposed (0 in baseline)"},
    {"accepted", Kind::kI64, "tokens", "draft tokens accepted (0 in baseline)"},
    {"finish_reason", Kind::kI8, "", "0 = max_new_tokens reached, 1 = EOS"},
    {"wall_s", Kind::kF64, "s", "wall time from the sequence's first step to its last"},
    {"output_tokens", Kind::kI32, "",
     "generated token ids of all sequences, concatenated; see output_offsets"},
    {"output_offsets", Kind::kI64, "",
     "N+1 offsets: row i's tokens are output_tokens[output_offsets[i]:output_offsets[i+1]]"},
};

constexpr ColumnDef kStepColumns[] = {
    {"batch", Kind::kI64, "", "batch number"},
    {"step", Kind::kI32, "", "decoding step within the batch, from 0"},
    {"prompt_index", Kind::kI64, "", "sequence (prompt file row) this row describes"},
    {"active", Kind::kI32, "sequences", "sequences still decoding in this step"},
    {"drafted", Kind::kI32, "tokens", "draft tokens proposed to the sequence in this step"},
    {"accepted", Kind::kI32, "tokens", "of those, accepted: the accepted path's length"},
};

// Step columns added in schema version 2 (draft trees).
constexpr ColumnDef kStepColumnsV2[] = {
    {"depth", Kind::kI32, "tokens", "the proposal's deepest path (a chain of k: k; baseline: 0)"},
    {"bonus", Kind::kI8, "",
     "1 when the accepted path ends at a leaf of the proposal (the emitted token is the bonus "
     "sample), 0 for a correction or no proposal"},
    {"emitted", Kind::kI32, "tokens",
     "tokens appended to the output in this step (accepted + 1, fewer when EOS or "
     "max_new_tokens cut it)"},
};

constexpr ColumnDef kBatchColumns[] = {
    {"batch", Kind::kI64, "", "batch number of this commit"},
    {"sequences_end", Kind::kI64, "rows", "sequences rows committed up to this batch"},
    {"steps_end", Kind::kI64, "rows", "steps rows committed up to this batch"},
    {"timing_rows_end", Kind::kI64, "rows", "timings rows committed up to this batch"},
    {"output_tokens_end", Kind::kI64, "tokens", "output_tokens committed up to this batch"},
};

hid_t file_type(Kind kind) {
  switch (kind) {
    case Kind::kI8:
      return h5::TypeOf<int8_t>::file();
    case Kind::kI32:
      return h5::TypeOf<int32_t>::file();
    case Kind::kI64:
      return h5::TypeOf<int64_t>::file();
    case Kind::kF64:
      return h5::TypeOf<double>::file();
    case Kind::kString:
      break;
  }
  return H5I_INVALID_HID;
}

// Result tables are chunked but NOT compressed. A compressed chunk changes size when a batch
// appends to it, so HDF5 moves it and may hand its old space to another chunk before the chunk
// index on disk points to the new copy: a kill between two flushes then corrupted committed
// rows (the SIGKILL test caught it: "inflate() failed"). Uncompressed chunks never move; a
// rewrite puts the same bytes back over committed rows.
h5::RowsOptions uncompressed(std::vector<hsize_t> row_shape) {
  h5::RowsOptions o;
  o.row_shape = std::move(row_shape);
  o.compress = false;
  return o;
}

void describe(h5::Object& d, const char* unit, const char* description) {
  if (unit[0] != '\0') d.set_attr_string("unit", unit);
  d.set_attr_string("description", description);
}

template <size_t N>
void create_table(h5::Group& g, const ColumnDef (&defs)[N],
                  std::map<std::string, h5::Dataset>& out) {
  for (const ColumnDef& c : defs) {
    h5::RowsOptions o = uncompressed({});
    o.chunk_bytes = std::string(c.name) == "output_tokens" ? 64 * 1024 : 16 * 1024;
    h5::RowsOptions strings = uncompressed({});
    strings.chunk_rows = 256;
    h5::Dataset d = c.kind == Kind::kString ? h5::create_string_rows(g, c.name, strings)
                                            : h5::create_rows(g, c.name, file_type(c.kind), o);
    describe(d, c.unit, c.description);
    out.emplace(c.name, std::move(d));
  }
}

template <size_t N>
std::map<std::string, h5::Dataset> create_table(h5::Group& g, const ColumnDef (&defs)[N]) {
  std::map<std::string, h5::Dataset> out;
  create_table(g, defs, out);
  return out;
}

template <size_t N>
void open_table(const h5::Group& g, const ColumnDef (&defs)[N],
                std::map<std::string, h5::Dataset>& out) {
  for (const ColumnDef& c : defs) {
    h5::Dataset d = g.dataset(c.name);
    bool ok =
        d.rank() == 1 && (c.kind == Kind::kString ? d.is_string() : d.type_class() != H5T_STRING);
    SPEC_INPUT_CHECK(ok, d.where() << " should be a 1-D "
                                   << (c.kind == Kind::kString ? "string" : "numeric")
                                   << " dataset; it is " << d.rank() << "-D " << d.type_text());
    out.emplace(c.name, std::move(d));
  }
}

template <size_t N>
std::map<std::string, h5::Dataset> open_table(const h5::Group& g, const ColumnDef (&defs)[N]) {
  std::map<std::string, h5::Dataset> out;
  open_table(g, defs, out);
  return out;
}

// A [steps x ranks x columns] float32 dataset beside the timings, described, its columns named.
template <std::size_t N>
h5::Dataset create_rank_rows(h5::Group& g, const char* name, int32_t n_ranks,
                             const std::array<const char*, N>& columns, const char* unit,
                             const char* description) {
  h5::Dataset d = h5::create_rows<float>(g, name, uncompressed({static_cast<hsize_t>(n_ranks), N}));
  describe(d, unit, description);
  d.set_attr_strings("columns", std::vector<std::string>(columns.begin(), columns.end()));
  return d;
}

// A [steps x ranks x columns] dataset beside the timings, its shape checked.
h5::Dataset rank_rows(const h5::Group& g, const char* name, hsize_t ranks, int columns) {
  h5::Dataset d = g.dataset(name);
  const std::vector<hsize_t> dims = d.dims();
  SPEC_INPUT_CHECK(
      dims.size() == 3 && dims[1] == ranks && dims[2] == static_cast<hsize_t>(columns),
      d.where() << " should be [steps x " << ranks << " ranks x " << columns << " columns]");
  return d;
}

}  // namespace

int64_t check_schema(const h5::Group& root) {
  const std::string& file = root.file_path();
  SPEC_INPUT_CHECK(root.has_attr("schema"),
                   file << " has no 'schema' attribute: it is not a specrun result file");
  std::string schema = root.attr_string("schema");
  SPEC_INPUT_CHECK(schema == kResultSchema, file << " has schema '" << schema << "', expected '"
                                                 << kResultSchema
                                                 << "': it is not a specrun result file");
  int64_t version = root.attr_int("schema_version");
  SPEC_INPUT_CHECK(version >= 1 && version <= kResultSchemaVersion,
                   file << " has result schema version " << version << "; this specrun reads "
                        << "version " << kResultSchemaVersion << " (written by a newer specrun?)");
  return version;
}

ModeTables create_mode(h5::Group& root, const std::string& mode, int32_t draft_len,
                       int32_t n_ranks) {
  ModeTables t;
  t.draft_len = draft_len;
  t.n_ranks = n_ranks;
  t.group = root.create_group(mode);
  t.group.set_attr_int32("draft_len", draft_len);
  t.group.set_attr_int64("batches_committed", 0);
  t.group.set_attr_int64("sequences_committed", 0);
  h5::Group seq = t.group.create_group("sequences");
  t.seq = create_table(seq, kSequenceColumns);
  t.seq.at("output_offsets").append(std::vector<int64_t>{0});
  h5::Group steps = t.group.create_group("steps");
  t.steps = create_table(steps, kStepColumns);
  create_table(steps, kStepColumnsV2, t.steps);
  t.version = kResultSchemaVersion;

  std::vector<std::string> phases(kPhaseNames.begin(), kPhaseNames.end());
  t.timings = h5::create_rows<float>(
      t.group, "timings",
      uncompressed({static_cast<hsize_t>(n_ranks), static_cast<hsize_t>(kNumPhases)}));
  describe(t.timings, "ms", "per decoding step (row), rank and phase: time spent");
  t.timings.set_attr_strings("phases", phases);
  t.timings_batch = h5::create_rows<int64_t>(t.group, "timings_batch", uncompressed({}));
  describe(t.timings_batch, "", "batch number of each timings row");
  t.cpu_timings = create_rank_rows(
      t.group, "cpu_timings", n_ranks, kCpuColumns, "ms",
      "per timings row and rank: the main thread's CPU time in each phase, then the "
      "run-queue wait of the rank's threads over the step (columns)");
  t.device_timings = create_rank_rows(
      t.group, "device_timings", n_ranks, kDeviceColumns, "ms",
      "per timings row and rank: device time of each phase, from its start to the next "
      "mark on the device's queue, and of the whole step (columns; NaN: no device)");
  t.device_passes = create_rank_rows(
      t.group, "device_passes", n_ranks, kPassColumns, "passes",
      "per timings row and rank: the forward passes of the step's draft and verify phases "
      "on the device, replayed as a CUDA graph, captured into one, or launched kernel by "
      "kernel after recording (eager) or without (unrecorded) (columns; NaN: no device)");

  std::vector<int64_t> zeros(static_cast<size_t>(draft_len), 0);
  t.apos = h5::create_fixed<int64_t>(t.group, "accepted_per_position",
                                     {static_cast<hsize_t>(draft_len)}, zeros.data());
  describe(t.apos, "steps",
           "element i-1: verify steps with at least i draft tokens accepted (committed batches)");

  h5::Group batches = t.group.create_group("batches");
  t.batches = create_table(batches, kBatchColumns);
  h5::Dataset apos = h5::create_rows<int64_t>(batches, "accepted_per_position",
                                              uncompressed({static_cast<hsize_t>(draft_len)}));
  describe(apos, "steps", "this batch's accepted_per_position counts");
  t.batches.emplace("accepted_per_position", std::move(apos));
  std::vector<std::string> host_fields(kHostFields.begin(), kHostFields.end());
  t.host = h5::create_rows<float>(
      batches, "host",
      uncompressed({static_cast<hsize_t>(n_ranks), static_cast<hsize_t>(kNumHostFields)}));
  describe(t.host, "", "each rank's host after this batch (fields; NaN: not readable)");
  t.host.set_attr_strings("fields", host_fields);
  h5::RowsOptions strings = uncompressed({});
  strings.chunk_rows = 256;
  t.host_busy = h5::create_string_rows(batches, "host_busy", strings);
  describe(t.host_busy, "",
           "processes outside the job using >= half a CPU during this batch, per rank "
           "(\"rank R: name (pid) share; ...\", ranks joined by \" | \")");
  return t;
}

ModeTables open_mode(const h5::Group& root, const std::string& mode) {
  ModeTables t;
  t.group = root.group(mode);
  t.draft_len = static_cast<int32_t>(t.group.attr_int("draft_len"));
  t.seq = open_table(t.group.group("sequences"), kSequenceColumns);
  t.version = check_schema(root);
  t.steps = open_table(t.group.group("steps"), kStepColumns);
  if (t.version >= 2) open_table(t.group.group("steps"), kStepColumnsV2, t.steps);
  h5::Group batches = t.group.group("batches");
  t.batches = open_table(batches, kBatchColumns);
  h5::Dataset apos_rows = batches.dataset("accepted_per_position");
  std::vector<hsize_t> apos_dims = apos_rows.dims();
  SPEC_INPUT_CHECK(apos_dims.size() == 2 && apos_dims[1] == static_cast<hsize_t>(t.draft_len),
                   apos_rows.where() << " should be [batches x draft_len " << t.draft_len << "]");
  t.batches.emplace("accepted_per_position", std::move(apos_rows));
  t.timings = t.group.dataset("timings");
  std::vector<hsize_t> dims = t.timings.dims();
  SPEC_INPUT_CHECK(dims.size() == 3 && dims[2] == static_cast<hsize_t>(kNumPhases),
                   t.timings.where() << " should be [steps x ranks x " << kNumPhases << " phases]");
  t.n_ranks = static_cast<int32_t>(dims[1]);
  t.timings_batch = t.group.dataset("timings_batch");
  if (t.version >= 3) {
    t.cpu_timings = rank_rows(t.group, "cpu_timings", dims[1], kNumCpuColumns);
    t.host = batches.dataset("host");
    std::vector<hsize_t> hdims = t.host.dims();
    const int fields = t.version >= 4 ? kNumHostFields : kNumHostFieldsV3;
    SPEC_INPUT_CHECK(
        hdims.size() == 3 && hdims[1] == dims[1] && hdims[2] == static_cast<hsize_t>(fields),
        t.host.where() << " should be [batches x " << dims[1] << " ranks x " << fields
                       << " fields] (result schema " << t.version << ")");
    t.host_busy = batches.dataset("host_busy");
    SPEC_INPUT_CHECK(t.host_busy.rank() == 1 && t.host_busy.is_string(),
                     t.host_busy.where() << " should be a 1-D string dataset");
  }
  if (t.version >= 5)
    t.device_timings = rank_rows(t.group, "device_timings", dims[1], kNumDeviceColumns);
  if (t.version >= 6)
    t.device_passes = rank_rows(t.group, "device_passes", dims[1], kNumPassColumns);
  t.apos = t.group.dataset("accepted_per_position");
  SPEC_INPUT_CHECK(t.apos.rank() == 1 && t.apos.rows() == t.draft_len,
                   t.apos.where() << " should hold draft_len = " << t.draft_len << " values");
  return t;
}

Committed find_committed(const ModeTables& t) {
  const int64_t recorded =
      t.group.has_attr("batches_committed") ? t.group.attr_int("batches_committed") : 0;
  int64_t n = recorded;
  std::string why;
  for (const auto& [name, d] : t.batches)
    if (d.rows() < n) {
      n = d.rows();
      why = "the commit table " + d.where() + " holds " + std::to_string(n) + " rows";
    }
  auto min_rows = [](const std::map<std::string, h5::Dataset>& table, const char* except) {
    int64_t m = INT64_MAX;
    for (const auto& [name, d] : table)
      if (name != except) m = std::min(m, d.rows());
    return m;
  };
  const int64_t seq_rows = min_rows(t.seq, "output_offsets");
  const int64_t step_rows = min_rows(t.steps, "");
  const int64_t offset_rows = t.seq.at("output_offsets").rows();
  const int64_t token_rows = t.seq.at("output_tokens").rows();
  int64_t timing_rows = std::min(t.timings.rows(), t.timings_batch.rows());
  if (t.cpu_timings.valid()) timing_rows = std::min(timing_rows, t.cpu_timings.rows());
  if (t.device_timings.valid()) timing_rows = std::min(timing_rows, t.device_timings.rows());
  if (t.device_passes.valid()) timing_rows = std::min(timing_rows, t.device_passes.rows());
  if (t.host.valid() && std::min(t.host.rows(), t.host_busy.rows()) < n) {
    n = std::min(t.host.rows(), t.host_busy.rows());
    why = "the host table holds " + std::to_string(n) + " rows";
  }
  n = std::max<int64_t>(n, 0);
  // Each record ends where the one before ended or later (a batch holds at least one sequence):
  // a record that does not is damaged, and so is what it commits.
  const auto sequences_end = t.batches.at("sequences_end").read<int64_t>(0, n);
  const auto steps_end = t.batches.at("steps_end").read<int64_t>(0, n);
  const auto timing_end = t.batches.at("timing_rows_end").read<int64_t>(0, n);
  const auto tokens_end = t.batches.at("output_tokens_end").read<int64_t>(0, n);
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    const bool grows =
        k == 0
            ? sequences_end[k] > 0 && steps_end[k] >= 0 && timing_end[k] >= 0 && tokens_end[k] >= 0
            : sequences_end[k] > sequences_end[k - 1] && steps_end[k] >= steps_end[k - 1] &&
                  timing_end[k] >= timing_end[k - 1] && tokens_end[k] >= tokens_end[k - 1];
    if (!grows) {
      why = "commit record " + std::to_string(i + 1) + " of " + t.batches.at("batch").where() +
            " does not follow the one before it (sequences_end " +
            std::to_string(sequences_end[k]) + ", steps_end " + std::to_string(steps_end[k]) +
            ", timing_rows_end " + std::to_string(timing_end[k]) + ", output_tokens_end " +
            std::to_string(tokens_end[k]) + ")";
      n = i;
      break;
    }
  }
  for (; n > 0; --n) {
    Committed c;
    const size_t k = static_cast<size_t>(n - 1);
    c.batches = n;
    c.sequences = sequences_end[k];
    c.steps = steps_end[k];
    c.timing_rows = timing_end[k];
    c.tokens = tokens_end[k];
    c.recorded = recorded;
    bool rows_present = c.sequences + 1 <= offset_rows && c.sequences <= seq_rows &&
                        c.tokens <= token_rows && c.steps <= step_rows &&
                        c.timing_rows <= timing_rows;
    if (rows_present && t.seq.at("output_offsets").read<int64_t>(c.sequences, 1)[0] == c.tokens) {
      if (n < recorded) c.ignored = why;
      return c;
    }
    why = "commit record " + std::to_string(n) + " of " + t.batches.at("batch").where() +
          " points past the rows in the file";
  }
  Committed none;
  none.recorded = recorded;
  if (recorded > 0) none.ignored = why;
  return none;
}

void truncate_to(ModeTables& t, const Committed& c) {
  // String columns are rewritten rather than cut: their dropped rows' elements would stay in the
  // chunk, and the next append would free the heap objects they name (h5::Dataset::
  // rewrite_string_rows), which a killed writer may never have written.
  for (auto& [name, d] : t.seq) {
    const int64_t rows = name == "output_offsets"  ? c.sequences + 1
                         : name == "output_tokens" ? c.tokens
                                                   : c.sequences;
    if (d.is_string())
      d.rewrite_string_rows(rows);
    else
      d.resize_rows(rows);
  }
  for (auto& [name, d] : t.steps) d.resize_rows(c.steps);
  for (auto& [name, d] : t.batches) d.resize_rows(c.batches);
  t.timings.resize_rows(c.timing_rows);
  t.timings_batch.resize_rows(c.timing_rows);
  if (t.cpu_timings.valid()) t.cpu_timings.resize_rows(c.timing_rows);
  if (t.device_timings.valid()) t.device_timings.resize_rows(c.timing_rows);
  if (t.device_passes.valid()) t.device_passes.resize_rows(c.timing_rows);
  if (t.host.valid()) {
    t.host.resize_rows(c.batches);
    t.host_busy.rewrite_string_rows(c.batches);
  }
  t.group.set_attr_int64("batches_committed", c.batches);
  t.group.set_attr_int64("sequences_committed", c.sequences);
}

std::vector<int64_t> apos_totals(const ModeTables& t, const Committed& c) {
  std::vector<int64_t> totals(static_cast<size_t>(t.draft_len), 0);
  if (t.draft_len == 0 || c.batches == 0) return totals;
  std::vector<int64_t> rows = t.batches.at("accepted_per_position").read<int64_t>(0, c.batches);
  for (size_t i = 0; i < rows.size(); ++i) totals[i % totals.size()] += rows[i];
  return totals;
}

}  // namespace specrun::result_layout
