// `specrun run JOB.toml [--set section.key=value]... [--resume]`: the batch job, under mpirun.
#include <boost/program_options.hpp>
#include <iostream>

#include "app/commands.h"
#include "config/job_broadcast.h"
#include "config/job_config.h"
#include "dist/mpi_comm.h"
#include "engine/job_runner.h"
#include "spec/drafter_registry.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_run(CommandContext& ctx, const std::vector<std::string>& args) {
  po::options_description options("specrun run JOB.toml [options]");
  options.add_options()("help,h", "show this help and every job key")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "override a job key: --set decode.draft_len=8 (repeatable)")(
      "resume", "continue an interrupted job: skip batches already in job.output")(
      "print-config", "print the resolved configuration (TOML) and exit");
  po::options_description hidden;
  hidden.add_options()("job", po::value<std::string>(), "job file");
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("job", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);

  if (vm.count("help")) {
    if (ctx.mpi.rank() == 0) {
      std::cout << options << "\nJob file keys:\n" << config_help() << "\nDrafters (draft.kind):\n";
      for (const DrafterKind& k : drafter_kinds())
        std::cout << "  " << k.name << ": " << k.summary << "\n";
    }
    return 0;
  }
  if (!vm.count("job")) throw po::error("missing the job file: specrun run JOB.toml");
  std::vector<std::string> overrides;
  if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();

  MpiComm world(MPI_COMM_WORLD);
  JobConfig config =
      load_job_on_all_ranks(vm["job"].as<std::string>(), overrides, world, validate_drafter_config);
  if (vm.count("print-config")) {
    if (ctx.mpi.rank() == 0) std::cout << to_toml(config);
    return 0;
  }
  RunOptions run_options;
  run_options.resume = vm.count("resume") > 0;
  return run_job(config, ctx.mpi, run_options);
}

}  // namespace specrun
