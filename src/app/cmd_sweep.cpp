// `specrun sweep JOB.toml --grid KEY=V1,V2 [--grid ...]`: runs the job once per grid point
// (analysis/sweep.h), each under its own mpirun, writing DIR/<point name>.h5 and its log beside it.
// Points whose file is finished are skipped and unfinished ones continued (--resume), so a
// stopped sweep is continued by running the same command again. Runs without MPI itself.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "analysis/sweep.h"
#include "app/command_line.h"
#include "app/commands.h"
#include "common/atomic_output.h"
#include "common/error.h"
#include "config/job_config.h"
#include "engine/stop_request.h"
#include "spec/drafter_registry.h"

extern char** environ;

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace specrun {

namespace {

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Waits for the point's launcher. A stop request to the sweep (SIGUSR1 or SIGTERM, e.g. Slurm's
// --signal or preemption) is passed on to it once, as SIGUSR1: mpirun forwards that to the
// ranks, which stop at their next batch boundary with everything before it written, and exit 75
// (SIGTERM to mpirun would end the ranks at once: docs/reliability.md). The flag is polled: the
// handlers restart waitpid (SA_RESTART), so a signal alone would not end the wait.
int wait_point(pid_t pid) {
  bool forwarded = false;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    SPEC_CHECK(r == 0 || errno == EINTR, "waitpid(" << pid << "): " << std::strerror(errno));
    if (!forwarded && stop_requested()) {
      ::kill(pid, SIGUSR1);
      forwarded = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Runs argv with stdout and stderr to `log_fd` (closed here); returns the wait status.
int run_logged(const std::vector<std::string>& argv, int log_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(log_fd);
  SPEC_INPUT_CHECK(rc == 0, "cannot start " << argv[0] << ": " << std::strerror(rc)
                                            << " (is it installed and on PATH? --launcher)");
  return wait_point(pid);
}

std::string last_lines(const std::string& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (std::size_t i = lines.size() > static_cast<std::size_t>(n) ? lines.size() - n : 0;
       i < lines.size(); ++i)
    out += "    " + lines[i] + "\n";
  return out;
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& args) {
  CommandLine cli("specrun sweep JOB.toml --grid KEY=V1,V2,... [options]");
  cli.add_options()(
      "grid", po::value<std::vector<std::string>>()->composing(),
      "an axis: KEY=V1,V2 or coupled KEY1+KEY2=A1/A2,B1/B2 ('|' instead of '/' when values are "
      "paths: KEY1+KEY2='A1|/p/a,B1|/p/b'; repeatable; first varies slowest)")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "section.key=value for every point (repeatable; grid values win)")(
      "out", po::value<std::string>()->default_value("sweep-out"),
      "directory for the result files and logs")("np", po::value<int>()->default_value(1),
                                                 "ranks per point (mpirun -np)")(
      "mpirun-args", po::value<std::string>()->default_value(""),
      "more mpirun options, one string (e.g. \"--oversubscribe -x NCCL_PROTO\")")(
      "launcher", po::value<std::string>()->default_value("mpirun"), "the MPI launcher")(
      "dry-run", "print each point's command and exit")(
      "point", po::value<int>(), "with --print-sets: the point to print (0-based)")(
      "print-sets",
      "print the point's settings as section.key=value words (with job.output) for "
      "slurm/sweep.sbatch")("count", "print the number of points and exit");
  cli.positional("job", po::value<std::string>());
  if (!cli.parse(args,
                 "\nOne mpirun per point: LAUNCHER -np NP MPIRUN-ARGS specrun run JOB --set ... "
                 "--set job.output=OUT/<point>.h5; its output goes to OUT/<point>.log. A point "
                 "whose file is finished is skipped, an unfinished one resumed. Then:\n  specrun "
                 "report OUT/*.h5    # one row per point\nSIGUSR1 or SIGTERM to the sweep stops "
                 "the running point at its next batch boundary (passed on to the launcher as "
                 "SIGUSR1)\nand ends the sweep; the same command continues it. Exit 0 when every "
                 "point finished, 1 when one\nfailed, 75 when stopped by a signal, 2 on bad "
                 "options.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  SPEC_INPUT_CHECK(vm.count("job") && vm.count("grid"),
                   "usage: specrun sweep JOB.toml --grid KEY=V1,V2,... [--grid ...]");
  std::vector<GridAxis> axes;
  for (const std::string& g : vm["grid"].as<std::vector<std::string>>())
    axes.push_back(parse_grid_axis(g));
  const std::vector<SweepPoint> points = sweep_points(axes);
  const std::string out = vm["out"].as<std::string>();
  const std::string job = vm["job"].as<std::string>();
  SPEC_INPUT_CHECK(fs::exists(job), "job file " << job << " does not exist");
  const int np = vm["np"].as<int>();
  SPEC_INPUT_CHECK(np >= 1, "--np " << np << ": give at least 1 rank");
  auto output_of = [&](const SweepPoint& p) { return (fs::path(out) / (p.name + ".h5")).string(); };

  if (vm.count("count")) {
    std::cout << points.size() << "\n";
    return 0;
  }
  if (vm.count("print-sets")) {
    SPEC_INPUT_CHECK(vm.count("point"), "--print-sets needs --point I");
    const int i = vm["point"].as<int>();
    SPEC_INPUT_CHECK(i >= 0 && i < static_cast<int>(points.size()),
                     "--point " << i << ": the grid has " << points.size() << " points (0-"
                                << points.size() - 1 << ")");
    for (const auto& [k, v] : points[static_cast<std::size_t>(i)].sets)
      std::cout << k << "=" << v << " ";
    std::cout << "job.output=" << output_of(points[static_cast<std::size_t>(i)]) << "\n";
    return 0;
  }

  const std::string self = fs::canonical("/proc/self/exe").string();
  if (!vm.count("dry-run")) create_output_folder(out);
  install_stop_handlers();
  int ran = 0, skipped = 0;
  std::vector<std::string> failed;
  auto stopped = [&](std::size_t i, const char* when) {
    std::cout << "sweep stopped by a signal " << when << " point " << i + 1 << "; run the same "
              << "command to continue (finished points are skipped, an unfinished one resumed)"
              << std::endl;
    return kExitStopped;
  };
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (stop_requested()) return stopped(i, "before");
    const SweepPoint& p = points[i];
    const std::string file = output_of(p);
    // What `run` is given for this point, in this order (later --set values win).
    std::vector<std::string> overrides;
    if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();
    for (const auto& [k, v] : p.sets) overrides.push_back(k + "=" + v);
    overrides.push_back("job.output=" + file);
    const std::string head =
        "point " + std::to_string(i + 1) + "/" + std::to_string(points.size()) + " " + p.name;
    bool resume = false;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(file, ec))) {
      // Read in a child (a corrupted file cannot crash or hang the sweep); a finished file is
      // skipped only when it is this point's run, by the configuration hash --resume checks.
      PointFile state;
      try {
        const JobConfig config = load_job_config(job, overrides, validate_drafter_config);
        state = inspect_point_file(file, config_hash_hex(config));
      } catch (const Error& e) {
        state = {PointFile::State::kRefused, e.message()};
      }
      if (state.state == PointFile::State::kFinished) {
        std::cout << head << ": " << file << " is finished, skipped" << std::endl;
        ++skipped;
        continue;
      }
      if (state.state == PointFile::State::kRefused) {
        std::cout << head << ": FAILED, not run: " << state.reason << std::endl;
        failed.push_back(p.name);
        continue;
      }
      resume = true;
    }
    std::vector<std::string> argv = {vm["launcher"].as<std::string>(), "-np", std::to_string(np)};
    for (const std::string& w : split_words(vm["mpirun-args"].as<std::string>())) argv.push_back(w);
    argv.insert(argv.end(), {self, "run", job});
    for (const std::string& o : overrides) argv.insert(argv.end(), {"--set", o});
    if (resume) argv.push_back("--resume");
    if (vm.count("dry-run")) {
      for (const std::string& a : argv) std::cout << a << " ";
      std::cout << "\n";
      continue;
    }
    // Appended to across resumes; never through a link planted at its name (open_append_output).
    const std::string log = (fs::path(out) / (p.name + ".log")).string();
    int log_fd = -1;
    try {
      log_fd = open_append_output(log);
    } catch (const Error& e) {
      std::cout << head << ": FAILED, not run: " << e.message() << std::endl;
      failed.push_back(p.name);
      continue;
    }
    std::cout << head << (resume ? " (resuming)" : "") << " ..." << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    const int status = run_logged(argv, log_fd);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ++ran;
    if (code == 0) {
      std::cout << " done in " << std::fixed << std::setprecision(1) << s << " s: " << file
                << std::endl;
      continue;
    }
    if (code == kExitStopped || stop_requested()) {
      std::cout << " stopped (exit " << code << ") after " << std::fixed << std::setprecision(1)
                << s << " s; " << log << std::endl;
      return stopped(i, "at");
    }
    std::cout << " FAILED (exit " << code << ") after " << std::fixed << std::setprecision(1) << s
              << " s; " << log << ":\n"
              << last_lines(log, 4) << std::flush;
    failed.push_back(p.name);
  }
  if (vm.count("dry-run")) return 0;
  std::cout << "sweep: " << points.size() << " points, " << ran << " run, " << skipped
            << " already finished, " << failed.size() << " failed"
            << (failed.empty() ? ""
                               : " (" + failed.front() + (failed.size() > 1 ? ", ..." : "") + ")")
            << "\nreport: specrun report " << (fs::path(out) / "*.h5").string() << std::endl;
  return failed.empty() ? 0 : kExitFailure;
}

}  // namespace specrun
