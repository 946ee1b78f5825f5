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

// The expert accounting's tables (schema version 7): per pass, per (pass, sequence), per commit.
// A column is one value per row, one per MoE layer, or one per layer and expert-parallel rank.
enum class Width { kOne, kLayers, kLayersRanks };

struct ExpertColumn {
  const char* name;
  Kind kind;
  Width width;
  const char* unit;
  const char* description;
};

constexpr ExpertColumn kExpertPassColumns[] = {
    {"batch", Kind::kI64, Width::kOne, "", "batch number of the pass"},
    {"step", Kind::kI32, Width::kOne, "",
     "decoding step of the pass (-1: before the first step: the prefill, a drafter's "
     "begin_batch)"},
    {"kind", Kind::kI8, Width::kOne, "",
     "what the pass was for: index into the group's attribute kinds"},
    {"sequences", Kind::kI32, Width::kOne, "sequences",
     "sequences in the pass (its rows in "
     "sequences/)"},
    {"tokens", Kind::kI32, Width::kOne, "tokens", "tokens the pass computed"},
    {"kept_tokens", Kind::kI32, Width::kOne, "tokens",
     "of those, the tokens kept: all but a verify's rejected proposal nodes"},
    {"unique", Kind::kI32, Width::kLayers, "experts",
     "per MoE layer (attribute layers): experts with at least one token of the pass"},
    {"pairs", Kind::kI32, Width::kLayers, "pairs", "per MoE layer: (token, expert) pairs"},
    {"max_load", Kind::kI32, Width::kLayers, "tokens",
     "per MoE layer: the most tokens routed to one expert"},
    {"bytes", Kind::kI64, Width::kLayers, "bytes",
     "per MoE layer: expert weights read, unique x expert_bytes"},
    {"kept_unique", Kind::kI32, Width::kLayers, "experts",
     "per MoE layer: experts with at least one kept token"},
    {"kept_pairs", Kind::kI32, Width::kLayers, "pairs", "per MoE layer: pairs of kept tokens"},
    {"kept_bytes", Kind::kI64, Width::kLayers, "bytes",
     "per MoE layer: kept_unique x expert_bytes, what the kept tokens alone would read"},
    {"rank_pairs", Kind::kI32, Width::kLayersRanks, "pairs",
     "per MoE layer and expert-parallel rank: the pairs of that rank's experts"},
};

constexpr ExpertColumn kExpertRowColumns[] = {
    {"prompt_index", Kind::kI64, Width::kOne, "",
     "the sequence (prompt file row; -1: not known to the model)"},
    {"tokens", Kind::kI32, Width::kOne, "tokens", "the sequence's tokens in the pass"},
    {"kept_tokens", Kind::kI32, Width::kOne, "tokens", "of those, kept"},
    {"unique", Kind::kI32, Width::kLayers, "experts",
     "per MoE layer: experts with at least one of the sequence's tokens"},
    {"kept_unique", Kind::kI32, Width::kLayers, "experts",
     "per MoE layer: experts with at least one of its kept tokens"},
};

constexpr ExpertColumn kExpertCommitColumns[] = {
    {"passes_end", Kind::kI64, Width::kOne, "rows", "passes/ rows committed up to this batch"},
    {"rows_end", Kind::kI64, Width::kOne, "rows", "sequences/ rows committed up to this batch"},
};

std::vector<hsize_t> width_shape(Width w, const ExpertRecords& shape) {
  const hsize_t L = shape.layers.size();
  return w == Width::kOne      ? std::vector<hsize_t>{}
         : w == Width::kLayers ? std::vector<hsize_t>{L}
                               : std::vector<hsize_t>{L, static_cast<hsize_t>(shape.ep)};
}

