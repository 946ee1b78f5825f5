#include "io/dataset_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <random>
#include <sstream>

#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "io/dataset_layout.h"
#include "kernels/cpu/dtype.h"

namespace specrun {

namespace fs = std::filesystem;

StoreType parse_store_type(const std::string& name) {
  if (name == "bf16") return StoreType::kBF16;
  if (name == "f16") return StoreType::kF16;
  if (name == "f32") return StoreType::kF32;
  SPEC_INPUT_FAIL("storage type '" << name << "': expected bf16, f16 or f32");
}

const char* store_type_name(StoreType t) {
  switch (t) {
    case StoreType::kBF16:
      return "bf16";
    case StoreType::kF16:
      return "f16";
    case StoreType::kF32:
      return "f32";
  }
  return "?";
}

std::size_t store_type_size(StoreType t) {
  return t == StoreType::kF32 ? 4 : 2;
}

std::size_t DatasetLayout::row_bytes() const {
  return layers.size() * static_cast<std::size_t>(hidden_size) * store_type_size(dtype) +
         static_cast<std::size_t>(topk) * (4 + store_type_size(topk_dtype));
}

using namespace dataset_layout;

// Writer
// -------------------------------------------------------------------------------------------

namespace {

// A part's identity (32 hex digits from std::random_device), recorded in the part and, for each
// part it presents, in the top-level file: a part replaced by another job's part of the same name
// (an overwritten, killed job) no longer matches.
std::string new_part_id() {
  std::random_device device;
  std::ostringstream out;
  out << std::hex << std::setfill('0');
  for (int i = 0; i < 4; ++i) out << std::setw(8) << static_cast<std::uint32_t>(device());
  return out.str();
}

// One part file being written (as "<part>.tmp"; renamed to its name when sealed). Rows of the
// compressed datasets wait in memory until a whole chunk is ready; nothing here is flushed
// before seal(): a part that was not sealed is never read.
class PartWriter {
 public:
  PartWriter(const std::string& path, const DatasetHeader& header, const DatasetLayout& layout,
             int32_t run)
      : path_(path), tmp_(path + ".tmp"), layout_(layout) {
    std::error_code ec;
    fs::remove(tmp_, ec);  // a stale part (or a link planted there): never written through
    file_ = h5::File::create(tmp_, false);
    write_header(file_, header, "shard");
    file_.set_attr_int32("resumes", run);
    file_.set_attr_string("part_id", new_part_id());
    write_layout(file_, layout);
    t_ = create_tables(file_, layout);
    hidden_type_ = store_h5_type(layout.dtype);
    probs_type_ = store_h5_type(layout.topk_dtype);
  }

  int64_t sequences() const { return static_cast<int64_t>(rows_.size()); }
  int64_t rows() const { return next_row_; }

  void add(DatasetSequence&& s) {
    to_store(layout_.dtype, s.hidden.data(), s.hidden.size(), tail_hidden_);
    to_store(layout_.topk_dtype, s.topk_probs.data(), s.topk_probs.size(), tail_probs_);
    tail_ids_.insert(tail_ids_.end(), s.topk_ids.begin(), s.topk_ids.end());
    tail_rows_ += s.n_rows;
    DatasetRow row;
    row.prompt_index = s.prompt_index;
    row.prompt_id = std::move(s.prompt_id);
    row.category = std::move(s.category);
    row.prompt_len = s.prompt_len;
    row.generated = s.generated;
    row.finish_reason = s.finish_reason;
    row.wall_s = s.wall_s;
    row.token_offset = static_cast<int64_t>(tokens_.size());
    row.row_offset = next_row_;
    row.first_row = s.first_row;
    row.n_rows = s.n_rows;
    rows_.push_back(std::move(row));
    tokens_.insert(tokens_.end(), s.tokens.begin(), s.tokens.end());
    next_row_ += s.n_rows;
    write_chunks(false);
  }

