// Internal to src/io: the result file's per-mode tables, shared by ResultWriter and ResultReader
// (io/result_file.h). docs/file-formats.md is the public description of the same layout.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/h5.h"
#include "io/records.h"

namespace specrun::result_layout {

// The open datasets of one model's expert accounting, /<mode>/experts/<model> (schema version 7,
// present when that model is a mixture of experts).
struct ExpertTables {
  h5::Group group;
  ExpertRecords shape;                         // top_k, n_experts, ep, expert_bytes, layers
  std::map<std::string, h5::Dataset> passes;   // passes/<column>: [P], [P x L] or [P x L x ep]
  std::map<std::string, h5::Dataset> rows;     // sequences/<column>: [R] or [R x L]
  std::map<std::string, h5::Dataset> commits;  // commits/passes_end, rows_end: [batches]
  h5::Dataset layers;                          // [L]
};

// The open datasets of one /<mode> group.
struct ModeTables {
  h5::Group group;                             // /<mode>
  std::map<std::string, h5::Dataset> seq;      // /<mode>/sequences/<column>
  std::map<std::string, h5::Dataset> steps;    // /<mode>/steps/<column>
  std::map<std::string, h5::Dataset> batches;  // /<mode>/batches/<column> (commit records)
  h5::Dataset timings;                         // [rows x ranks x phases] float32 ms
  h5::Dataset timings_batch;                   // [rows] int64
  // From schema version 3 (invalid handles in older files): CPU rows [rows x ranks x
  // kNumCpuColumns] float32 ms beside timings; per batch, each rank's host snapshot
  // (batches/host [batches x ranks x kNumHostFields]) and busy processes (batches/host_busy,
  // one string per batch).
  h5::Dataset cpu_timings, host, host_busy;
  // From schema version 5: device rows [rows x ranks x kNumDeviceColumns] float32 ms (NaN for
  // ranks without a device).
  h5::Dataset device_timings;
  // From schema version 6: pass rows [rows x ranks x kNumPassColumns] float32 counts (NaN for
  // ranks without a device).
  h5::Dataset device_passes;
  // From schema version 7: "target" and "draft" -> their expert accounting, for the models that
  // are mixtures of experts (absent for dense ones).
  std::map<std::string, ExpertTables> experts;
  h5::Dataset apos;       // accepted_per_position totals [draft_len] int64
  int32_t draft_len = 0;  // length of accepted_per_position: the longest proposal path
  int32_t n_ranks = 0;
  int64_t version = 0;  // the file's schema_version (steps/depth, bonus, emitted from 2)
};

// Committed row counts of a mode: what the last valid commit record (/<mode>/batches row) says.
struct Committed {
  int64_t batches = 0;
  int64_t sequences = 0;
  int64_t steps = 0;
  int64_t timing_rows = 0;
  int64_t tokens = 0;    // output tokens
  int64_t recorded = 0;  // the mode's batches_committed attribute
  // Why the commit records past `batches` (up to `recorded`) were not used: a record that does
  // not follow the one before it, or points past the rows in the file, and every record after
  // it. "" when every recorded batch is committed.
  std::string ignored;
  // Per expert-accounting model ("target", "draft"): its committed passes and sequence rows.
  std::map<std::string, std::pair<int64_t, int64_t>> expert_ends;
};

// Calls f(dataset) for every dataset of the mode (valid or not: f checks).
template <typename Tables, typename F>
void for_each_dataset(Tables& t, F&& f) {
  for (auto* table : {&t.seq, &t.steps, &t.batches})
    for (auto& entry : *table) f(entry.second);
  for (auto* d : {&t.timings, &t.timings_batch, &t.cpu_timings, &t.host, &t.host_busy,
                  &t.device_timings, &t.device_passes, &t.apos})
    f(*d);
  for (auto& entry : t.experts) {
    for (auto* table : {&entry.second.passes, &entry.second.rows, &entry.second.commits})
      for (auto& column : *table) f(column.second);
    f(entry.second.layers);
  }
}

// Checks the root attributes schema == "specrun.result" and 1 <= schema_version <= supported;
// returns the version. Throws (exit code 2) with advice otherwise.
int64_t check_schema(const h5::Group& root);

// Throws (an internal error) unless `mode` is "baseline" or "speculative".
void check_mode(const std::string& mode);

// Creates /<mode> with empty tables (output_offsets holds its leading 0).
ModeTables create_mode(h5::Group& root, const std::string& mode, int32_t draft_len,
                       int32_t n_ranks);
// Creates /<mode>/experts/<model> with empty tables for a model of `shape`'s shape.
void create_experts(ModeTables& t, const std::string& model, const ExpertRecords& shape);
// Appends a batch's passes of `model` (its rows; the commit row is append_expert_commit's).
void append_expert_rows(ExpertTables& e, const ExpertRecords& r);
// Appends the commit row: the passes and sequence rows committed up to this batch.
void append_expert_commit(ExpertTables& e, int64_t passes_end, int64_t rows_end);
// Reads passes [first, first + n) and their sequence rows [row_first, row_first + rows).
ExpertRecords read_experts(const ExpertTables& e, int64_t first, int64_t n, int64_t row_first,
                           int64_t rows);
// Opens /<mode>; throws naming the dataset when one is missing or has the wrong shape.
ModeTables open_mode(const h5::Group& root, const std::string& mode);

// The committed counts: the mode's batches_committed attribute, capped by the rows of the
// commit table, then by the first record that does not follow the one before it, then stepped
// back while the last commit record points past rows that are not in the file (a kill while
// the commit record was being flushed; rows reach the file before their record). Never throws
// for short tables; `ignored` says why recorded batches were left out.
Committed find_committed(const ModeTables& t);
// Shrinks every table to the committed rows and resets the committed-count attributes.
void truncate_to(ModeTables& t, const Committed& c);
// Sum of /<mode>/batches/accepted_per_position over the committed batches.
std::vector<int64_t> apos_totals(const ModeTables& t, const Committed& c);

}  // namespace specrun::result_layout
