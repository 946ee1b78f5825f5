// Internal to src/io: the HDF5 layout of dataset files (io/dataset_file.h) shared by the part
// writer, the reader and the top-level index. docs/file-formats.md is the public description.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/dataset_file.h"
#include "io/h5.h"

namespace specrun::dataset_layout {

// The HDF5 type of a storage type (file and memory: values are converted on the host first).
h5::Id store_h5_type(StoreType t);
// float32 values to storage bytes (round to nearest even), appended to `out`.
void to_store(StoreType t, const float* v, std::size_t n, std::vector<std::byte>& out);

struct Column {
  const char* name;
  enum Kind { kI8, kI32, kI64, kF64, kString } kind;
  const char* unit;
  const char* description;
};

inline constexpr Column kSequenceColumns[] = {
    {"prompt_index", Column::kI64, "", "row of the prompt in the prompt file"},
    {"prompt_id", Column::kString, "", "prompt id from the prompt file (index when it has none)"},
    {"category", Column::kString, "", "prompt category, '' when none"},
    {"prompt_len", Column::kI32, "tokens", "prompt length"},
    {"generated", Column::kI32, "tokens", "tokens generated after the prompt"},
    {"finish_reason", Column::kI8, "", "0 = max_new_tokens reached, 1 = EOS"},
    {"wall_s", Column::kF64, "s", "wall time from the sequence's prefill to its last token"},
    {"token_offset", Column::kI64, "", "first entry of this sequence in tokens"},
    {"row_offset", Column::kI64, "", "first row of this sequence in hidden and topk_*"},
    {"first_row", Column::kI32, "",
     "token index (within the sequence) whose hidden state is the sequence's first row"},
    {"n_rows", Column::kI32, "rows", "rows of hidden / topk_* stored for this sequence"},
};
inline constexpr const char* kCommitColumns[] = {"sequences_end", "tokens_end", "rows_end",
                                                 "rows_written"};

hid_t column_type(Column::Kind k);
void describe(h5::Object& d, const char* unit, const char* description);
// Options of the small, uncompressed tables.
h5::RowsOptions small_rows();
void write_header(h5::File& f, const DatasetHeader& h, const std::string& kind);
DatasetHeader read_header(const h5::File& f);
void write_layout(h5::File& f, const DatasetLayout& l);
DatasetLayout read_layout(const h5::File& f);
// The file's schema_version; throws naming the file when it is not a dataset file.
int64_t check_schema(const h5::File& f);

// The open datasets of a part (or of the index: no commits, a `shard` column).
struct ShardTables {
  std::map<std::string, h5::Dataset> seq, commits;
  h5::Dataset tokens, hidden, topk_ids, topk_probs;
};
ShardTables create_tables(h5::File& f, const DatasetLayout& l);
ShardTables open_tables(const h5::File& f, const DatasetLayout& l, bool index);

struct Commit {
  int64_t records = 0;  // commit rows kept
  int64_t sequences = 0, tokens = 0, rows = 0, written = 0;
};
// The last commit record whose rows are all present.
Commit find_commit(const ShardTables& t);

}  // namespace specrun::dataset_layout
