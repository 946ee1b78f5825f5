// `specrun gate RESULT.h5 --golden GOLDEN.json [--alpha A] [--json]`: one-sided tests of a run's
// acceptance against a golden (analysis/golden.h). The verdict first; exit 0 PASS, 1 a
// significant drop, 2 missing statistics or unreadable input (never a silent pass), 3 another
// experiment. A serial command.
#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "analysis/golden.h"
#include "app/command_line.h"
#include "app/commands.h"
#include "common/error.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "dist/mpi_comm.h"
#include "io/checked_read.h"
#include "io/result_file.h"

namespace po = boost::program_options;

namespace specrun {
namespace {

inline constexpr InputFileKind kGoldenFile{"golden file", 64 * kMiB};

Golden read_golden(const std::string& path) {
  const std::string text = read_input_file(path, kGoldenFile);
  const nlohmann::json j = parse_json_or_discarded(text);
  SPEC_INPUT_CHECK(!j.is_discarded(), path << ": not JSON (or nested too deep): not a golden");
  return golden_from_json(j, path);
}

}  // namespace

int cmd_gate(CommandContext& ctx, const std::vector<std::string>& args) {
  double alpha = 0.05;
  int resamples = 2000;
  CommandLine cli("specrun gate RESULT.h5 --golden GOLDEN.json [options]");
  cli.add_options()("golden", po::value<std::string>(), "the golden (from `specrun golden`)")(
      "alpha", po::value<double>(&alpha)->default_value(alpha),
      "false-alarm rate of the whole gate (family-wise, Holm)")(
      "resamples", po::value<int>(&resamples)->default_value(resamples),
      "bootstrap resamples per metric of the run (default: the golden's)")(
      "json", "print the verdict and the tests as one JSON object (keys: docs/analysis.md)");
  cli.positional("result", po::value<std::string>());
  if (!cli.parse(ctx, args,
                 "\nExit code: 0 pass, 1 a significant drop, 2 missing statistics or bad input, "
                 "3 another experiment than the golden's. Definitions: docs/analysis.md.\n"))
    return 0;
  SPEC_INPUT_CHECK(cli.has("result") && cli.has("golden"),
                   "usage: specrun gate RESULT.h5 --golden GOLDEN.json [--alpha A] [--json]");
  SPEC_INPUT_CHECK(alpha > 0 && alpha < 1, "--alpha " << alpha << " is not in (0, 1)");
  SPEC_INPUT_CHECK(resamples >= 100,
                   "--resamples " << resamples << " is too few; use at least 100");
  if (ctx.mpi.rank() != 0) return 0;
  const std::string path = cli.get<std::string>("result");
  const std::string golden_path = cli.get<std::string>("golden");
  const bool json = cli.has("json");
  GateResult result;
  try {
    const Golden golden = read_golden(golden_path);
    if (cli.values()["resamples"].defaulted()) resamples = std::max(100, golden.resamples);
    check_result_file(path);  // first in a child process: a corrupted file fails clearly
    ResultReader reader(path);
    print_reader_warnings(reader);
    result = gate_run(golden, read_gated_run(reader, resamples), alpha);
  } catch (const Error& e) {
    if (e.exit_code() != kExitUsage) throw;
    // Missing statistics or unreadable input: the verdict still comes first, never a pass.
    result = GateResult{};
    result.alpha = alpha;
    result.missing.push_back(e.message());
  }
  if (json)
    std::cout << gate_to_json(result).dump(2) << std::endl;
  else
    std::cout << format_gate(result, path, golden_path) << std::flush;
  return result.exit_code();
}

}  // namespace specrun
