// `specrun golden RESULT.h5... --out golden.json`: the golden acceptance curves of one
// experiment's runs (analysis/golden.h), written atomically. A serial command.
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "analysis/golden.h"
#include "app/command_line.h"
#include "app/commands.h"
#include "common/atomic_output.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "io/checked_read.h"
#include "io/result_file.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_golden(CommandContext& ctx, const std::vector<std::string>& args) {
  int resamples = 2000;
  CommandLine cli("specrun golden RESULT.h5... --out GOLDEN.json [options]");
  cli.add_options()("out", po::value<std::string>(), "the golden file to write (JSON)")(
      "overwrite", "replace an existing golden file")(
      "resamples", po::value<int>(&resamples)->default_value(resamples),
      "bootstrap resamples per metric and run");
  cli.positional("results", po::value<std::vector<std::string>>(), -1);
  if (!cli.parse(ctx, args,
                 "\nThe runs must be one experiment (target fingerprint, drafter, sampling, "
                 "prompts): repeats with different job.seed for sampled decoding. Exit code: 0 "
                 "written, 2 bad input. Definitions: docs/analysis.md.\n"))
    return 0;
  SPEC_INPUT_CHECK(cli.has("results") && cli.has("out"),
                   "usage: specrun golden RESULT.h5... --out GOLDEN.json");
  SPEC_INPUT_CHECK(resamples >= 100,
                   "--resamples " << resamples << " is too few; use at least 100");
  if (ctx.mpi.rank() != 0) return 0;
  const auto& files = cli.get<std::vector<std::string>>("results");
  const std::string out = cli.get<std::string>("out");
  const OutputPolicy policy(cli.has("overwrite"), files, "--out file");
  check_output_path(out, policy);
  std::vector<GatedRun> runs;
  for (const std::string& path : files) {
    check_result_file(path);  // first in a child process: a corrupted file fails clearly
    ResultReader reader(path);
    print_reader_warnings(reader);
    runs.push_back(read_gated_run(reader, resamples));
  }
  const Golden golden = make_golden(runs, resamples);
  write_file_atomically(out, golden_to_json(golden).dump(2) + "\n", policy);
  std::cout << "wrote " << out << ": " << golden.metrics.size() << " metrics from "
            << golden.runs.size() << " run" << (golden.runs.size() > 1 ? "s" : "")
            << ", noise: " << golden.noise_rule() << std::endl;
  return 0;
}

}  // namespace specrun
