// `specrun compare BASE.h5 NEW.h5 [--threshold PCT] [--json]`: timing, throughput and acceptance
// changes with bootstrap intervals, and provenance differences (analysis/compare.h). Exit code 1
// when a regression is flagged, 0 otherwise, 2 on bad input. A serial command.
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "analysis/compare.h"
#include "app/command_line.h"
#include "app/commands.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "io/checked_read.h"
#include "io/result_file.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_compare(CommandContext& ctx, const std::vector<std::string>& args) {
  CompareOptions opts;
  CommandLine cli("specrun compare BASE.h5 NEW.h5 [options]");
  cli.add_options()(
      "threshold", po::value<double>(&opts.threshold_pct)->default_value(opts.threshold_pct),
      "percent change that counts as a regression when the 95% interval lies beyond it")(
      "min-ms", po::value<double>(&opts.min_abs_ms)->default_value(opts.min_abs_ms),
      "a phase must also change its mean by more than this many ms per step")(
      "resamples", po::value<int>(&opts.resamples)->default_value(opts.resamples),
      "bootstrap resamples per interval")(
      "json", "print the comparison as one JSON object (keys: docs/analysis.md)");
  cli.positional("base", po::value<std::string>()).positional("new", po::value<std::string>());
  if (!cli.parse(ctx, args,
                 "\nExit code: 0 no regression, 1 regression flagged, 2 bad input. "
                 "Definitions: docs/analysis.md.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  SPEC_INPUT_CHECK(vm.count("base") && vm.count("new"),
                   "usage: specrun compare BASE.h5 NEW.h5 [--threshold PCT] [--json]");
  SPEC_INPUT_CHECK(opts.threshold_pct >= 0,
                   "--threshold " << opts.threshold_pct << " is negative; give a percentage >= 0");
  SPEC_INPUT_CHECK(opts.resamples >= 100,
                   "--resamples " << opts.resamples << " is too few; use at least 100");
  if (ctx.mpi.rank() != 0) return 0;
  // Each file first in a child process: a corrupted file fails clearly.
  check_result_file(vm["base"].as<std::string>());
  check_result_file(vm["new"].as<std::string>());
  ResultReader base(vm["base"].as<std::string>());
  ResultReader next(vm["new"].as<std::string>());
  print_reader_warnings(base);
  print_reader_warnings(next);
  Comparison c = compare_results(base, next, opts);
  if (vm.count("json"))
    std::cout << comparison_to_json(c).dump(2) << std::endl;
  else
    std::cout << format_comparison(c, base.path(), next.path());
  return c.exit_code();
}

}  // namespace specrun
