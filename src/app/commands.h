// Subcommands. Each lives in its own cmd_<name>.cpp, parses its own options with
// Boost.Program_options from `args` (the words after the command name), and returns the exit
// code. Errors are thrown as specrun::Error and handled by main.
#pragma once

#include <string>
#include <vector>

namespace specrun {

class MpiSession;
class ResultReader;

struct CommandContext {
  MpiSession& mpi;
  std::string program;  // argv[0]
};

using CommandFn = int (*)(CommandContext& ctx, const std::vector<std::string>& args);
// A command that runs without MPI (it launches mpirun itself): main never initializes MPI for it.
using LauncherFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn fn;
  LauncherFn launcher = nullptr;  // set instead of fn for commands that launch jobs
};

// The table of subcommands, in the order `specrun --help` lists them.
const std::vector<Command>& commands();

// Prints what a result file's reader left out (ResultReader::warnings) to stderr, one
// "warning: ..." line each, so that a report or comparison never silently reads fewer batches.
void print_reader_warnings(const ResultReader& reader);

int cmd_run(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_preflight(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_env(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_generate(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_import_llama2c(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_make_model(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_prepare(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_report(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_compare(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_golden(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_gate(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_bench(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_verify_data(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_tokenize(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_chat_template(CommandContext& ctx, const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);

}  // namespace specrun
