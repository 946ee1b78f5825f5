// `specrun run JOB.toml [--set section.key=value]... [--resume]`: the batch job, under mpirun;
// `specrun preflight JOB.toml`: the same up to the first step, then a verdict.
#include <boost/program_options.hpp>
#include <iostream>

#include "app/command_line.h"
#include "app/commands.h"
#include "config/job_broadcast.h"
#include "config/job_config.h"
#include "dist/mpi_comm.h"
#include "engine/job_runner.h"
#include "spec/drafter_registry.h"

namespace po = boost::program_options;

namespace specrun {

namespace {

// `run` and `preflight`: the same job file, overrides and loading; preflight stops before the
// first step.
int run_or_preflight(CommandContext& ctx, const std::vector<std::string>& args, bool preflight) {
  CommandLine cli(
      preflight ? "specrun preflight JOB.toml [options]" : "specrun run JOB.toml [options]",
      "show this help and every job key");
  cli.add_options()("set,s", po::value<std::vector<std::string>>()->composing(),
                    "override a job key: --set decode.draft_len=8 (repeatable)");
  if (!preflight)
    cli.add_options()("resume", "continue an interrupted job: skip batches already in job.output")(
        "print-config", "print the resolved configuration (TOML) and exit");
  cli.positional("job", po::value<std::string>());
  if (!cli.parse(ctx, args, [preflight] {
        std::string tail =
            preflight
                ? "\nEverything `specrun run` does before its first step, under the same "
                  "launch (mpirun -np N):\nthe job file, the prompts, job.output's path, the "
                  "models and the drafter loaded and\nchecked as the job would (the draft "
                  "against the target: EAGLE-3 fc and aux layers, d2t,\nquantization, a draft "
                  "that is the target), every prompt against the target; then a\nverdict. "
                  "Nothing is decoded and no result file is written. Exit 0: the job would "
                  "start\n(warnings printed); 2: what it would refuse, named.\n"
                : "";
        tail += "\nJob file keys:\n" + config_help() + "\nDrafters (draft.kind):\n";
        for (const DrafterKind& k : drafter_kinds())
          tail += "  " + std::string(k.name) + ": " + std::string(k.summary) + "\n";
        return tail;
      }))
    return 0;
  const po::variables_map& vm = cli.values();
  if (!vm.count("job"))
    throw po::error(std::string("missing the job file: specrun ") +
                    (preflight ? "preflight" : "run") + " JOB.toml");
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
  run_options.preflight = preflight;
  return run_job(config, ctx.mpi, run_options);
}

}  // namespace

int cmd_run(CommandContext& ctx, const std::vector<std::string>& args) {
  return run_or_preflight(ctx, args, false);
}

int cmd_preflight(CommandContext& ctx, const std::vector<std::string>& args) {
  return run_or_preflight(ctx, args, true);
}

}  // namespace specrun
