// `specrun report RESULT.h5 --outputs OUT.jsonl`: every prompt's outputs as text, one JSON line
// per prompt, decoded with the target's tokenizer.
#pragma once

#include <cstdint>
#include <string>

#include "io/result_file.h"

namespace specrun {

struct OutputsExport {
  std::int64_t prompts = 0;
  bool decoded = false;   // false: the target folder has no tokenizer (ids only)
  std::string tokenizer;  // the tokenizer's format ("" when none)
};

// Writes OUT.jsonl (common/atomic_output.h: a temporary file created exclusively beside it, then
// renamed; never over the result file, the prompt file or the tokenizer folder's files, nor over
// an existing file unless `overwrite`): per prompt, in prompt order,
//   {"prompt_index", "id", "category", "prompt": text, "prompt_tokens": n,
//    "<mode>": {"text", "tokens": [...], "generated", "finish": "eos"|"length", "wall_s",
//               "verify_steps", "tau", "alpha"}  for each mode of the file,
//    "speedup": baseline s/token over speculative s/token, or null}.
// The prompt text is the prompt file's text column, else the prompt's tokens decoded; output
// text is decoded after the prompt's last token (so a leading space survives). `model_dir`
// overrides the target folder the result file names ("" = that one). Before writing, as
// `report` does: the result's records must hold the summary's identities (check_identities),
// and the prompt file is read whole in a child process first (io/checked_read.h: a corrupted
// file is refused, never read in this process) and must be the one the run used (content hash).
// Throws specrun::Error naming the file otherwise.
OutputsExport export_outputs(const ResultReader& reader, const std::string& out_path,
                             const std::string& model_dir = "", bool overwrite = false);

}  // namespace specrun
