#include "io/dataset_layout.h"

#include <cstring>

#include "common/clock.h"
#include "common/error.h"
#include "io/result_file.h"
#include "kernels/cpu/dtype.h"

namespace specrun::dataset_layout {

// The HDF5 type of a storage type (file and memory: values are converted on the host first).
h5::Id store_h5_type(StoreType t) {
  switch (t) {
    case StoreType::kBF16:
      return h5::bfloat16_type();
    case StoreType::kF16:
      return h5::float16_type();
    case StoreType::kF32:
      break;
  }
  return h5::Id(H5Tcopy(H5T_IEEE_F32LE));
}

// float32 values to storage bytes (round to nearest even), appended to `out`.
void to_store(StoreType t, const float* v, std::size_t n, std::vector<std::byte>& out) {
  const std::size_t at = out.size();
  out.resize(at + n * store_type_size(t));
  std::byte* p = out.data() + at;
  for (std::size_t i = 0; i < n; ++i) {
    if (t == StoreType::kF32) {
      std::memcpy(p + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t b = t == StoreType::kBF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(p + 2 * i, &b, 2);
    }
  }
}

hid_t column_type(Column::Kind k) {
  switch (k) {
    case Column::kI8:
      return H5T_STD_I8LE;
    case Column::kI32:
      return H5T_STD_I32LE;
    case Column::kI64:
      return H5T_STD_I64LE;
    case Column::kF64:
      return H5T_IEEE_F64LE;
    case Column::kString:
      break;
  }
  return H5I_INVALID_HID;
}

void describe(h5::Object& d, const char* unit, const char* description) {
  if (unit[0] != '\0') d.set_attr_string("unit", unit);
  d.set_attr_string("description", description);
}

h5::RowsOptions small_rows() {
  h5::RowsOptions o;
  o.compress = false;  // small next to the hidden states; cheap to read back
  o.chunk_bytes = 16 * 1024;
  return o;
}

void write_header(h5::File& f, const DatasetHeader& h, const std::string& kind) {
  f.set_attr_string("schema", kDatasetSchema);
  f.set_attr_int32("schema_version", kDatasetSchemaVersion);
  f.set_attr_string("kind", kind);
  write_job_identity(f, h);
  f.set_attr_int32("shard", h.shard);
  h5::Group prov = f.group("provenance");
  prov.set_attr_string("target_fingerprint", h.target_fingerprint);
  prov.set_attr_string("capture_convention", h.capture_convention);
}

DatasetHeader read_header(const h5::File& f) {
  DatasetHeader h;
  read_job_identity(f, h);
  h.shard = static_cast<int32_t>(f.attr_int("shard"));
  h5::Group prov = f.group("provenance");
  h.target_fingerprint = prov.attr_string("target_fingerprint");
  h.capture_convention = prov.attr_string("capture_convention");
  return h;
}

void write_layout(h5::File& f, const DatasetLayout& l) {
  h5::Group g = f.create_group("layout");
  std::vector<int32_t> layers(l.layers.begin(), l.layers.end());
  h5::Dataset d = h5::create_fixed<int32_t>(g, "layers", {layers.size()}, layers.data());
  describe(d, "",
           "captured layer ids: i < num_layers is the input of target layer i (Hugging Face "
           "hidden_states[i]), num_layers the final norm's output");
  g.set_attr_int32("num_layers", l.num_layers);
  g.set_attr_int32("hidden_size", l.hidden_size);
  g.set_attr_string("positions", l.positions);
  g.set_attr_string("dtype", store_type_name(l.dtype));
  g.set_attr_int32("topk", l.topk);
  g.set_attr_string("topk_dtype", store_type_name(l.topk_dtype));
  g.set_attr_string("compression", l.compression);
  g.set_attr_int32("level", l.level);
  g.set_attr_int32("chunk_rows", l.chunk_rows);
}

DatasetLayout read_layout(const h5::File& f) {
  DatasetLayout l;
  h5::Group g = f.group("layout");
  for (int32_t v : g.dataset("layers").read_all<int32_t>()) l.layers.push_back(v);
  l.num_layers = static_cast<int>(g.attr_int("num_layers"));
  l.hidden_size = static_cast<int>(g.attr_int("hidden_size"));
  l.positions = g.attr_string("positions");
  l.dtype = parse_store_type(g.attr_string("dtype"));
  l.topk = static_cast<int>(g.attr_int("topk"));
  l.topk_dtype = parse_store_type(g.attr_string("topk_dtype"));
  l.compression = g.attr_string("compression");
  l.level = static_cast<int>(g.attr_int("level"));
  l.chunk_rows = static_cast<int>(g.attr_int("chunk_rows"));
  return l;
}

int64_t check_schema(const h5::File& f) {
  const std::string& file = f.file_path();
  SPEC_INPUT_CHECK(
      f.has_attr("schema") && f.attr_string("schema") == kDatasetSchema,
      file << " is not a specrun dataset file (no schema = '" << kDatasetSchema << "' attribute)");
  const int64_t version = f.attr_int("schema_version");
  SPEC_INPUT_CHECK(version >= 1 && version <= kDatasetSchemaVersion,
                   file << " has dataset schema version " << version << "; this specrun reads "
                        << "version " << kDatasetSchemaVersion << " (written by a newer specrun?)");
  return version;
}

ShardTables create_tables(h5::File& f, const DatasetLayout& l) {
  ShardTables t;
  h5::Group seq = f.create_group("sequences");
  for (const Column& c : kSequenceColumns) {
    h5::Dataset d = c.kind == Column::kString
                        ? h5::create_string_rows(seq, c.name, h5::chunk_rows(1024))
                        : h5::create_rows(seq, c.name, column_type(c.kind), small_rows());
    describe(d, c.unit, c.description);
    t.seq.emplace(c.name, std::move(d));
  }
  h5::RowsOptions tok = small_rows();
  tok.chunk_bytes = 64 * 1024;
  t.tokens = h5::create_rows<int32_t>(f, "tokens", tok);
  describe(t.tokens, "", "every sequence's prompt and generated tokens, concatenated");
  h5::RowsOptions big;
  big.chunk_rows = static_cast<hsize_t>(l.chunk_rows);
  big.compress = l.compression != "none";
  big.codec = l.compression == "lz4" ? h5::Codec::kLz4 : h5::Codec::kGzip;
  big.level = l.level;
  if (!l.layers.empty()) {
    big.row_shape = {l.layers.size(), static_cast<hsize_t>(l.hidden_size)};
    h5::Id type = store_h5_type(l.dtype);
    t.hidden = h5::create_rows(f, "hidden", type.get(), big);
    describe(t.hidden, "",
             "captured hidden states [rows, layers, hidden] of the stored positions (see "
             "/layout and sequences/first_row)");
  }
  if (l.topk > 0) {
    big.row_shape = {static_cast<hsize_t>(l.topk)};
    t.topk_ids = h5::create_rows<int32_t>(f, "topk_ids", big);
    describe(t.topk_ids, "", "the target's top-k next tokens at each stored position");
    h5::Id ptype = store_h5_type(l.topk_dtype);
    t.topk_probs = h5::create_rows(f, "topk_probs", ptype.get(), big);
    describe(t.topk_probs, "", "their probabilities (softmax of the logits, temperature 1)");
  }
  h5::Group commits = f.create_group("commits");
  for (const char* name : kCommitColumns) {
    h5::Dataset d = h5::create_rows<int64_t>(commits, name, small_rows());
    describe(d, "", "commit record: counts of what is durable at this commit");
    t.commits.emplace(name, std::move(d));
  }
  return t;
}

ShardTables open_tables(const h5::File& f, const DatasetLayout& l, bool index) {
  ShardTables t;
  h5::Group seq = f.group("sequences");
  for (const Column& c : kSequenceColumns) t.seq.emplace(c.name, seq.dataset(c.name));
  if (index) t.seq.emplace("shard", seq.dataset("shard"));
  t.tokens = f.dataset("tokens");
  if (!l.layers.empty()) {
    t.hidden = f.dataset("hidden");
    const std::vector<hsize_t> dims = t.hidden.dims();
    SPEC_INPUT_CHECK(dims.size() == 3 && dims[1] == l.layers.size() &&
                         dims[2] == static_cast<hsize_t>(l.hidden_size),
                     t.hidden.where() << " should be [rows, " << l.layers.size() << ", "
                                      << l.hidden_size << "]");
  }
  if (l.topk > 0) {
    t.topk_ids = f.dataset("topk_ids");
    t.topk_probs = f.dataset("topk_probs");
  }
  if (!index) {
    h5::Group commits = f.group("commits");
    for (const char* name : kCommitColumns) t.commits.emplace(name, commits.dataset(name));
  }
  return t;
}

// The last commit record whose rows are all present (a kill may have left a later one
// half-flushed).
Commit find_commit(const ShardTables& t) {
  int64_t n = INT64_MAX;
  for (const auto& [name, d] : t.commits) n = std::min(n, d.rows());
  int64_t seq_rows = INT64_MAX;
  for (const auto& [name, d] : t.seq) seq_rows = std::min(seq_rows, d.rows());
  const int64_t tok_rows = t.tokens.rows();
  const int64_t hid_rows = t.hidden.valid() ? t.hidden.rows() : INT64_MAX;
  const int64_t topk_rows =
      t.topk_ids.valid() ? std::min(t.topk_ids.rows(), t.topk_probs.rows()) : INT64_MAX;
  for (; n > 0; --n) {
    Commit c;
    c.records = n;
    c.sequences = t.commits.at("sequences_end").read<int64_t>(n - 1, 1)[0];
    c.tokens = t.commits.at("tokens_end").read<int64_t>(n - 1, 1)[0];
    c.rows = t.commits.at("rows_end").read<int64_t>(n - 1, 1)[0];
    c.written = t.commits.at("rows_written").read<int64_t>(n - 1, 1)[0];
    if (c.sequences <= seq_rows && c.tokens <= tok_rows && c.written <= hid_rows &&
        c.written <= topk_rows && c.rows <= c.written)
      return c;
  }
  return Commit{};
}

}  // namespace specrun::dataset_layout
