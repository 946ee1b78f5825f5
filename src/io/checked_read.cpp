#include "io/checked_read.h"

#include <algorithm>
#include <cstdint>

#include "common/error.h"
#include "common/isolated.h"
#include "io/dataset_file.h"
#include "io/prompt_file.h"
#include "io/result_file.h"

namespace specrun {

std::string check_prompt_file(const std::string& path,
                              const std::function<void(const PromptReader&)>& first) {
  return run_isolated(path, "prompt file", [&] {
    PromptReader reader(path);
    if (first) first(reader);
    const std::int64_t n = reader.size();
    (void)reader.longest(n);
    const std::int64_t window = 4096;
    for (std::int64_t at = 0; at < n; at += window) (void)reader.read(at, std::min(window, n - at));
    if (reader.has_text())
      for (std::int64_t i = 0; i < n; ++i) (void)reader.read_text(i);
    return reader.content_hash();
  });
}

void check_result_file(const std::string& path) {
  run_isolated(path, "result file", [&] {
    ResultReader reader(path);
    for (const std::string& mode : reader.modes()) {
      (void)reader.draft_len(mode);
      (void)reader.committed_batches(mode);
      (void)reader.committed_prompt_indices(mode);
      (void)reader.sequences(mode);
      (void)reader.steps(mode);
      (void)reader.timings(mode);
      (void)reader.accepted_per_position(mode);
    }
    return std::string();
  });
}

ResultHead check_result_head(const std::string& path) {
  // "1" or "0" (finished), then the configuration hash.
  const std::string text = run_isolated(path, "result file", [&] {
    ResultReader reader(path);
    const ResultInfo& info = reader.info();
    return std::string(info.finished.empty() ? "0" : "1") + info.header.config_hash;
  });
  SPEC_CHECK(!text.empty(), "check_result_head " << path << ": an empty answer");
  return ResultHead{text[0] == '1', text.substr(1)};
}

void check_dataset_file(const std::string& path) {
  run_isolated(path, "dataset file", [&] {
    DatasetReader reader(path);
    const std::vector<DatasetRow>& rows = reader.sequences();
    for (const DatasetRow& row : rows) (void)reader.tokens(row);
    for (std::size_t i : {std::size_t{0}, rows.size() - 1}) {
      if (i >= rows.size()) continue;
      (void)reader.hidden(rows[i]);
      (void)reader.topk_ids(rows[i]);
      (void)reader.topk_probs(rows[i]);
    }
    return std::string();
  });
}

}  // namespace specrun