  // Writes the last, partial chunk and the sequences table, closes the file and renames it to
  // its final name: the part exists complete or not at all.
  void seal() {
    write_chunks(true);
    auto& s = t_.seq;
    std::vector<std::string> ids, cats;
    for (const DatasetRow& r : rows_) {
      ids.push_back(r.prompt_id);
      cats.push_back(r.category);
    }
    s.at("prompt_id").append_strings(ids);
    s.at("category").append_strings(cats);
    auto field = [&](auto member) {
      using T = std::decay_t<decltype(DatasetRow{}.*member)>;
      std::vector<T> out;
      for (const DatasetRow& r : rows_) out.push_back(r.*member);
      return out;
    };
    s.at("prompt_index").append(field(&DatasetRow::prompt_index));
    s.at("prompt_len").append(field(&DatasetRow::prompt_len));
    s.at("generated").append(field(&DatasetRow::generated));
    s.at("finish_reason").append(field(&DatasetRow::finish_reason));
    s.at("wall_s").append(field(&DatasetRow::wall_s));
    s.at("token_offset").append(field(&DatasetRow::token_offset));
    s.at("row_offset").append(field(&DatasetRow::row_offset));
    s.at("first_row").append(field(&DatasetRow::first_row));
    s.at("n_rows").append(field(&DatasetRow::n_rows));
    t_.tokens.append(tokens_);
    const int64_t record[] = {sequences(), static_cast<int64_t>(tokens_.size()), next_row_,
                              written_};
    for (std::size_t i = 0; i < std::size(kCommitColumns); ++i)
      t_.commits.at(kCommitColumns[i]).append(&record[i], 1);
    file_.set_attr_string("finished", utc_timestamp());
    t_ = ShardTables{};
    file_.close();
    // On disk before the name says complete (a node that loses power, not only a killed job).
    const int fd = ::open(tmp_.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
    std::error_code ec;
    fs::rename(tmp_, path_, ec);
    SPEC_INPUT_CHECK(!ec, "cannot rename " << tmp_ << " to " << path_ << ": " << ec.message());
  }

 private:
  std::size_t hidden_row_bytes() const {
    return layout_.layers.size() * static_cast<std::size_t>(layout_.hidden_size) *
           store_type_size(layout_.dtype);
  }
  std::size_t probs_row_bytes() const {
    return static_cast<std::size_t>(layout_.topk) * store_type_size(layout_.topk_dtype);
  }

  // Writes whole chunks from the tail (and, when `partial`, the rest).
  void write_chunks(bool partial) {
    const int64_t C = layout_.chunk_rows;
    const int64_t n = partial ? tail_rows_ : (tail_rows_ / C) * C;
    if (n == 0) return;
    if (t_.hidden.valid()) t_.hidden.append_typed(hidden_type_.get(), tail_hidden_.data(), n);
    const std::size_t k = static_cast<std::size_t>(layout_.topk);
    if (k > 0) {
      t_.topk_ids.append(tail_ids_.data(), n);
      t_.topk_probs.append_typed(probs_type_.get(), tail_probs_.data(), n);
    }
    auto drop = [](auto& v, std::size_t count) {
      v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(count));
    };
    drop(tail_hidden_, static_cast<std::size_t>(n) * hidden_row_bytes());
    drop(tail_probs_, static_cast<std::size_t>(n) * probs_row_bytes());
    drop(tail_ids_, static_cast<std::size_t>(n) * k);
    tail_rows_ -= n;
    written_ += n;
  }

  std::string path_, tmp_;
  DatasetLayout layout_;
  h5::File file_;
  ShardTables t_;
  h5::Id hidden_type_, probs_type_;
  std::vector<DatasetRow> rows_;
  std::vector<int32_t> tokens_;
  int64_t next_row_ = 0, written_ = 0, tail_rows_ = 0;
  std::vector<std::byte> tail_hidden_, tail_probs_;
  std::vector<int32_t> tail_ids_;
};

std::string part_path(const std::string& shard, int part) {
  std::ostringstream name;
  name << shard << ".part-" << std::setw(5) << std::setfill('0') << part << ".h5";
  return name.str();
}

// Leftovers of an interrupted part ("<part>.tmp") of `shard`.
void remove_unsealed(const std::string& shard) {
  const fs::path parent = fs::path(shard).parent_path();
  const std::string prefix = fs::path(shard).filename().string() + ".part-";
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(parent.empty() ? fs::path(".") : parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".tmp") == 0)
      stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove(p, ec);
}

bool same_layout(const DatasetLayout& a, const DatasetLayout& b) {
  return a.layers == b.layers && a.num_layers == b.num_layers && a.hidden_size == b.hidden_size &&
         a.positions == b.positions && a.dtype == b.dtype && a.topk == b.topk &&
         a.topk_dtype == b.topk_dtype && a.compression == b.compression && a.level == b.level &&
         a.chunk_rows == b.chunk_rows;
}

}  // namespace

