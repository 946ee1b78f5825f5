// `specrun report RESULT.h5 [--json]`: the summary of a result file (engine/summary.h), derived
// from the raw records in the file. A serial command; under mpirun only rank 0 prints.
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "engine/compare.h"
#include "engine/summary.h"
#include "io/checked_read.h"
#include "io/result_file.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_report(CommandContext& ctx, const std::vector<std::string>& args) {
  po::options_description options("specrun report RESULT.h5 [options]");
  options.add_options()("help,h", "show this help")(
      "json", "print the summary as one JSON object (keys: docs/analysis.md)")(
      "seed", po::value<std::uint64_t>(), "bootstrap seed (default: the job's job.seed)");
  po::options_description hidden;
  hidden.add_options()("result", po::value<std::string>(), "result file");
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("result", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    if (ctx.mpi.rank() == 0)
      std::cout << options
                << "\nPrints tau, alpha, per-position acceptance, tokens/s per mode, the speedup "
                   "with a bootstrap\n95% interval, greedy equality, phase timings and "
                   "categories. Definitions: docs/analysis.md.\n";
    return 0;
  }
  SPEC_INPUT_CHECK(vm.count("result"), "usage: specrun report RESULT.h5 [--json]");
  if (ctx.mpi.rank() != 0) return 0;
  const std::string path = vm["result"].as<std::string>();

  check_result_file(path);  // first in a child process: a corrupted file fails clearly
  ResultReader reader(path);
  const ResultInfo& info = reader.info();
  const bool greedy = resolved_is_greedy(info.header.resolved_json);
  const std::uint64_t seed =
      vm.count("seed") ? vm["seed"].as<std::uint64_t>() : resolved_seed(info.header.resolved_json);
  RunSummary summary = summarize_run(load_mode_data(reader), greedy, seed);
  const bool finished = !info.finished.empty();
  std::int64_t batches = 0;
  for (const std::string& mode : reader.modes()) batches += reader.batches_committed(mode);

  // Variables or versions that differed between the ranks of this run (a variable that reached
  // some ranks only): always shown, they are the first suspect of any slowdown.
  const std::vector<std::string> mismatches = recorded_mismatches(info, path);
  if (vm.count("json")) {
    nlohmann::json j = summary_to_json(summary);
    j["cross_rank_mismatches"] = mismatches;
    j["identities_checked"] = kIdentitiesChecked;
    j["file"] = path;
    j["schema"] = info.schema;
    j["schema_version"] = info.schema_version;
    j["specrun_version"] = info.header.specrun_version;
    j["git_commit"] = info.header.git_commit;
    j["git_dirty"] = info.header.git_dirty;
    j["world_size"] = info.header.world_size;
    j["tp"] = info.header.tp;
    j["dp"] = info.header.dp;
    j["started"] = info.started;
    j["finished"] = info.finished;
    j["job_finished"] = finished;
    j["resumes"] = info.resumes;
    j["batches_committed"] = batches;
    std::cout << j.dump(2) << std::endl;
    return 0;
  }
  std::cout << "result " << path << ": world " << info.header.world_size << " = dp "
            << info.header.dp << " x tp " << info.header.tp << ", commit "
            << info.header.git_commit.substr(0, 12) << (info.header.git_dirty ? " (dirty)" : "")
            << ", started " << info.started;
  if (finished) std::cout << ", finished " << info.finished;
  if (info.resumes > 0) std::cout << ", resumed " << info.resumes << "x";
  std::cout << "\n";
  if (!finished)
    std::cout << "NOTE: the job did not finish (no `finished` time): reporting the " << batches
              << " committed batches; continue it with `specrun run ... --resume`\n";
  if (mismatches.empty()) {
    std::cout << "cross-rank mismatches: none (every rank ran with the same recorded environment "
                 "and versions)\n";
  } else {
    std::cout << "cross-rank mismatches (" << mismatches.size() << "):\n";
    for (const std::string& m : mismatches) std::cout << "  " << m << "\n";
  }
  std::cout << format_summary(summary);
  std::cout << "identities checked for every mode: " << kIdentitiesChecked << "\n";
  return 0;
}

}  // namespace specrun
