// The host readers of common/host_stats.h: the /proc and cgroup parsers on literal text, and
// the live monitors on this machine: a busy child process is seen by name and pid, and threads
// that compete for one CPU accumulate run-queue wait.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "common/host_stats.h"

using namespace specrun;

namespace {

void spin_for(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  volatile unsigned x = 0;
  while (std::chrono::steady_clock::now() < until) x = x + 1;
}

}  // namespace

TEST(HostStats, ParsesProcFiles) {
  const std::string stat =
      "cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 50 2 25 500 10 0 1 1 0 0\nctxt 99\n"
      "procs_running 3\nprocs_blocked 0\n";
  const CpuTimes t = parse_proc_stat_cpu(stat);
  ASSERT_TRUE(t.valid);
  EXPECT_EQ(t.user, 100u);
  EXPECT_EQ(t.idle, 1000u);
  EXPECT_EQ(t.iowait, 20u);
  EXPECT_EQ(t.steal, 3u);
  EXPECT_EQ(t.total(), 1181u);
  EXPECT_FALSE(parse_proc_stat_cpu("intr 5\n").valid);
  EXPECT_EQ(parse_procs_running(stat), 3);
  EXPECT_EQ(parse_procs_running("cpu 1 2\n"), -1);
  EXPECT_DOUBLE_EQ(parse_loadavg("0.52 0.58 0.59 2/345 12345\n"), 0.52);
  EXPECT_TRUE(std::isnan(parse_loadavg("")));
  EXPECT_TRUE(std::isnan(parse_cpu_max("max 100000\n")));
  EXPECT_DOUBLE_EQ(parse_cpu_max("150000 100000\n"), 1.5);
  EXPECT_TRUE(std::isnan(parse_cpu_max("junk")));
  EXPECT_EQ(parse_schedstat_wait_ns("123456 7890 12\n"), 7890);
  EXPECT_EQ(parse_schedstat_wait_ns("x"), -1);

  std::string comm;
  std::uint64_t ticks = 0;
  ASSERT_TRUE(parse_pid_stat("4242 (my (odd) proc) R 1 2 3 4 5 6 7 8 9 10 200 300 0 0 20 0 1 0 5",
                             comm, ticks));
  EXPECT_EQ(comm, "my (odd) proc");
  EXPECT_EQ(ticks, 500u);
  EXPECT_FALSE(parse_pid_stat("4242 (short) R 1", comm, ticks));
}

TEST(HostStats, ParsesStateAndStartTimeOfAPidStat) {
  char state = '?';
  std::uint64_t start = 0;
  // Fields 3..22: the state, then 18 fields, then the start time.
  ASSERT_TRUE(parse_pid_state(
      "4242 (my (odd) proc) T 1 2 3 4 5 6 7 8 9 10 200 300 0 0 20 0 1 0 98765 4096 12", state,
      start));
  EXPECT_EQ(state, 'T');
  EXPECT_EQ(start, 98765u);
  EXPECT_FALSE(parse_pid_state("4242 (short) R 1 2", state, start));
  EXPECT_FALSE(parse_pid_state("no parenthesis", state, start));
  // This process, read from /proc: running, started after boot.
  std::ifstream in("/proc/self/stat");
  const std::string self((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(parse_pid_state(self, state, start)) << self;
  EXPECT_EQ(state, 'R');
  EXPECT_GT(start, 0u);
}

TEST(HostStats, CpuSharesOfAnInterval) {
  CpuTimes a, b;
  a.valid = b.valid = true;
  a.user = 100, a.idle = 900;
  b.user = 150, b.idle = 930, b.steal = 10, b.iowait = 10;  // 100 ticks: 50 busy + 10 steal
  const auto s = cpu_shares(a, b);
  EXPECT_DOUBLE_EQ(s[0], 60.0);  // everything but idle and iowait
  EXPECT_DOUBLE_EQ(s[1], 10.0);
  EXPECT_DOUBLE_EQ(s[2], 10.0);
  EXPECT_TRUE(std::isnan(cpu_shares(b, a)[0]));  // time going backwards: not a share
}

// CPU ticks (utime + stime) a process has used, read from /proc/<pid>/stat independently of
// HostMonitor; -1 when unreadable.
long process_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  long utime = -1, stime = -1;
  for (int i = 3; i <= 15 && fields >> f; ++i) {  // fields 14 and 15: utime, stime
    if (i == 14) utime = std::stol(f);
    if (i == 15) stime = std::stol(f);
  }
  return utime < 0 || stime < 0 ? -1 : utime + stime;
}

TEST(HostStats, MonitorSeesABusyProcessByNameAndPid) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // busy for longer than the test looks
    spin_for(std::chrono::milliseconds(10000));
    _exit(0);
  }
  // A process is judged over the interval between two snapshots that both saw it. On a loaded
  // host the child may get less than the half CPU that makes a process busy in an interval: the
  // child's own ticks say what it got, and an interval where it had most of a CPU must name it
  // (among the five busiest listed, so with at most four others busier).
  HostMonitor monitor;
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  HostSnapshot s;
  bool found = false, judged = false;
  double got = 0;
  for (int interval = 0; interval < 8 && !found; ++interval) {
    const long before = process_ticks(child);
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    s = monitor.sample();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    got = (process_ticks(child) - before) / hz / seconds;
    for (const std::string& b : s.busy)
      found = found || b.find("(" + std::to_string(child) + ")") != std::string::npos;
    if (interval == 0) continue;  // the first interval starts at the monitor's construction
    if (got >= 0.8 && s.busy.size() < 5) {
      judged = true;
      EXPECT_TRUE(found) << "the child used " << got
                         << " CPU; busy: " << (s.busy.empty() ? "(none)" : s.busy[0]);
      break;
    }
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (!found && !judged)
    GTEST_SKIP() << "the host is too busy: the spinning child got " << got
                 << " CPU in the last interval";
  EXPECT_GE(s.values[kHostBusyProcesses], 1.0);
  EXPECT_TRUE(std::isfinite(s.values[kHostLoad1]));
  EXPECT_GE(s.values[kHostCpusAllowed], 1.0);
  EXPECT_GE(s.values[kHostCpuBusy], 0.0);
}

TEST(HostStats, ThreadsCompetingForOneCpuWaitInTheRunQueue) {
  ThreadWaitClock clock;
  if (std::isnan(clock.now_ms())) GTEST_SKIP() << "no schedstat in this kernel: nothing to test";
  cpu_set_t old_set, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof old_set, &old_set), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &old_set)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);  // threads made now inherit it
  std::atomic<bool> stop{false};
  std::thread rival([&] {
    while (!stop) spin_for(std::chrono::milliseconds(1));
  });
  clock.refresh();  // the rival is a thread of this process: its wait counts too
  const double before = clock.now_ms();
  spin_for(std::chrono::milliseconds(300));
  const double after = clock.now_ms();
  stop = true;
  rival.join();
  sched_setaffinity(0, sizeof old_set, &old_set);
  // Two busy threads on one CPU: each waits about half the time.
  EXPECT_GT(after - before, 50.0) << "run-queue wait over 300 ms of contention";
  EXPECT_GE(clock.now_ms(), after);  // never goes back, also after a thread has exited
}
