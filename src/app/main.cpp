// specrun entry point: global options, subcommand dispatch, and the one place where errors are
// caught, printed with the rank prefix, and turned into MPI_Abort so that no rank hangs.
#include <mpi.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include "app/commands.h"
#include "common/build_info.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "engine/stop_request.h"
#include "kernels/cpu/dispatch.h"

namespace po = boost::program_options;
using namespace specrun;

namespace {

void print_usage(std::ostream& out) {
  out << "usage: specrun <command> [options]\n"
         "       specrun --help | --version\n\n"
         "commands:\n";
  for (const Command& c : commands()) {
    std::string name = c.name;
    name.resize(16, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\n`specrun <command> --help` describes a command's options.\n";
}

std::string version_text() {
  const BuildInfo& b = build_info();
  std::string built;
  for (cpu::Isa isa : cpu::built_isas())
    built += (built.empty() ? "" : ", ") + std::string(cpu::isa_name(isa));
  return std::string("specrun ") + b.version + " (commit " + b.git_commit +
         (b.git_dirty ? ", dirty tree" : "") + ", " + b.build_type + ", " + b.compiler +
         (b.cuda ? ", CUDA" : ", CPU only") + ")\nCPU kernels: " + built +
         " (baseline -march=" + cpu::baseline_arch() +
         "); in use: " + cpu::describe_kernel_choice();
}

// The CPU kernel variant, chosen before any command runs: a bad SPECRUN_CPU_ISA is a usage
// error at start, on every rank that has it, not a surprise in the middle of a job.
void choose_cpu_kernels() {
  try {
    cpu::select_kernels();
  } catch (const cpu::IsaError& e) {
    SPEC_INPUT_FAIL(e.what());
  }
}

// What the user reads first is what is wrong (the file, key or prompt and the value); where in
// specrun it was found (rank, host, source line, the failed check) follows on its own line, for
// reports and logs.
std::string error_text(const Error& e) {
  std::string text = "error: " + e.message();
  if (!e.where().empty()) text += "\n  (found by " + e.where() + ")";
  return text;
}

// Aborts every rank when more than one runs; a lone process just exits.
[[noreturn]] void fail(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int size = 1;
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::cout.flush();
  std::cerr.flush();
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  if (initialized && !finalized) MPI_Finalize();
  std::exit(code);
}

// Most input errors (a missing model, a bad prompt) are found by every rank at about the same
// moment. Ranks other than 0 wait a little before printing theirs: when rank 0 fails too, its
// MPI_Abort ends them first and the message appears once instead of once per rank; an error only
// one rank meets is still printed, a moment later.
void quiet_unless_alone() {
  int initialized = 0, finalized = 0, rank = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1 && rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
}

}  // namespace

int main(int argc, char** argv) {
  // Parse the command word before MPI starts so that --help and --version are instant.
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) {
    print_usage(std::cerr);
    return kExitUsage;
  }
  if (words[0] == "--help" || words[0] == "-h" || words[0] == "help") {
    print_usage(std::cout);
    return 0;
  }
  if (words[0] == "--version" || words[0] == "-V") {
    std::cout << version_text() << "\n";
    return 0;
  }
  const Command* command = nullptr;
  for (const Command& c : commands())
    if (words[0] == c.name) command = &c;
  if (command == nullptr) {
    std::cerr << "specrun: unknown command '" << words[0] << "'\n\n";
    print_usage(std::cerr);
    return kExitUsage;
  }
  std::vector<std::string> args(words.begin() + 1, words.end());
  if (command->launcher != nullptr) {
    // Launches mpirun per job: no MPI here (a singleton's environment would leak into them).
    try {
      return command->launcher(args);
    } catch (const po::error& e) {
      std::cerr << "specrun " << command->name << ": " << e.what() << "\n(see `specrun "
                << command->name << " --help`)" << std::endl;
      return kExitUsage;
    } catch (const Error& e) {
      std::cerr << error_text(e) << std::endl;
      return e.exit_code();
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << std::endl;
      return kExitFailure;
    }
  }
  // A batch job stops gracefully on SIGUSR1/SIGTERM; the handlers go in before MPI starts so that
  // a signal during start-up or model loading is not lost (the job stops at its first boundary).
  if (std::string(command->name) == "run") install_stop_handlers();

  // Outside the try: an error must reach fail() (MPI_Abort) before ~MpiSession runs
  // MPI_Finalize, which would wait forever for ranks that did not fail.
  std::optional<MpiSession> mpi;
  try {
    mpi.emplace(&argc, &argv);
    choose_cpu_kernels();
    CommandContext ctx{*mpi, argv[0]};
    int code = 0;
    try {
      code = command->fn(ctx, args);
    } catch (const po::error& e) {
      std::cerr << "specrun " << command->name << ": " << e.what() << "\n(see `specrun "
                << command->name << " --help`)" << std::endl;
      fail(kExitUsage);
    }
    // A returned code was reached by every rank alike (e.g. a collective stop): exit normally.
    return code;
  } catch (const CollectiveError& e) {
    // Every rank threw it: one reports, then all leave together through MPI_Finalize (the
    // barrier keeps mpirun from ending the job on another rank's exit before it is printed).
    if (e.report()) std::cerr << error_text(e) << std::endl;
    MPI_Barrier(MPI_COMM_WORLD);
    return e.exit_code();
  } catch (const Error& e) {
    quiet_unless_alone();
    std::cerr << error_text(e) << std::endl;
    fail(e.exit_code());
  } catch (const std::exception& e) {
    std::cerr << "error [" << process_label() << "]: " << e.what() << std::endl;
    fail(kExitFailure);
  }
}