template <size_t N>
void create_expert_columns(h5::Group& g, const ExpertColumn (&defs)[N], const ExpertRecords& shape,
                           std::map<std::string, h5::Dataset>& out) {
  for (const ExpertColumn& c : defs) {
    h5::RowsOptions o = uncompressed(width_shape(c.width, shape));
    o.chunk_bytes = 16 * 1024;
    h5::Dataset d = h5::create_rows(g, c.name, file_type(c.kind), o);
    describe(d, c.unit, c.description);
    out.emplace(c.name, std::move(d));
  }
}

template <size_t N>
void open_expert_columns(const h5::Group& g, const ExpertColumn (&defs)[N],
                         const ExpertRecords& shape, std::map<std::string, h5::Dataset>& out) {
  for (const ExpertColumn& c : defs) {
    h5::Dataset d = g.dataset(c.name);
    const std::vector<hsize_t> want = width_shape(c.width, shape);
    const std::vector<hsize_t> dims = d.dims();
    const bool ok = d.type_class() == H5T_INTEGER && dims.size() == 1 + want.size() &&
                    std::equal(want.begin(), want.end(), dims.begin() + 1);
    std::string shape_text = "[rows";
    for (hsize_t x : want) shape_text += " x " + std::to_string(x);
    SPEC_INPUT_CHECK(ok, d.where() << " should be an integer dataset of shape " << shape_text
                                   << "]; it is " << dims.size() << "-D " << d.type_text());
    out.emplace(c.name, std::move(d));
  }
}

ExpertTables open_experts(const h5::Group& mode_group, const std::string& model) {
  ExpertTables e;
  e.group = mode_group.group("experts").group(model);
  ExpertRecords& s = e.shape;
  s.top_k = static_cast<int32_t>(e.group.attr_int("top_k"));
  s.n_experts = static_cast<int32_t>(e.group.attr_int("n_experts"));
  s.ep = static_cast<int32_t>(e.group.attr_int("ep"));
  s.expert_bytes = e.group.attr_int("expert_bytes");
  e.layers = e.group.dataset("layers");
  SPEC_INPUT_CHECK(e.layers.rank() == 1 && e.layers.type_class() == H5T_INTEGER,
                   e.layers.where() << " should be a 1-D integer dataset");
  s.layers = e.layers.read_all<int32_t>();
  // An impossible shape is a damaged file: the tables' widths below would be meaningless.
  const std::string problem = expert_shape_problem(s);
  SPEC_INPUT_CHECK(problem.empty(), e.group.where() << ": " << problem << ": the file is damaged");
  open_expert_columns(e.group.group("passes"), kExpertPassColumns, s, e.passes);
  open_expert_columns(e.group.group("sequences"), kExpertRowColumns, s, e.rows);
  open_expert_columns(e.group.group("commits"), kExpertCommitColumns, s, e.commits);
  return e;
}

}  // namespace

void check_mode(const std::string& mode) {
  SPEC_CHECK(is_known_mode(mode),
             "unknown decoding mode '" << mode << "'; expected 'baseline' or 'speculative'");
}

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

void create_experts(ModeTables& t, const std::string& model, const ExpertRecords& shape) {
  h5::Group experts = t.group.require_group("experts");
  ExpertTables e;
  e.group = experts.create_group(model);
  e.shape.top_k = shape.top_k;
  e.shape.n_experts = shape.n_experts;
  e.shape.ep = shape.ep;
  e.shape.expert_bytes = shape.expert_bytes;
  e.shape.layers = shape.layers;
  e.group.set_attr_int32("top_k", shape.top_k);
  e.group.set_attr_int32("n_experts", shape.n_experts);
  e.group.set_attr_int32("ep", shape.ep);
  e.group.set_attr_int64("expert_bytes", shape.expert_bytes);
  e.group.set_attr_strings("kinds",
                           std::vector<std::string>(kPassKindNames.begin(), kPassKindNames.end()));
  e.layers =
      h5::create_fixed<int32_t>(e.group, "layers", {shape.layers.size()}, shape.layers.data());
  describe(e.layers, "", "the MoE layers' ids: the last axis of the per-layer tables");
  h5::Group passes = e.group.create_group("passes");
  create_expert_columns(passes, kExpertPassColumns, e.shape, e.passes);
  h5::Group rows = e.group.create_group("sequences");
  create_expert_columns(rows, kExpertRowColumns, e.shape, e.rows);
  h5::Group commits = e.group.create_group("commits");
  create_expert_columns(commits, kExpertCommitColumns, e.shape, e.commits);
  t.experts.emplace(model, std::move(e));
}