struct DatasetShardWriter::Impl {
  std::string shard;
  DatasetHeader header;
  DatasetLayout layout;
  DatasetCommitPolicy policy;
  int32_t run = 0;        // 0, then 1 per --resume
  int next_part = 0;      // number of the part written next
  int64_t committed = 0;  // sequences in sealed parts
  std::unique_ptr<PartWriter> part;
  SteadyClockPoint opened;

  void seal() {
    if (!part) return;
    part->seal();
    committed += part->sequences();
    part.reset();
    ++next_part;
  }
};

DatasetShardWriter::DatasetShardWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DatasetShardWriter::~DatasetShardWriter() = default;
DatasetShardWriter::DatasetShardWriter(DatasetShardWriter&&) noexcept = default;
DatasetShardWriter& DatasetShardWriter::operator=(DatasetShardWriter&&) noexcept = default;

DatasetShardWriter DatasetShardWriter::create(const std::string& shard, const DatasetHeader& header,
                                              const DatasetLayout& layout,
                                              const DatasetCommitPolicy& policy, bool overwrite) {
  SPEC_CHECK(
      layout.hidden_size > 0 && layout.chunk_rows > 0,
      "dataset layout: hidden " << layout.hidden_size << ", chunk rows " << layout.chunk_rows);
  const std::vector<std::string> old = dataset_shard_parts(shard);
  SPEC_INPUT_CHECK(old.empty() || overwrite,
                   old.front() << " exists (a part of an earlier dataset); set job.overwrite = "
                                  "true to replace it, or continue it with --resume");
  for (const std::string& p : old) fs::remove(p);
  remove_unsealed(shard);
  auto m = std::make_unique<Impl>();
  m->shard = shard;
  m->header = header;
  m->layout = layout;
  m->policy = policy;
  return DatasetShardWriter(std::move(m));
}

DatasetShardWriter DatasetShardWriter::reopen(const std::string& shard, const DatasetHeader& header,
                                              const DatasetLayout& layout,
                                              const DatasetCommitPolicy& policy) {
  auto m = std::make_unique<Impl>();
  m->shard = shard;
  m->header = header;
  m->layout = layout;
  m->policy = policy;
  m->run = 1;
  remove_unsealed(shard);
  const std::vector<std::string> parts = dataset_shard_parts(shard);
  for (const std::string& p : parts) {
    SPEC_INPUT_CHECK(p == part_path(shard, m->next_part),
                     "cannot resume " << shard << ": part " << part_path(shard, m->next_part)
                                      << " is missing (found " << p << ")");
    DatasetReader r(p);
    SPEC_INPUT_CHECK(r.finished(), "cannot resume: " << p << " is not sealed");
    SPEC_INPUT_CHECK(same_layout(r.layout(), layout),
                     "cannot resume " << shard << ": " << p
                                      << " keeps other layers, positions or types than this job");
    m->committed += static_cast<int64_t>(r.sequences().size());
    m->run = std::max(
        m->run,
        static_cast<int32_t>(h5::File::open(p, h5::File::Access::kReadOnly).attr_int("resumes")) +
            1);
    ++m->next_part;
  }
  return DatasetShardWriter(std::move(m));
}

const DatasetLayout& DatasetShardWriter::layout() const {
  return impl_->layout;
}
int64_t DatasetShardWriter::committed_sequences() const {
  return impl_->committed;
}

