// `specrun prepare IN.jsonl OUT.h5 [--overwrite]`: builds a prompt file from JSONL. A serial
// command: run it without mpirun (under mpirun, rank 0 does the work and the others wait).
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "app/commands.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "io/prompt_file.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_prepare(CommandContext& ctx, const std::vector<std::string>& args) {
  po::options_description options("specrun prepare IN.jsonl OUT.h5 [options]");
  options.add_options()("help,h", "show this help")(
      "overwrite", "replace OUT.h5 if it exists (otherwise an existing file is an error)");
  po::options_description hidden;
  hidden.add_options()("input", po::value<std::string>(), "JSONL input")(
      "output", po::value<std::string>(), "HDF5 output");
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("input", 1).add("output", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);

  if (vm.count("help")) {
    if (ctx.mpi.rank() == 0)
      std::cout << options
                << "\nEach non-empty line of IN.jsonl is one prompt:\n"
                   "  {\"tokens\": [1, 15043, 29892], \"id\": \"p1\", \"category\": \"code\", "
                   "\"text\": \"...\"}\n"
                   "Only \"tokens\" (non-negative integer ids) is required; \"id\" may be a string "
                   "or an integer\n(all lines or none, unique); other keys are ignored. Bad lines "
                   "are reported by number and\nnothing is written. Layout: "
                   "docs/file-formats.md.\n";
    return 0;
  }
  SPEC_INPUT_CHECK(vm.count("input") && vm.count("output"),
                   "usage: specrun prepare IN.jsonl OUT.h5 [--overwrite]");
  const std::string in = vm["input"].as<std::string>();
  const std::string out = vm["output"].as<std::string>();

  // Rank 0 converts. If it fails, main aborts every rank, so the others need not wait here.
  if (ctx.mpi.rank() != 0) return 0;
  PrepareSummary summary = prepare_prompt_file(in, out, vm.count("overwrite") > 0);
  std::cout << "wrote " << out << ": " << summary.prompts << " prompts, " << summary.tokens
            << " tokens (prompt length " << summary.min_len << " to " << summary.max_len << ")"
            << (summary.columns.ids ? ", ids" : "")
            << (summary.columns.categories ? ", categories" : "")
            << (summary.columns.text ? ", text" : "") << std::endl;
  return 0;
}

}  // namespace specrun
