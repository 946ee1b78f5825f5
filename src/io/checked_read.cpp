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
  // Three strings, NUL-separated: "1" or "0", the config hash, the prompts hash.
  const std::string text = run_isolated(path, "result file", [&] {
    ResultReader reader(path);
    const ResultInfo& info = reader.info();
    return std::string(info.finished.empty() ? "0" : "1") + '\0' + info.header.config_hash + '\0' +
           info.header.prompts_hash;
  });
  const std::size_t a = text.find('\0');
  const std::size_t b = a == std::string::npos ? a : text.find('\0', a + 1);
  SPEC_CHECK(b != std::string::npos, "check_result_head " << path << ": a malformed answer");
  ResultHead head;
  head.finished = text.substr(0, a) == "1";
  head.config_hash = text.substr(a + 1, b - a - 1);
  head.prompts_hash = text.substr(b + 1);
  return head;
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