void DatasetShardWriter::add(DatasetSequence&& s) {
  Impl& m = *impl_;
  const std::size_t width = m.layout.layers.size() * static_cast<std::size_t>(m.layout.hidden_size);
  const std::size_t k = static_cast<std::size_t>(m.layout.topk);
  const std::size_t n = static_cast<std::size_t>(s.n_rows);
  SPEC_CHECK(s.hidden.size() == n * width && s.topk_ids.size() == n * k &&
                 s.topk_probs.size() == n * k &&
                 s.tokens.size() == static_cast<std::size_t>(s.prompt_len + s.generated),
             m.shard << ": sequence of prompt " << s.prompt_index << " has " << s.hidden.size()
                     << " hidden values, " << s.topk_ids.size() << " top-k ids and "
                     << s.tokens.size() << " tokens for " << n << " rows");
  if (!m.part) {
    m.part =
        std::make_unique<PartWriter>(part_path(m.shard, m.next_part), m.header, m.layout, m.run);
    m.opened = SteadyClock::now();
  }
  m.part->add(std::move(s));
  const bool by_count = m.policy.sequences > 0 && m.part->sequences() >= m.policy.sequences;
  const bool by_time = seconds_since(m.opened) >= m.policy.seconds;
  const bool by_size = m.policy.rows > 0 && m.part->rows() >= m.policy.rows;
  if (by_count || by_time || by_size) m.seal();
}

void DatasetShardWriter::commit() {
  impl_->seal();
}

void DatasetShardWriter::finish() {
  Impl& m = *impl_;
  // A shard holds at least one part (an empty one when its group had no prompt).
  if (!m.part && m.next_part == 0)
    m.part = std::make_unique<PartWriter>(part_path(m.shard, 0), m.header, m.layout, m.run);
  m.seal();
}

std::vector<std::string> dataset_shard_parts(const std::string& shard) {
  std::vector<std::string> out;
  for (int k = 0;; ++k) {
    const std::string p = part_path(shard, k);
    if (!fs::exists(p)) break;
    out.push_back(p);
  }
  // A part after a gap: returned too, so that reopen names the missing one.
  const fs::path parent = fs::path(shard).parent_path();
  const std::string prefix = fs::path(shard).filename().string() + ".part-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent.empty() ? fs::path(".") : parent, ec)) {
    const std::string p = (parent / e.path().filename()).string();
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > 3 &&
        name.compare(name.size() - 3, 3, ".h5") == 0 &&
        std::find(out.begin(), out.end(), p) == out.end())
      out.push_back(p);
  }
  return out;
}

// Reader
// -------------------------------------------------------------------------------------------

struct DatasetReader::Impl {
  h5::File file;
  std::string path;
  DatasetLayout layout;
  DatasetHeader header;
  ShardTables t;
  bool index = false, finished = false;
  std::string part_id;
  std::vector<DatasetRow> rows;
};

namespace {

// What the top-level file records of each part it presents (its /parts tables).
struct PartRecord {
  std::string part_id;
  DatasetPartCounts counts;
};

// Every part the top-level file `index` names must be beside it, sealed, and the part it recorded
// (identity and counts): HDF5 fills the rows of a missing virtual-dataset source with zeros, so
// a deleted or replaced part would otherwise read as plausible data.
void check_index_parts(const h5::File& index, const std::string& path) {
  const std::vector<std::string> names = index.attr_strings("parts");
  std::vector<PartRecord> records;
  if (index.has("parts")) {  // index files written before the records have names only
    const h5::Group g = index.group("parts");
    const std::vector<std::string> ids =
        g.dataset("part_id").read_strings(0, g.dataset("part_id").rows());
    const auto seqs = g.dataset("sequences").read_all<int64_t>();
    const auto tokens = g.dataset("tokens").read_all<int64_t>();
    const auto rows = g.dataset("rows").read_all<int64_t>();
    SPEC_INPUT_CHECK(ids.size() == names.size() && seqs.size() == names.size() &&
                         tokens.size() == names.size() && rows.size() == names.size(),
                     path << ": /parts records " << ids.size()
                          << " parts but the attribute parts names " << names.size());
    for (std::size_t i = 0; i < names.size(); ++i)
      records.push_back({ids[i], {seqs[i], tokens[i], rows[i]}});
  }
  const fs::path dir = fs::path(path).parent_path();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string part = (dir / names[i]).string();
    std::error_code ec;
    SPEC_INPUT_CHECK(fs::is_regular_file(part, ec),
                     path << ": its part " << part
                          << " is missing (HDF5 would read its rows as zeros); the top-level "
                             "file refers to its parts by name, beside it: restore the part, or "
                             "generate the dataset again");
    const DatasetReader r(part);
    SPEC_INPUT_CHECK(!r.is_index() && r.finished(),
                     path << ": its part " << part << " is not a sealed part file");
    if (records.empty()) continue;
    const PartRecord& want = records[i];
    const DatasetPartCounts have = dataset_part_counts(r);
    SPEC_INPUT_CHECK(
        r.part_id() == want.part_id && have.sequences == want.counts.sequences &&
            have.tokens == want.counts.tokens && have.rows == want.counts.rows,
        path << ": its part " << part << " is not the part it indexed (recorded: part id "
             << want.part_id << ", " << want.counts.sequences << " sequences, "
             << want.counts.tokens << " tokens, " << want.counts.rows << " rows; found: part id "
             << (r.part_id().empty() ? "none" : r.part_id()) << ", " << have.sequences
             << " sequences, " << have.tokens << " tokens, " << have.rows
             << " rows): another job has written a part of that name since; finish or resume "
                "that job (its top-level file presents the parts on disk), or generate the "
                "dataset again");
  }
}

}  // namespace

