// Whole-file reads of the HDF5 files a user hands to specrun, done once in a child process
// (common/isolated.h) before the process reads them itself: a prompt or result file that would
// crash or hang libhdf5 gives a clear "corrupt or unreadable" error instead. Every reader path
// specrun uses later is exercised in the child.
#pragma once

#include <functional>
#include <string>

namespace specrun {

class PromptReader;

// Opens the prompt file, runs `first` on it (e.g. the length check against the target, which
// refuses a file declaring enormous prompts before anything else is read), then reads every
// prompt, text and the content hash, and returns the hash (PromptReader::content_hash).
std::string check_prompt_file(const std::string& path,
                              const std::function<void(const PromptReader&)>& first = {});

// Opens the result file and reads everything ResultReader offers for every mode.
void check_result_file(const std::string& path);

// The few header fields of a result file that say whose run it is and whether it finished,
// read in the child (ResultReader's header checks included) and handed back: the caller never
// opens the file itself (`sweep` over existing point files).
struct ResultHead {
  bool finished = false;
  std::string config_hash;
};
ResultHead check_result_head(const std::string& path);

// Opens a dataset's top-level file or shard and reads its header, sequence table and every
// sequence's tokens, and the hidden states and top-k of its first and last sequences (all of
// them would be gigabytes).
void check_dataset_file(const std::string& path);

}  // namespace specrun
