// `specrun sweep JOB.toml --grid KEY=V1,V2 [--grid ...]`: runs the job once per grid point
// (engine/sweep.h), each under its own mpirun, writing DIR/<point name>.h5 and its log beside it.
// Points whose file is finished are skipped and unfinished ones continued (--resume), so a
// stopped sweep is continued by running the same command again. Runs without MPI itself.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "app/commands.h"
#include "common/error.h"
#include "engine/stop_request.h"
#include "engine/sweep.h"
#include "io/result_file.h"

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

// Runs argv with stdout and stderr to `log`; returns the wait status.
int run_logged(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  SPEC_INPUT_CHECK(rc == 0, "cannot start " << argv[0] << ": " << std::strerror(rc)
                                            << " (is it installed and on PATH? --launcher)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
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
  po::options_description options("specrun sweep JOB.toml --grid KEY=V1,V2,... [options]");
  options.add_options()("help,h", "show this help")(
      "grid", po::value<std::vector<std::string>>()->composing(),
      "an axis: KEY=V1,V2 or coupled KEY1+KEY2=A1/A2,B1/B2 (repeatable; first varies slowest)")(
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
    std::cout << options
              << "\nOne mpirun per point: LAUNCHER -np NP MPIRUN-ARGS specrun run JOB --set ... "
                 "--set job.output=OUT/<point>.h5; its output goes to OUT/<point>.log. A point "
                 "whose file is finished is skipped, an unfinished one resumed. Then:\n  specrun "
                 "report OUT/*.h5    # one row per point\nExit 0 when every point finished, 1 "
                 "when one failed, 75 when stopped by a signal, 2 on bad options.\n";
    return 0;
  }
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
  if (!vm.count("dry-run")) fs::create_directories(out);
  install_stop_handlers();
  int ran = 0, skipped = 0;
  std::vector<std::string> failed;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const SweepPoint& p = points[i];
    const std::string file = output_of(p);
    bool resume = false;
    if (fs::exists(file)) {
      bool finished = false;
      try {
        finished = !ResultReader(file).info().finished.empty();
      } catch (const Error&) {
        // Not readable as a result file: the run refuses it with the reason.
      }
      if (finished) {
        std::cout << "point " << i + 1 << "/" << points.size() << " " << p.name << ": " << file
                  << " is finished, skipped" << std::endl;
        ++skipped;
        continue;
      }
      resume = true;
    }
    std::vector<std::string> argv = {vm["launcher"].as<std::string>(), "-np", std::to_string(np)};
    for (const std::string& w : split_words(vm["mpirun-args"].as<std::string>())) argv.push_back(w);
    argv.insert(argv.end(), {self, "run", job});
    if (vm.count("set"))
      for (const std::string& s : vm["set"].as<std::vector<std::string>>())
        argv.insert(argv.end(), {"--set", s});
    for (const auto& [k, v] : p.sets) argv.insert(argv.end(), {"--set", k + "=" + v});
    argv.insert(argv.end(), {"--set", "job.output=" + file});
    if (resume) argv.push_back("--resume");
    if (vm.count("dry-run")) {
      for (const std::string& a : argv) std::cout << a << " ";
      std::cout << "\n";
      continue;
    }
    const std::string log = (fs::path(out) / (p.name + ".log")).string();
    std::cout << "point " << i + 1 << "/" << points.size() << " " << p.name
              << (resume ? " (resuming)" : "") << " ..." << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    const int status = run_logged(argv, log);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ++ran;
    if (code == 0) {
      std::cout << " done in " << std::fixed << std::setprecision(1) << s << " s: " << file
                << std::endl;
      continue;
    }
    std::cout << " FAILED (exit " << code << ") after " << std::fixed << std::setprecision(1) << s
              << " s; " << log << ":\n"
              << last_lines(log, 4) << std::flush;
    failed.push_back(p.name);
    if (code == kExitStopped || stop_requested(nullptr)) {
      std::cout << "sweep stopped by a signal at point " << i + 1 << "; run the same command to "
                << "continue (finished points are skipped, this one resumed)" << std::endl;
      return kExitStopped;
    }
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