DatasetPartCounts dataset_part_counts(const DatasetReader& part) {
  DatasetPartCounts c;
  c.sequences = static_cast<int64_t>(part.sequences().size());
  for (const DatasetRow& r : part.sequences()) {
    c.tokens = std::max(c.tokens, r.token_offset + r.prompt_len + r.generated);
    c.rows = std::max(c.rows, r.row_offset + r.n_rows);
  }
  return c;
}

DatasetReader::DatasetReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.file = h5::File::open(path, h5::File::Access::kReadOnly);
  check_schema(m.file);
  m.index = m.file.attr_string("kind") == "index";
  m.header = read_header(m.file);
  m.layout = read_layout(m.file);
  m.finished = !m.file.attr_string("finished").empty();
  if (!m.index && m.file.has_attr("part_id")) m.part_id = m.file.attr_string("part_id");
  m.t = open_tables(m.file, m.layout, m.index);
  int64_t n = 0;
  if (m.index) {
    n = m.t.seq.at("prompt_index").rows();
  } else {
    n = find_commit(m.t).sequences;
  }
  const auto& s = m.t.seq;
  auto prompt_index = s.at("prompt_index").read<int64_t>(0, n);
  auto prompt_id = s.at("prompt_id").read_strings(0, n);
  auto category = s.at("category").read_strings(0, n);
  auto prompt_len = s.at("prompt_len").read<int32_t>(0, n);
  auto generated = s.at("generated").read<int32_t>(0, n);
  auto finish = s.at("finish_reason").read<int8_t>(0, n);
  auto wall_s = s.at("wall_s").read<double>(0, n);
  auto token_offset = s.at("token_offset").read<int64_t>(0, n);
  auto row_offset = s.at("row_offset").read<int64_t>(0, n);
  auto first_row = s.at("first_row").read<int32_t>(0, n);
  auto n_rows = s.at("n_rows").read<int32_t>(0, n);
  std::vector<int32_t> shard(static_cast<std::size_t>(n), m.header.shard);
  if (m.index) shard = s.at("shard").read<int32_t>(0, n);
  m.rows.resize(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < m.rows.size(); ++i)
    m.rows[i] = DatasetRow{prompt_index[i], prompt_id[i], category[i], prompt_len[i],
                           generated[i],    finish[i],    wall_s[i],   token_offset[i],
                           row_offset[i],   first_row[i], n_rows[i],   shard[i]};
  if (m.index) check_index_parts(m.file, path);
}

DatasetReader::~DatasetReader() = default;
DatasetReader::DatasetReader(DatasetReader&&) noexcept = default;
DatasetReader& DatasetReader::operator=(DatasetReader&&) noexcept = default;

const std::string& DatasetReader::path() const {
  return impl_->path;
}
const DatasetLayout& DatasetReader::layout() const {
  return impl_->layout;
}
const DatasetHeader& DatasetReader::header() const {
  return impl_->header;
}
bool DatasetReader::finished() const {
  return impl_->finished;
}
bool DatasetReader::is_index() const {
  return impl_->index;
}
const std::string& DatasetReader::part_id() const {
  return impl_->part_id;
}
const std::vector<DatasetRow>& DatasetReader::sequences() const {
  return impl_->rows;
}

