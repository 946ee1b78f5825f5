#include "common/isolated.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define SPECRUN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPECRUN_SANITIZED 1
#endif
#endif
#if defined(SPECRUN_SANITIZED)
#include <sanitizer/common_interface_defs.h>
#endif

namespace specrun {

namespace {

// The child's report on the pipe: one status byte, then for kThrew the exit code, message and
// location of the specrun::Error, for kReturned the returned string; fields NUL-separated.
constexpr char kReturned = 'R';
constexpr char kThrew = 'E';
constexpr int kChildDone = 0;
constexpr int kChildFailed = 97;  // the child could not report (pipe, unexpected exception)

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

#ifndef SPECRUN_SANITIZED
long long mapped_bytes() {
  std::ifstream in("/proc/self/statm");
  long long pages = 0;
  if (!(in >> pages)) return 0;
  return pages * static_cast<long long>(::sysconf(_SC_PAGESIZE));
}
#endif

[[noreturn]] void child(int fd, const std::function<std::string()>& read, double timeout_s,
                        long long memory_bytes) {
  // The parent's handlers (libFuzzer's timer, our stop handlers, Open MPI's backtrace printer for
  // crashes) do not apply here: the parent reports how the child ended.
  for (int sig : {SIGALRM, SIGTERM, SIGINT, SIGUSR1, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    ::signal(sig, SIG_DFL);
  itimerval timer{};
  timer.it_value.tv_sec = static_cast<time_t>(timeout_s);
  timer.it_value.tv_usec = static_cast<suseconds_t>((timeout_s - std::floor(timeout_s)) * 1e6);
  if (timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) timer.it_value.tv_usec = 1;
  ::setitimer(ITIMER_REAL, &timer, nullptr);
#ifndef SPECRUN_SANITIZED
  const long long limit = mapped_bytes() + memory_bytes;
  rlimit r{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
  ::setrlimit(RLIMIT_AS, &r);
#else
  (void)memory_bytes;
  // A sanitizer report in the child is the outcome being checked for, not a finding: the
  // parent's death callback (libFuzzer's, which saves the input as a crash) must not run here.
  __sanitizer_set_death_callback(nullptr);
#endif
  std::string report;
  try {
    report = std::string(1, kReturned) + read();
  } catch (const Error& e) {
    report = std::string(1, kThrew) + std::to_string(e.exit_code()) + '\0' + e.message() + '\0' +
             e.where();
  } catch (const std::bad_alloc&) {
    ::_exit(kChildFailed + 1);
  } catch (...) {
    ::_exit(kChildFailed);
  }
  write_all(fd, report);
  ::close(fd);
  ::_exit(kChildDone);
}

std::string describe_status(int status, double timeout_s, double elapsed_s) {
  std::ostringstream out;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGALRM)
      out << "reading it did not finish within " << timeout_s
          << " s (the HDF5 library hangs on some corrupted files; a slow file system: raise "
             "SPECRUN_READ_CHECK_TIMEOUT_S)";
    else if (sig == SIGKILL)
      out << "reading it was killed after " << elapsed_s
          << " s (out of memory: the HDF5 library allocates without bound on some corrupted "
             "files)";
    else
      out << "reading it crashed the HDF5 library (signal " << sig << ", " << strsignal(sig) << ")";
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == kChildFailed + 1) {
    out << "reading it needed more memory than its budget (the HDF5 library allocates without "
           "bound on some corrupted files)";
  } else if (WIFEXITED(status)) {
    out << "reading it failed inside the HDF5 library (exit status " << WEXITSTATUS(status) << ")";
  } else {
    out << "reading it failed (wait status " << status << ")";
  }
  return out.str();
}

}  // namespace

double isolation_timeout_s(const std::string& path) {
  if (const char* env = std::getenv("SPECRUN_READ_CHECK_TIMEOUT_S"); env != nullptr) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end != env && v > 0) return v;
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return 60.0 + (ec ? 0.0 : static_cast<double>(size) / 20e6);
}

long long isolation_memory_bytes(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return (4LL << 30) + (ec ? 0LL : 16LL * static_cast<long long>(size));
}

std::string run_isolated(const std::string& path, const std::string& what,
                         const std::function<std::string()>& read, double timeout_s) {
  if (timeout_s <= 0) timeout_s = isolation_timeout_s(path);
  const long long memory = isolation_memory_bytes(path);
  int fds[2];
  SPEC_CHECK_GEN_(
      ::pipe2(fds, O_CLOEXEC) == 0, "pipe2",
      "cannot create a pipe to check " << what << " " << path << ": " << std::strerror(errno),
      kExitFailure);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    SPEC_CHECK_GEN_(
        false, "fork",
        "cannot start a process to check " << what << " " << path << ": " << std::strerror(err),
        kExitFailure);
  }
  if (pid == 0) {
    ::close(fds[0]);
    child(fds[1], read, timeout_s, memory);
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == kChildDone;
  if (clean && !report.empty() && report[0] == kReturned) return report.substr(1);
  if (clean && !report.empty() && report[0] == kThrew) {
    const size_t a = report.find('\0', 1);
    const size_t b = a == std::string::npos ? a : report.find('\0', a + 1);
    if (b != std::string::npos)
      throw Error(report.substr(a + 1, b - a - 1), report.substr(b + 1),
                  std::atoi(report.substr(1, a - 1).c_str()));
  }
  SPEC_INPUT_FAIL(what << " " << path << " is corrupt or unreadable: "
                       << describe_status(status, timeout_s, elapsed));
}

}  // namespace specrun
