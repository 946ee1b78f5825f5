// Dataset files (HDF5, schema "specrun.dataset" version 1; docs/file-formats.md): what a
// generation job (decode.modes = ["dataset"]) keeps for draft training. Each data-parallel group
// (its tp rank 0) writes a shard: a series of part files, each holding consecutive sequences of
// the group's stream (prompts g, g + dp, g + 2 dp, ...). One small top-level file presents all
// parts as single datasets (HDF5 virtual datasets) once the job ends.
//
// A part holds:
//   sequences/*   one row per sequence (prompt index and id, lengths, offsets)
//   tokens        int32 [tokens]: every sequence's prompt and generated tokens, concatenated
//   hidden        [rows, layers, hidden] bf16 | f16 | f32: the captured hidden states of the
//                 stored positions (row j of a sequence = the state after reading token
//                 first_row + j)
//   topk_ids, topk_probs  [rows, k]: the target's k most likely next tokens and their
//                 probabilities (temperature 1) at the same positions (when k > 0)
//   commits/*     one record of the part's counts
//
// Kill safety (SIGKILL at any moment leaves every committed sequence readable, the rest absent):
// HDF5 without SWMR is not crash-consistent: one H5Fflush writes chunks and metadata in no
// particular order, and our SIGKILL test of a single growing file met every failure class
// (object headers with bad checksums, chunk index nodes past the recorded end of file, chunks
// reused) in about 1 of 70 kills that land while commits are frequent. So nothing is ever
// modified in place: a part is written as "<part>.tmp", closed, and renamed (atomic) when sealed;
// a sequence is committed once its part is sealed. Parts are sealed every DatasetCommitPolicy
// (default 120 s), at a graceful stop and at the end. --resume deletes the .tmp and continues the
// stream after the last sealed sequence; generation is deterministic (batch-invariant kernels,
// counter-based sampling), so the result equals an uninterrupted run's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/h5.h"
#include "io/result_file.h"

namespace specrun {

inline constexpr const char* kDatasetSchema = "specrun.dataset";
inline constexpr int kDatasetSchemaVersion = 1;

enum class StoreType { kBF16, kF16, kF32 };
// "bf16", "f16", "f32" (job keys); throws for anything else.
StoreType parse_store_type(const std::string& name);
const char* store_type_name(StoreType t);
std::size_t store_type_size(StoreType t);

// What a dataset keeps (fixed when a shard is created).
struct DatasetLayout {
  std::vector<int> layers;  // capture ids: i < num_layers = the input of layer i, num_layers = the
                            // final norm's output (model/language_model.h)
  int num_layers = 0;       // of the target
  int hidden_size = 0;
  std::string positions = "all";  // all | prompt | generated
  StoreType dtype = StoreType::kBF16;
  int topk = 0;
  StoreType topk_dtype = StoreType::kF16;
  std::string compression = "gzip";  // gzip | lz4 | none
  int level = 1;                     // gzip level
  int chunk_rows = 256;              // rows per chunk of hidden / topk_*

  // Bytes of one stored row, uncompressed (hidden + top-k).
  std::size_t row_bytes() const;
};

// The job's identity, as in result files, plus the shard.
struct DatasetHeader : ResultHeader {
  int32_t shard = 0;               // this shard's dp group
  std::string target_fingerprint;  // model_fingerprint() of the target
  std::string capture_convention;  // how `layers` map to the model (text)
};

// One finished sequence, as the generator hands it over.
struct DatasetSequence {
  int64_t prompt_index = 0;
  std::string prompt_id, category;
  int32_t prompt_len = 0, generated = 0;
  int8_t finish_reason = 0;
  double wall_s = 0;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t first_row = 0;        // token index of the first stored row
  int32_t n_rows = 0;
  std::vector<float> hidden;      // n_rows x layers x hidden_size
  std::vector<int32_t> topk_ids;  // n_rows x topk
  std::vector<float> topk_probs;  // n_rows x topk
};

// When the open part of a shard is sealed (whichever comes first).
struct DatasetCommitPolicy {
  double seconds = 120;    // after this long
  int64_t sequences = 0;   // after this many sequences (0 = no limit)
  int64_t rows = 1 << 20;  // after this many stored rows (0 = no limit)
};

// The writer of one dp group's shard: a sequence of part files "<shard>.part-00000.h5", ...
// Each part is written as "<part>.tmp" and renamed when sealed (closed complete), so a kill
// leaves every sealed part intact and at most one .tmp, which --resume deletes.
class DatasetShardWriter {
 public:
  // Starts the shard `shard` (dataset_shard_path); existing parts are deleted only when
  // `overwrite`, else refused.
  static DatasetShardWriter create(const std::string& shard, const DatasetHeader& header,
                                   const DatasetLayout& layout, const DatasetCommitPolicy& policy,
                                   bool overwrite);
  // Continues a shard after an interruption (--resume): deletes the unsealed part, checks the
  // sealed ones (numbered without gaps, the same layout); committed_sequences() says where the
  // group's prompt stream continues. New parts record `header` (the resumed run's provenance).
  static DatasetShardWriter reopen(const std::string& shard, const DatasetHeader& header,
                                   const DatasetLayout& layout, const DatasetCommitPolicy& policy);
  ~DatasetShardWriter();
  DatasetShardWriter(DatasetShardWriter&&) noexcept;
  DatasetShardWriter& operator=(DatasetShardWriter&&) noexcept;