std::vector<int32_t> DatasetReader::tokens(const DatasetRow& row) const {
  return impl_->t.tokens.read<int32_t>(row.token_offset, row.prompt_len + row.generated);
}

std::vector<float> DatasetReader::hidden(const DatasetRow& row) const {
  if (!impl_->t.hidden.valid()) return {};
  return impl_->t.hidden.read<float>(row.row_offset, row.n_rows);
}

std::vector<int32_t> DatasetReader::topk_ids(const DatasetRow& row) const {
  if (impl_->layout.topk == 0) return {};
  return impl_->t.topk_ids.read<int32_t>(row.row_offset, row.n_rows);
}

std::vector<float> DatasetReader::topk_probs(const DatasetRow& row) const {
  if (impl_->layout.topk == 0) return {};
  return impl_->t.topk_probs.read<float>(row.row_offset, row.n_rows);
}

// The top-level file ------------------------------------------------------------------------------

std::string dataset_shard_path(const std::string& output, int group, int dp) {
  std::string stem = output;
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".h5") == 0) stem.resize(stem.size() - 3);
  return stem + ".shard-" + std::to_string(group) + "-of-" + std::to_string(dp);
}

void write_dataset_index(const std::string& output, const std::vector<std::string>& shard_paths) {
  SPEC_CHECK(!shard_paths.empty(), "write_dataset_index: no part files");
  std::vector<std::unique_ptr<DatasetReader>> shards;
  for (const std::string& p : shard_paths) {
    shards.push_back(std::make_unique<DatasetReader>(p));
    SPEC_CHECK(shards.back()->finished(), p << " is not finished; cannot index it");
  }
  const std::string tmp = output + ".tmp";
  fs::remove(tmp);
  {
    h5::File f = h5::File::create(tmp, false, h5::File::Format::kV110);
    DatasetHeader h = shards[0]->header();
    write_header(f, h, "index");
    std::vector<std::string> names;
    for (const std::string& p : shard_paths) names.push_back(fs::path(p).filename().string());
    f.set_attr_strings("parts", names);
    const DatasetLayout& l = shards[0]->layout();
    write_layout(f, l);
    // The sequences tables, with offsets into the concatenated datasets.
    h5::Group seq = f.create_group("sequences");
    std::vector<DatasetRow> all;
    int64_t token_base = 0, row_base = 0;
    std::vector<h5::VirtualSource> tok_src, hid_src, ids_src, probs_src;
    std::vector<std::string> part_ids;
    std::vector<int64_t> part_seqs, part_tokens, part_rows;
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const DatasetPartCounts counts = dataset_part_counts(*shards[i]);
      const int64_t tokens = counts.tokens, rows = counts.rows;
      part_ids.push_back(shards[i]->part_id());
      part_seqs.push_back(counts.sequences);
      part_tokens.push_back(tokens);
      part_rows.push_back(rows);
      for (DatasetRow r : shards[i]->sequences()) {
        r.token_offset += token_base;
        r.row_offset += row_base;
        r.shard = shards[i]->header().shard;
        all.push_back(std::move(r));
      }
      if (tokens > 0) tok_src.push_back({names[i], "/tokens", static_cast<hsize_t>(tokens)});
      if (rows > 0) {
        hid_src.push_back({names[i], "/hidden", static_cast<hsize_t>(rows)});
        ids_src.push_back({names[i], "/topk_ids", static_cast<hsize_t>(rows)});
        probs_src.push_back({names[i], "/topk_probs", static_cast<hsize_t>(rows)});
      }
      token_base += tokens;
      row_base += rows;
    }
    // What each part was, so that a reader can tell a missing or replaced part (check_index_parts).
    h5::Group parts = f.create_group("parts");
    h5::create_string_rows(parts, "part_id", h5::chunk_rows(1024)).append_strings(part_ids);
    h5::create_fixed<int64_t>(parts, "sequences", {part_seqs.size()}, part_seqs.data());
    h5::create_fixed<int64_t>(parts, "tokens", {part_tokens.size()}, part_tokens.data());
    h5::create_fixed<int64_t>(parts, "rows", {part_rows.size()}, part_rows.data());
    auto fixed_i64 = [&](const char* name, auto member) {
      std::vector<int64_t> v;
      for (const DatasetRow& r : all) v.push_back(static_cast<int64_t>(r.*member));
      return h5::create_fixed<int64_t>(seq, name, {v.size()}, v.data());
    };
    auto fixed_i32 = [&](const char* name, auto member) {
      std::vector<int32_t> v;
      for (const DatasetRow& r : all) v.push_back(static_cast<int32_t>(r.*member));
      return h5::create_fixed<int32_t>(seq, name, {v.size()}, v.data());
    };
    fixed_i64("prompt_index", &DatasetRow::prompt_index);
    fixed_i32("prompt_len", &DatasetRow::prompt_len);
    fixed_i32("generated", &DatasetRow::generated);
    {
      std::vector<int8_t> v;
      for (const DatasetRow& r : all) v.push_back(r.finish_reason);
      h5::Dataset d = h5::create_rows<int8_t>(seq, "finish_reason", h5::chunk_rows(4096));
      d.append(v);
    }
    fixed_i64("token_offset", &DatasetRow::token_offset);
    fixed_i64("row_offset", &DatasetRow::row_offset);
    fixed_i32("first_row", &DatasetRow::first_row);
    fixed_i32("n_rows", &DatasetRow::n_rows);
    fixed_i32("shard", &DatasetRow::shard);
    std::vector<double> walls;
    for (const DatasetRow& r : all) walls.push_back(r.wall_s);
    h5::create_fixed<double>(seq, "wall_s", {walls.size()}, walls.data());
    h5::Dataset pid = h5::create_string_rows(seq, "prompt_id", h5::chunk_rows(1024));
    h5::Dataset cat = h5::create_string_rows(seq, "category", h5::chunk_rows(1024));
    std::vector<std::string> ids, cats;
    for (const DatasetRow& r : all) {
      ids.push_back(r.prompt_id);
      cats.push_back(r.category);
    }
    pid.append_strings(ids);
    cat.append_strings(cats);
    // The large datasets: virtual, over the shards.
    h5::create_virtual_rows(f, "tokens", H5T_STD_I32LE, {}, tok_src);
    if (!l.layers.empty()) {
      h5::Id type = store_h5_type(l.dtype);
      h5::create_virtual_rows(f, "hidden", type.get(),
                              {l.layers.size(), static_cast<hsize_t>(l.hidden_size)}, hid_src);
    }
    if (l.topk > 0) {
      h5::create_virtual_rows(f, "topk_ids", H5T_STD_I32LE, {static_cast<hsize_t>(l.topk)},
                              ids_src);
      h5::Id ptype = store_h5_type(l.topk_dtype);
      h5::create_virtual_rows(f, "topk_probs", ptype.get(), {static_cast<hsize_t>(l.topk)},
                              probs_src);
    }
    f.set_attr_string("finished", utc_timestamp());
    f.close();
  }
  std::error_code ec;
  fs::rename(tmp, output, ec);
  SPEC_INPUT_CHECK(!ec, "cannot rename " << tmp << " to " << output << ": " << ec.message());
}

// Fingerprints
// --------------------------------------------------------------------------------------

std::string model_fingerprint(const std::string& dir) {
  std::uint64_t h = kFnv1a64Basis;
  auto hash_file_part = [&](const fs::path& p, bool whole) {
    std::ifstream in(p, std::ios::binary);
    SPEC_INPUT_CHECK(in.good(), "cannot read " << p.string());
    const std::uintmax_t size = fs::file_size(p);
    h = fnv1a64(&size, sizeof(size), h);
    std::vector<char> buf;
    auto take = [&](std::uintmax_t at, std::uintmax_t n) {
      buf.resize(static_cast<std::size_t>(n));
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(n));
      h = fnv1a64(buf.data(), static_cast<std::size_t>(in.gcount()), h);
    };
    const std::uintmax_t mib = 1 << 20;
    if (whole || size <= 2 * mib) {
      take(0, size);
    } else {
      take(0, mib);
      take(size - mib, mib);
    }
  };
  hash_file_part(fs::path(dir) / "config.json", true);
  std::vector<fs::path> weights;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") weights.push_back(e.path());
  std::sort(weights.begin(), weights.end());
  for (const fs::path& p : weights) hash_file_part(p, false);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("fnv1a64:") + hex;
}

}  // namespace specrun