void append_expert_rows(ExpertTables& e, const ExpertRecords& r) {
  if (r.empty()) return;
  auto& p = e.passes;
  p.at("batch").append(r.batch);
  p.at("step").append(r.step);
  p.at("kind").append(r.kind);
  p.at("sequences").append(r.sequences);
  p.at("tokens").append(r.tokens);
  p.at("kept_tokens").append(r.kept_tokens);
  p.at("unique").append(r.unique);
  p.at("pairs").append(r.pairs);
  p.at("max_load").append(r.max_load);
  p.at("kept_unique").append(r.kept_unique);
  p.at("kept_pairs").append(r.kept_pairs);
  std::vector<int64_t> bytes(r.unique.size()), kept_bytes(r.unique.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<int64_t>(r.unique[i]) * r.expert_bytes;
    kept_bytes[i] = static_cast<int64_t>(r.kept_unique[i]) * r.expert_bytes;
  }
  p.at("bytes").append(bytes);
  p.at("kept_bytes").append(kept_bytes);
  p.at("rank_pairs").append(r.rank_pairs);
  auto& q = e.rows;
  q.at("prompt_index").append(r.seq_prompt_index);
  q.at("tokens").append(r.seq_tokens);
  q.at("kept_tokens").append(r.seq_kept_tokens);
  q.at("unique").append(r.seq_unique);
  q.at("kept_unique").append(r.seq_kept_unique);
}

void append_expert_commit(ExpertTables& e, int64_t passes_end, int64_t rows_end) {
  e.commits.at("passes_end").append(&passes_end, 1);
  e.commits.at("rows_end").append(&rows_end, 1);
}

