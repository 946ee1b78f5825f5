// Result files (HDF5, schema "specrun.result" version 7; every dataset and attribute is described
// in docs/file-formats.md). Files of versions 1 to 6 are read too (what they lack reads as empty).
//
// ResultWriter: rank 0 only. Creates the file with the job's header, then appends one batch at a
// time (append_batch) and flushes after each. The batch's rows are written first and its commit
// record last (/<mode>/batches row, then the mode's batches_committed attribute, then
// H5Fflush), so a job killed at any moment leaves a file that opens in h5py and holds every
// committed batch; rows past the commit record are ignored by ResultReader and removed by
// ResultWriter::reopen (--resume).
//
// ResultReader: for report, compare and --resume; returns committed rows only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/records.h"

namespace specrun {

inline constexpr const char* kResultSchema = "specrun.result";
inline constexpr int kResultSchemaVersion = 7;

// What the caller knows when the job starts.
struct ResultHeader {
  std::string specrun_version;  // build_info().version
  std::string git_commit;       // build_info().git_commit
  bool git_dirty = false;
  int32_t world_size = 1;
  int32_t tp = 1;
  int32_t dp = 1;
  std::string job_toml;       // the job file's text as read
  std::string resolved_json;  // the merged configuration (defaults < file < --set) as JSON
  std::string config_hash;    // hash of the resolved configuration (the config layer's)
  std::string prompts_path;   // the prompt file as given
  std::string prompts_hash;   // PromptReader::content_hash()
  std::vector<std::string> provenance;       // one JSON object per rank, index = world rank
  std::string provenance_mismatches = "[]";  // JSON list of mismatches between ranks
  // The models the job used: JSON object role -> {"path", "fingerprint"} ("target", "draft"),
  // model_fingerprint() of each directory; "{}" in files written before it was recorded.
  std::string models = "{}";
  // JSON list of the token ids that finish a sequence: the target's EOS ids (config.json and
  // generation_config.json) and decode.stop_tokens; "[]" in files written before it was recorded.
  std::string stop_token_ids = "[]";
  // Each world rank's share of the target's weights as loaded from the checkpoint, bytes
  // (LanguageModel::weight_bytes); empty in files written before it was recorded (schema 7).
  std::vector<int64_t> target_weight_bytes;
};

namespace h5 {
class File;
class Dataset;
}  // namespace h5

// The job identity shared by result and dataset files: root attributes specrun_version,
// git_commit, git_dirty, started (now), finished (""), world_size, tp, dp, resumes (0), and the
// groups /job and /provenance (docs/file-formats.md).
void write_job_identity(h5::File& f, const ResultHeader& h);
// Reads what write_job_identity wrote into `h`.
void read_job_identity(const h5::File& f, ResultHeader& h);

// The header plus what the writer adds.
struct ResultInfo {
  ResultHeader header;
  std::string schema;
  int64_t schema_version = 0;
  std::string started;   // ISO-8601 UTC, when the file was created
  std::string finished;  // ISO-8601 UTC set by finish(); "" while running or if the job died
  int32_t resumes = 0;   // how many times ResultWriter::reopen continued the file
  std::vector<std::string> alarms;  // ResultWriter::record_alarm's lines, oldest first
};

// Where a job.overwrite replacement of `output` is written until the job finishes (`OUTPUT` +
// ".replacing", beside it): the result it replaces stays whole until then, whatever ends the
// job early (a full disk, a kill, a stop). finish() renames it over `output`.
std::string result_replacement_path(const std::string& output);
// The file --resume continues for `output`: an unfinished replacement when one exists (a
// job.overwrite job stopped or killed before it finished), else `output`.
std::string result_resume_path(const std::string& output);

// --resume continues files of the current schema version only: throws (exit code 2) with
// advice otherwise. `writer`: the file's specrun_version.
void check_resume_schema(const std::string& path, int64_t version, const std::string& writer);

class ResultWriter {
 public:
  // Creates `path` and writes the header (root attributes, /job, /provenance). An existing file
  // is an error (exit code 2, advice: job.overwrite or --resume) unless `overwrite`; with
  // `overwrite`, an existing result is replaced only when finish() succeeds: the new one is
  // written at result_replacement_path(path) until then. An earlier run's unfinished replacement
  // is removed first (this run starts afresh). When the header cannot be written (a full disk),
  // the new file is removed and an existing one is left as it was.
  static ResultWriter create(const std::string& path, const ResultHeader& header, bool overwrite);
  // The checks create() starts with, touching nothing: `path` does not exist (unless
  // `overwrite`) and its directory exists and is writable. Lets a job fail fast before it loads
  // its models, and create the file only once they loaded (a model that fails to load then
  // leaves an existing file as it was). Never through a symbolic link, and with `overwrite` only
  // over a file whose `schema` attribute is `schema` (a specrun output of that kind): a text
  // file, a model or another program's HDF5 file is never replaced.
  static void check_creatable(const std::string& path, bool overwrite,
                              const std::string& schema = kResultSchema);
  // Opens the result file of job.output `output` to append more batches (--resume): the
  // unfinished replacement when there is one (result_resume_path), renamed over `output` by
  // finish(). Removes rows past each mode's last commit record, recomputes the running totals
  // from committed batches, clears `finished` and counts the resume. The caller checks the
  // configuration first (ResultReader on result_resume_path(output)).
  static ResultWriter reopen(const std::string& output);

  ResultWriter(ResultWriter&&) noexcept;
  ResultWriter& operator=(ResultWriter&&) noexcept;
  ~ResultWriter();  // closes without setting `finished`

