// Internal to src/io: the result file's per-mode tables, shared by ResultWriter and ResultReader
// (io/result_file.h). docs/file-formats.md is the public description of the same layout.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/h5.h"

namespace specrun::result_layout {

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
};

// Calls f(dataset) for every dataset of the mode (valid or not: f checks).
template <typename Tables, typename F>
void for_each_dataset(Tables& t, F&& f) {
  for (auto* table : {&t.seq, &t.steps, &t.batches})
    for (auto& entry : *table) f(entry.second);
  for (auto* d : {&t.timings, &t.timings_batch, &t.cpu_timings, &t.host, &t.host_busy,
                  &t.device_timings, &t.device_passes, &t.apos})
    f(*d);
}

// Checks the root attributes schema == "specrun.result" and 1 <= schema_version <= supported;
// returns the version. Throws (exit code 2) with advice otherwise.
int64_t check_schema(const h5::Group& root);

// Creates /<mode> with empty tables (output_offsets holds its leading 0).
ModeTables create_mode(h5::Group& root, const std::string& mode, int32_t draft_len,
                       int32_t n_ranks);
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
