#include "app/commands.h"

#include <iostream>

#include "io/result_file.h"

namespace specrun {

void print_reader_warnings(const ResultReader& reader) {
  for (const std::string& w : reader.warnings()) std::cerr << "warning: " << w << std::endl;
}

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "run a batch job: baseline and speculative decoding (under mpirun)", cmd_run},
      {"preflight",
       "check a job without running it: models, drafter and prompts loaded and checked as "
       "`run` would, nothing written (under the job's mpirun)",
       cmd_preflight},
      {"env", "provenance of this process; under mpirun, the cross-rank environment check",
       cmd_env},
      {"report", "summary of a result file: tau, alpha, acceptance, speedup, phases", cmd_report},
      {"compare", "per-phase and throughput changes between two result files", cmd_compare},
      {"golden", "golden acceptance curves (with their noise) from runs of one experiment",
       cmd_golden},
      {"gate", "a run's acceptance against a golden: exit 1 on a significant drop", cmd_gate},
      {"prepare", "prompt file (HDF5) from JSONL", cmd_prepare},
      {"generate", "greedy continuation of token ids with one model (engine check)", cmd_generate},
      {"make-model", "write a synthetic target/draft pair in Hugging Face layout", cmd_make_model},
      {"import-llama2c", "convert a llama2.c checkpoint to Hugging Face layout",
       cmd_import_llama2c},
      {"verify-data", "re-run the target on a dataset's sequences and compare what is stored",
       cmd_verify_data},
      {"bench", "CPU decode/verify/prefill speed vs measured memory bandwidth", cmd_bench},
      {"tokenize", "text -> token ids, or ids -> text, with a tokenizer (JSONL)", cmd_tokenize},
      {"chat-template", "a conversation rendered with a model's chat template", cmd_chat_template},
      {"sweep", "run a job over a grid of options (mpirun per point), one result file each",
       nullptr, cmd_sweep},
  };
  return table;
}

}  // namespace specrun