  // Appends one batch's records to /<mode> ("baseline" or "speculative"), then commits. The
  // mode's groups are created on its first batch, which also fixes draft_len
  // (= accepted_per_position.size(), 0 in baseline). Validates the batch before writing
  // anything: n_ranks == world_size, timings size, draft_len, generated == output length,
  // finish_reason, step rows' batch number, and that the batch is not already committed.
  // Then reserves the space the batch may take (h5::File::reserve: a disk too full for it is an
  // error before anything is written), writes its rows and flushes them, and only then writes
  // its commit record and flushes again: a commit record never reaches the file before the rows
  // it commits. After a failed write the file is abandoned as the last successful flush left it
  // (never flushed again, not even at exit), and the writer refuses further appends (--resume
  // continues from the last committed batch).
  void append_batch(const std::string& mode, const BatchResult& batch);

  // Records an alarm of the run (the acceptance alarm, engine/acceptance_alarm.h): appended to
  // the root attribute `alarms` (a list of strings, UTC time first) and flushed. On failure the
  // file is abandoned as append_batch's failures leave it.
  void record_alarm(const std::string& text);

  // Committed counts of a mode (0 for a mode without batches).
  int64_t batches_committed(const std::string& mode) const;
  int64_t sequences_committed(const std::string& mode) const;

  // Sets the root attribute `finished`, flushes and closes; a replacement is then renamed over
  // the result it replaces. The writer is unusable afterwards. `models`, when not empty,
  // replaces /provenance attribute `models` first (the whole-content fingerprints computed when
  // the job finished).
  void finish(const std::string& models = "");

  // The file being written: job.output, or its replacement (result_replacement_path) until
  // finish() renames it.
  const std::string& path() const;
  // job.output: where the result is once the job finishes.
  const std::string& output() const;

 private:
  struct Impl;
  explicit ResultWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Timings of a mode: rows = decoding steps of all committed batches, in commit order.
struct TimingTable {
  int64_t rows = 0;
  int32_t ranks = 0;
  std::vector<std::string> phases;  // the dataset's phase names (kPhaseNames in version 1)
  std::vector<float> ms;            // [rows x ranks x phases], milliseconds
  std::vector<int64_t> batch;       // [rows]: the batch each row belongs to
  float at(int64_t row, int32_t rank, int phase) const {
    return ms[static_cast<size_t>((row * ranks + rank) * static_cast<int64_t>(phases.size()) +
                                  phase)];
  }
};

// Each rank's host snapshot per committed batch (schema version 3; empty for older files).
struct HostTable {
  int64_t batches = 0;
  int32_t ranks = 0;
  std::vector<std::string> fields;  // kHostFields
  std::vector<float> values;        // [batches x ranks x fields]
  std::vector<std::string> busy;    // [batches]: "rank R: name (pid) share; ... | rank S: ..."
  float at(int64_t batch, int32_t rank, int field) const {
    return values[static_cast<size_t>((batch * ranks + rank) * static_cast<int64_t>(fields.size()) +
                                      field)];
  }
};

class ResultReader {
 public:
  // Opens read-only and reads the header. Throws (exit code 2) for a file that is not a
  // specrun result file or has a newer schema version.
  explicit ResultReader(const std::string& path);
  ~ResultReader();
  ResultReader(ResultReader&&) noexcept;
  ResultReader& operator=(ResultReader&&) noexcept;

  const std::string& path() const;
  const ResultInfo& info() const;

  // What the reader left out and why, one line per mode that has commit records it did not use
  // (a damaged record, or one the job was killed while writing): "<file>:/<mode>: batches
  // committed N of M: ...". Commands print them; empty for a sound file.
  std::vector<std::string> warnings() const;

  // Modes with a group in the file, baseline first.
  std::vector<std::string> modes() const;
  bool has_mode(const std::string& mode) const;
  int32_t draft_len(const std::string& mode) const;

  // Everything below covers committed batches only; a missing mode reads as empty.
  int64_t batches_committed(const std::string& mode) const;
  // Batch numbers in commit order.
  std::vector<int64_t> committed_batches(const std::string& mode) const;
  // Prompt indices of committed sequences, in row order (for --resume).
  std::vector<int64_t> committed_prompt_indices(const std::string& mode) const;
  std::vector<SequenceRecord> sequences(const std::string& mode) const;
  std::vector<StepRecord> steps(const std::string& mode) const;
  TimingTable timings(const std::string& mode) const;
  // The CPU rows of the timings rows (kCpuColumns in `phases`; empty before schema version 3).
  TimingTable cpu_timings(const std::string& mode) const;
  // The device rows of the timings rows (kDeviceColumns in `phases`, NaN for ranks without a
  // device; empty before schema version 5).
  TimingTable device_timings(const std::string& mode) const;
  // How the device's forward passes of each timings row were issued (kPassColumns in `phases`,
  // counts as floats, NaN for ranks without a device; empty before schema version 6).
  TimingTable device_passes(const std::string& mode) const;
  // The host snapshots (empty before schema version 3).
  HostTable host(const std::string& mode) const;
  // Totals over committed batches, length draft_len (recomputed from /<mode>/batches).
  std::vector<int64_t> accepted_per_position(const std::string& mode) const;
  // The expert accounting of `model` (kExpertTarget, kExpertDraft) over the committed batches;
  // empty for a dense model and in files before schema version 7. Throws (exit code 2) naming
  // the group when the stored counts break an identity (expert_records_problem).
  ExpertRecords experts(const std::string& mode, const std::string& model) const;

 private:
  // A per-step rows dataset of `mode` ([rows x ranks x columns]) read to its committed rows, the
  // column names from attribute `names_attr`; empty when the dataset is absent (older files).
  TimingTable timing_rows(const std::string& mode, const h5::Dataset& rows,
                          const char* names_attr) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specrun
