// `specrun env [--json] [--all-ranks]`: this process's provenance and, under mpirun, the
// cross-rank environment check. Every rank collects its record; rank 0 gathers them, prints, and
// reports each variable or version that differs between ranks. It is a report: the exit code is
// 0 whether or not mismatches were found.
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/log.h"
#include "dist/mpi_comm.h"
#include "io/provenance.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_env(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli("specrun env [options]");
  cli.add_options()("json", "print JSON: every rank's record and the mismatches (rank 0, stdout)")(
      "all-ranks", "text mode: print every rank's record, not only rank 0's");
  if (!cli.parse(ctx, args,
                 "\nUnder `mpirun -np N specrun env`, rank 0 gathers every rank's record and "
                 "names\neach NCCL_/CUDA_/OMPI_/UCX_/SLURM_/OMP_ variable or library version "
                 "that differs\nbetween ranks. Exit code 0 either way.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  Logger log(ctx.mpi.rank(), ctx.mpi.size());

  MpiComm world(MPI_COMM_WORLD);
  ProvenanceRecord local = collect_local_provenance(ctx.mpi);
  std::vector<ProvenanceRecord> records = gather_provenance(world, local);
  if (!log.is_root()) return 0;

  std::vector<Mismatch> mismatches = find_mismatches(records);
  if (vm.count("json")) {
    // Machine-readable output goes to stdout unprefixed (Logger's "[0/N] " would break parsers).
    nlohmann::json out{
        {"world_size", records.size()}, {"ranks", records}, {"mismatches", mismatches}};
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    return 0;
  }

  const std::size_t shown = vm.count("all-ranks") ? records.size() : 1;
  for (std::size_t r = 0; r < shown; ++r) {
    std::istringstream lines(format_record(records[r]));
    for (std::string line; std::getline(lines, line);) log.info(line);
    if (r + 1 < shown) log.info("");
  }
  const std::string ranks =
      std::to_string(records.size()) + (records.size() == 1 ? " rank" : " ranks");
  if (mismatches.empty()) {
    log.info("environment check: " + ranks + ", no mismatches");
  } else {
    log.info("environment check: " + ranks + ", " + std::to_string(mismatches.size()) +
             " mismatch" + (mismatches.size() == 1 ? "" : "es") + ":");
    for (const Mismatch& m : mismatches) log.info(describe(m));
  }
  return 0;
}

}  // namespace specrun