  const DatasetLayout& layout() const;
  // Sequences in sealed parts (after reopen: the stream position to continue from).
  int64_t committed_sequences() const;
  // Adds the stream's next sequence; seals the open part when the policy says so.
  void add(DatasetSequence&& sequence);
  // Seals the open part now (a graceful stop).
  void commit();
  // Seals the open part (or writes an empty one when the shard has none).
  void finish();

 private:
  struct Impl;
  explicit DatasetShardWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The committed sequences' metadata of a shard or top-level file.
struct DatasetRow {
  int64_t prompt_index = 0;
  std::string prompt_id, category;
  int32_t prompt_len = 0, generated = 0;
  int8_t finish_reason = 0;
  double wall_s = 0;
  int64_t token_offset = 0;  // into tokens
  int64_t row_offset = 0;    // into hidden / topk_*
  int32_t first_row = 0, n_rows = 0;
  int32_t shard = 0;
};

class DatasetReader {
 public:
  // Opens a part or a top-level file read-only; only committed rows are visible. A top-level
  // file is checked against the parts it names: each must be beside it, sealed, and the part it
  // recorded (part id and counts); else throws (exit code 2) naming the part, since HDF5 would
  // read a missing part's rows as zeros.
  explicit DatasetReader(const std::string& path);
  ~DatasetReader();
  DatasetReader(DatasetReader&&) noexcept;
  DatasetReader& operator=(DatasetReader&&) noexcept;

  const std::string& path() const;
  const DatasetLayout& layout() const;
  const DatasetHeader& header() const;
  bool finished() const;
  bool is_index() const;  // the top-level file
  // A part's identity ("" for the top-level file and for parts written before it was recorded).
  const std::string& part_id() const;
  const std::vector<DatasetRow>& sequences() const;
  std::vector<int32_t> tokens(const DatasetRow& row) const;
  // The row's hidden states as float32, n_rows x layers x hidden_size.
  std::vector<float> hidden(const DatasetRow& row) const;
  std::vector<int32_t> topk_ids(const DatasetRow& row) const;
  std::vector<float> topk_probs(const DatasetRow& row) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A part's extent: its sequences, and the tokens and rows its sequences cover.
struct DatasetPartCounts {
  int64_t sequences = 0, tokens = 0, rows = 0;
};
DatasetPartCounts dataset_part_counts(const DatasetReader& part);

// The shard of dp group g of a job whose top-level file is `output` (the name its parts start
// with): "<output without .h5>.shard-<g>-of-<dp>".
std::string dataset_shard_path(const std::string& output, int group, int dp);
// The sealed part files of a shard, in order (after any gap, the rest in directory order).
std::vector<std::string> dataset_shard_parts(const std::string& shard);

// Writes the top-level file `output` over sealed part files (virtual datasets for tokens,
// hidden and topk_*; the sequences tables copied, with global offsets and a `shard` column; each
// part's id and counts in /parts). Written as "<output>.tmp" and renamed.
void write_dataset_index(const std::string& output, const std::vector<std::string>& part_paths);

// A cheap identity of a checkpoint directory: FNV-1a 64 over config.json, every safetensors
// header and file size, and the first and last MiB of each weight file ("fnv1a64:<hex>").
// Not a cryptographic hash; it tells two checkpoints apart, not a tampered one.
std::string model_fingerprint(const std::string& dir);

}  // namespace specrun
