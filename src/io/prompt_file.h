// Prompt files (HDF5, schema "specrun.prompts" version 1; docs/file-formats.md):
//   /prompts/tokens    int32 [T]     every prompt's token ids, concatenated
//   /prompts/offsets   int64 [N+1]   prompt i is tokens[offsets[i] : offsets[i+1]]
//   /prompts/id        string [N]    optional
//   /prompts/category  string [N]    optional
//   /prompts/text      string [N]    optional (for people; never read by `run`)
//
// PromptReader streams it: memory is bounded by one batch plus a fixed validation window, never
// by N. PromptFileWriter and prepare_prompt_file (the `specrun prepare` command) write it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace specrun {

inline constexpr const char* kPromptSchema = "specrun.prompts";
inline constexpr int kPromptSchemaVersion = 1;

struct Prompt {
  int64_t index = 0;     // row in the prompt file
  std::string id;        // the file's id, or the index as decimal text when the file has none
  std::string category;  // "" when the file has none
  std::vector<int32_t> tokens;
};

// Sharding rule ----------------------------------------------------------------------------------
// The first n_prompts prompts (the file's size, or job.max_prompts when smaller) are cut into
// batches of batch_size consecutive prompts: batch b holds prompts [b*B, min((b+1)*B, n)).
// Batches are dealt round-robin to the dp groups: group g processes batches g, g+dp, g+2*dp, ...
// in that order. Every prompt belongs to exactly one batch and every batch to exactly one group,
// so the groups' shards are disjoint and together cover all n prompts; the batch composition
// does not depend on dp.

struct BatchRange {
  int64_t batch = 0;  // global batch number b
  int64_t first = 0;  // first prompt index
  int64_t count = 0;  // prompts in the batch (batch_size, or fewer for the last batch)
};

// Number of batches: ceil(n_prompts / batch_size). Throws when batch_size < 1 or n_prompts < 0.
int64_t batch_count(int64_t n_prompts, int64_t batch_size);
// Batch b's prompt range; b must be < batch_count.
BatchRange batch_range(int64_t n_prompts, int64_t batch_size, int64_t batch);
// The dp group that processes batch b: b % dp.
int batch_owner(int64_t batch, int dp);
// The k-th batch (k = 0, 1, ...) of group dp_index, or nullopt once the group has no more.
std::optional<BatchRange> shard_batch(int64_t n_prompts, int64_t batch_size, int dp_index, int dp,
                                      int64_t k);

// Reading ----------------------------------------------------------------------------------------

class PromptReader {
 public:
  // Opens `path` read-only and validates it: schema attributes, the datasets' presence, types
  // and ranks, offsets[0] == 0, offsets strictly increasing (no empty prompt), and the last
  // offset equal to the number of tokens. Offsets are checked in fixed-size windows, so memory
  // does not grow with the number of prompts. Throws specrun::Error (exit code 2) naming the
  // file, the dataset and, for offsets, the prompt index.
  explicit PromptReader(const std::string& path);
  ~PromptReader();
  PromptReader(PromptReader&&) noexcept;
  PromptReader& operator=(PromptReader&&) noexcept;

  const std::string& path() const;
  int64_t size() const;          // N, number of prompts
  int64_t total_tokens() const;  // T
  bool has_ids() const;
  bool has_categories() const;
  bool has_text() const;

  // Prompts [first, first + count): reads only those rows (offsets, tokens, ids, categories).
  // Throws naming the range when it is outside [0, size()).
  std::vector<Prompt> read(int64_t first, int64_t count) const;
  // The largest prompt length (tokens) among prompts [0, n) and the first prompt that has it,
  // from the offsets alone (no token is read; windows of 64 Ki offsets).
  std::pair<int64_t, int64_t> longest(int64_t n) const;
  // The text of prompt `index`, "" when the file has no /prompts/text.
  std::string read_text(int64_t index) const;
  // A root string attribute (`prepared`: how `specrun prepare` made the prompts, JSON), "" when
  // the file has none.
  std::string root_attribute(const std::string& name) const;

  // A hash of the content `run` uses (N, offsets, tokens, ids, categories), as
  // "fnv1a64:<16 hex digits>", computed in windows. `--resume` compares it with the one
  // recorded in the result file to detect a changed prompt file.
  std::string content_hash() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checks one prompt against the target model: non-empty, every token in [0, vocab_size), and
// at most max_len tokens (max_len <= 0: no length limit). Throws specrun::Error (exit code 2):
// "prompts.h5: prompt 17 (id 'x'): token 5000 at position 3 is outside the target vocabulary
// (2048 tokens) ...". `file` prefixes the message when not empty.
void validate_tokens(const Prompt& prompt, int64_t vocab_size, int64_t max_len,
                     const std::string& file = "");

// Writing ----------------------------------------------------------------------------------------

struct PromptColumns {
  bool ids = false;
  bool categories = false;
  bool text = false;
};

// Writes a prompt file row by row, buffering up to ~256 KiB of tokens between dataset appends.
class PromptFileWriter {
 public:
  // Creates `path` (truncate: replace an existing file, else refuse) with the given optional
  // columns and the root attributes schema, schema_version, specrun_version, created, source.
  PromptFileWriter(const std::string& path, const PromptColumns& columns, bool truncate,
                   const std::string& source = "");
  ~PromptFileWriter();

  // Appends one prompt. Columns not enabled ignore their argument. Tokens must be non-empty.
  void append(const std::vector<int32_t>& tokens, const std::string& id = "",
              const std::string& category = "", const std::string& text = "");
  int64_t size() const;
  // Sets (or replaces) a string attribute of the file's root, e.g. how the prompts were made.
  void set_attribute(const std::string& name, const std::string& value);
  // Writes buffered rows and closes the file (checked). Without close(), the destructor closes
  // and the file may lack buffered rows.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct PrepareSummary {
  int64_t prompts = 0;
  int64_t tokens = 0;
  int64_t min_len = 0;
  int64_t max_len = 0;
  PromptColumns columns;
  // Rendered conversations that do not start with the BOS the tokenizer puts before plain text
  // (PromptConverter::templated_without_bos), and that BOS id (-1: the tokenizer adds none).
  int64_t templated_without_bos = 0;
  int bos_id = -1;
};

// `specrun prepare`: converts JSONL (one {"tokens": [...], "id": ..., "category": ...,
// "text": ...} object per line; only tokens required; empty lines skipped) into a prompt file.
// The whole input is validated first; every bad line (up to 20, then a count) is reported by
// line number in one specrun::Error (exit code 2), and then nothing is written. The file is
// written to out_path + ".tmp" and renamed, so out_path is either absent or complete. Refuses
// an existing out_path unless overwrite.
PrepareSummary prepare_prompt_file(const std::string& jsonl_path, const std::string& out_path,
                                   bool overwrite);
// The same with the layouts, tokenizer and chat template of PrepareOptions (io/prompt_sources.h);
// the root attribute `prepared` (JSON) records the layout, the tokenizer's fingerprint and the
// chat template used, and `chat_template` its source text.
struct PrepareOptions;
PrepareSummary prepare_prompt_file(const std::string& jsonl_path, const std::string& out_path,
                                   const PrepareOptions& options);

}  // namespace specrun
