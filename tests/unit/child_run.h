// Runs the code under test in a forked child, for tests of bounds on untrusted input: without
// the bound, the code would allocate without end or loop for ever, and the test must fail, not
// exhaust the machine or hang. The child's address space may grow by `max_bytes` beyond what it
// has mapped, and it is killed after `timeout_s` seconds (a safety net only: no test asserts on
// time). Reports how the code ended and how far its resident memory grew (VmHWM, reset first).
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "common/error.h"

namespace specrun::test {

struct ChildRun {
  bool returned = false;  // fn returned; `value` is what it returned
  std::string value;
  std::string error;         // otherwise: the specrun::Error's message(), or how the child ended
  long peak_growth_kb = -1;  // peak resident memory minus resident memory at the start

  std::string outcome() const { return returned ? "returned " + value : error; }
};

namespace child_run_detail {

inline long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key)));
  return -1;
}

inline void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace child_run_detail

inline ChildRun run_in_child(const std::function<std::string()>& fn, long long max_bytes,
                             unsigned timeout_s = 60) {
  using namespace child_run_detail;
  int fds[2];
  if (::pipe(fds) != 0) return {false, "", "pipe failed", -1};
  const pid_t pid = ::fork();
  if (pid < 0) return {false, "", "fork failed", -1};
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGALRM, SIG_DFL);
    ::alarm(timeout_s);
#if !defined(__SANITIZE_ADDRESS__)
    const long long limit = status_kb("VmSize:") * 1024LL + max_bytes;
    const rlimit r{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
    ::setrlimit(RLIMIT_AS, &r);
#endif
    std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
    const long before = status_kb("VmRSS:");
    char status = 'E';
    std::string text;
    try {
      text = fn();
      status = 'R';
    } catch (const Error& e) {
      text = e.message();
    } catch (const std::exception& e) {
      text = std::string("an exception other than specrun::Error: ") + e.what();
    }
    const long peak = status_kb("VmHWM:") - before;
    write_all(fds[1], std::string(1, status) + std::to_string(peak) + '\n' + text);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    report.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ChildRun run;
  if (report.empty()) {
    run.error = WIFSIGNALED(wstatus) ? std::string("the child was killed by signal ") +
                                           std::to_string(WTERMSIG(wstatus)) +
                                           (WTERMSIG(wstatus) == SIGALRM ? " (timed out)" : "")
                                     : "the child ended without a report";
    return run;
  }
  const std::size_t newline = report.find('\n');
  run.returned = report[0] == 'R';
  run.peak_growth_kb = std::stol(report.substr(1, newline - 1));
  (run.returned ? run.value : run.error) = report.substr(newline + 1);
  return run;
}

}  // namespace specrun::test