ExpertRecords read_experts(const ExpertTables& e, int64_t first, int64_t n, int64_t row_first,
                           int64_t rows) {
  ExpertRecords r = e.shape;
  const auto& p = e.passes;
  r.batch = p.at("batch").read<int64_t>(first, n);
  r.step = p.at("step").read<int32_t>(first, n);
  r.kind = p.at("kind").read<int8_t>(first, n);
  r.sequences = p.at("sequences").read<int32_t>(first, n);
  r.tokens = p.at("tokens").read<int32_t>(first, n);
  r.kept_tokens = p.at("kept_tokens").read<int32_t>(first, n);
  r.unique = p.at("unique").read<int32_t>(first, n);
  r.pairs = p.at("pairs").read<int32_t>(first, n);
  r.max_load = p.at("max_load").read<int32_t>(first, n);
  r.kept_unique = p.at("kept_unique").read<int32_t>(first, n);
  r.kept_pairs = p.at("kept_pairs").read<int32_t>(first, n);
  r.rank_pairs = p.at("rank_pairs").read<int32_t>(first, n);
  const auto& q = e.rows;
  r.seq_prompt_index = q.at("prompt_index").read<int64_t>(row_first, rows);
  r.seq_tokens = q.at("tokens").read<int32_t>(row_first, rows);
  r.seq_kept_tokens = q.at("kept_tokens").read<int32_t>(row_first, rows);
  r.seq_unique = q.at("unique").read<int32_t>(row_first, rows);
  r.seq_kept_unique = q.at("kept_unique").read<int32_t>(row_first, rows);
  // The stored bytes are derived: they must be what the counts and the shape say.
  const std::vector<int64_t> bytes = p.at("bytes").read<int64_t>(first, n);
  const std::vector<int64_t> kept_bytes = p.at("kept_bytes").read<int64_t>(first, n);
  for (size_t i = 0; i < bytes.size(); ++i)
    SPEC_INPUT_CHECK(bytes[i] == static_cast<int64_t>(r.unique[i]) * r.expert_bytes &&
                         kept_bytes[i] == static_cast<int64_t>(r.kept_unique[i]) * r.expert_bytes,
                     p.at("bytes").where()
                         << " row " << first + static_cast<int64_t>(i / r.layers.size())
                         << " is not unique x expert_bytes (" << r.expert_bytes
                         << "): the file is damaged");
  const std::string problem = expert_records_problem(r);
  SPEC_INPUT_CHECK(problem.empty(), e.group.where() << ": " << problem << ": the file is damaged");
  return r;
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
  if (t.version >= 7 && t.group.has("experts"))
    for (const char* model : {kExpertTarget, kExpertDraft})
      if (t.group.group("experts").has(model))
        t.experts.emplace(model, open_experts(t.group, model));
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
  // The expert accounting's commit rows, and the rows they may point to.
  struct ExpertRows {
    std::vector<int64_t> passes_end, rows_end;
    int64_t passes = 0, rows = 0;
  };
  std::map<std::string, ExpertRows> experts;
  for (const auto& [model, e] : t.experts) {
    for (const auto& [name, d] : e.commits)
      if (d.rows() < n) {
        n = d.rows();
        why = "the commit table " + d.where() + " holds " + std::to_string(n) + " rows";
      }
    experts[model].passes = min_rows(e.passes, "");
    experts[model].rows = min_rows(e.rows, "");
  }
  n = std::max<int64_t>(n, 0);
  for (auto& [model, x] : experts) {
    x.passes_end = t.experts.at(model).commits.at("passes_end").read<int64_t>(0, n);
    x.rows_end = t.experts.at(model).commits.at("rows_end").read<int64_t>(0, n);
  }
  // Each record ends where the one before ended or later (a batch holds at least one sequence):
  // a record that does not is damaged, and so is what it commits.
  const auto sequences_end = t.batches.at("sequences_end").read<int64_t>(0, n);
  const auto steps_end = t.batches.at("steps_end").read<int64_t>(0, n);
  const auto timing_end = t.batches.at("timing_rows_end").read<int64_t>(0, n);
  const auto tokens_end = t.batches.at("output_tokens_end").read<int64_t>(0, n);
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    bool grows =
        k == 0
            ? sequences_end[k] > 0 && steps_end[k] >= 0 && timing_end[k] >= 0 && tokens_end[k] >= 0
            : sequences_end[k] > sequences_end[k - 1] && steps_end[k] >= steps_end[k - 1] &&
                  timing_end[k] >= timing_end[k - 1] && tokens_end[k] >= tokens_end[k - 1];
    for (const auto& [model, x] : experts)
      grows = grows && x.passes_end[k] >= (k == 0 ? 0 : x.passes_end[k - 1]) &&
              x.rows_end[k] >= (k == 0 ? 0 : x.rows_end[k - 1]);
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
    for (const auto& [model, x] : experts) {
      c.expert_ends[model] = {x.passes_end[k], x.rows_end[k]};
      rows_present = rows_present && x.passes_end[k] <= x.passes && x.rows_end[k] <= x.rows;
    }
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
  for (auto& [model, e] : t.experts) {
    const auto it = c.expert_ends.find(model);
    const std::pair<int64_t, int64_t> end =
        it == c.expert_ends.end() ? std::pair<int64_t, int64_t>{} : it->second;
    for (auto& [name, d] : e.passes) d.resize_rows(end.first);
    for (auto& [name, d] : e.rows) d.resize_rows(end.second);
    for (auto& [name, d] : e.commits) d.resize_rows(c.batches);
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
