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

// Writes OUT.jsonl (through OUT.jsonl.tmp and a rename): per prompt, in prompt order,
//   {"prompt_index", "id", "category", "prompt": text, "prompt_tokens": n,
//    "<mode>": {"text", "tokens": [...], "generated", "finish": "eos"|"length", "wall_s",
//               "verify_steps", "tau", "alpha"}  for each mode of the file,
//    "speedup": baseline s/token over speculative s/token, or null}.
// The prompt text is the prompt file's text column, else the prompt's tokens decoded; output
// text is decoded after the prompt's last token (so a leading space survives). `model_dir`
// overrides the target folder the result file names ("" = that one). Throws naming the prompt
// file when it is missing or is not the one the run used (content hash).
OutputsExport export_outputs(const ResultReader& reader, const std::string& out_path,
                             const std::string& model_dir = "");

}  // namespace specrun
