#include "common/host_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>

namespace specrun {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whole /proc file through one open/read/close, for files read every batch.
std::string read_proc(const char* path) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

double steady_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<int> allowed_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// Mean current frequency of `cpus`: cpufreq's scaling_cur_freq, else /proc/cpuinfo "cpu MHz".
double mean_freq_mhz(const std::vector<int>& cpus) {
  double sum = 0;
  int n = 0;
  for (int c : cpus) {
    const std::string t = read_proc(
        ("/sys/devices/system/cpu/cpu" + std::to_string(c) + "/cpufreq/scaling_cur_freq").c_str());
    if (t.empty()) break;
    sum += std::atof(t.c_str()) / 1000.0;
    ++n;
  }
  if (n > 0) return sum / n;
  std::istringstream in(read_proc("/proc/cpuinfo"));
  std::string line;
  int processor = -1;
  while (std::getline(in, line)) {
    if (line.rfind("processor", 0) == 0) {
      processor = std::atoi(line.substr(line.find(':') + 1).c_str());
    } else if (line.rfind("cpu MHz", 0) == 0 &&
               (cpus.empty() || std::find(cpus.begin(), cpus.end(), processor) != cpus.end())) {
      sum += std::atof(line.substr(line.find(':') + 1).c_str());
      ++n;
    }
  }
  return n > 0 ? sum / n : kNaN;
}

// This process's cgroup (v2: the "0::" line of /proc/self/cgroup), its CPU limit in CPUs.
double cgroup_cpu_limit() {
  std::istringstream in(read_small_file("/proc/self/cgroup"));
  std::string line, v2, v1;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
    const auto colon = line.find(':');
    const auto second = line.find(':', colon + 1);
    if (colon != std::string::npos && second != std::string::npos) {
      const std::string controllers = line.substr(colon + 1, second - colon - 1);
      if (controllers.find("cpu") != std::string::npos &&
          controllers.find("cpuset") == std::string::npos)
        v1 = line.substr(second + 1);
    }
  }
  // v2: walk up from the process's cgroup; the tightest limit on the path applies.
  double limit = kNaN;
  if (!v2.empty() || v1.empty()) {
    std::string dir = v2.empty() ? "/" : v2;
    for (;;) {
      const std::string t = read_small_file("/sys/fs/cgroup" + dir + "/cpu.max");
      const double l = t.empty() ? kNaN : parse_cpu_max(t);
      if (!std::isnan(l) && (std::isnan(limit) || l < limit)) limit = l;
      if (dir == "/" || dir.empty()) break;
      dir = dir.substr(0, dir.find_last_of('/'));
      if (dir.empty()) dir = "/";
    }
    if (!std::isnan(limit) || !v2.empty()) return limit;
  }
  for (const std::string& base :
       {std::string("/sys/fs/cgroup/cpu,cpuacct"), std::string("/sys/fs/cgroup/cpu")}) {
    const std::string q = read_small_file(base + v1 + "/cpu.cfs_quota_us");
    const std::string p = read_small_file(base + v1 + "/cpu.cfs_period_us");
    if (q.empty() || p.empty()) continue;
    const double quota = std::atof(q.c_str()), period = std::atof(p.c_str());
    return quota > 0 && period > 0 ? quota / period : kNaN;
  }
  return kNaN;
}

}  // namespace

CpuTimes parse_proc_stat_cpu(const std::string& proc_stat) {
  CpuTimes t;
  std::istringstream in(proc_stat);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream f(line.substr(4));
    f >> t.user >> t.nice >> t.system >> t.idle >> t.iowait >> t.irq >> t.softirq >> t.steal;
    t.valid = !f.fail();
    if (!t.valid) t = CpuTimes{};
    break;
  }
  return t;
}

int parse_procs_running(const std::string& proc_stat) {
  const auto at = proc_stat.find("\nprocs_running ");
  if (at == std::string::npos) return -1;
  return std::atoi(proc_stat.c_str() + at + 15);
}

double parse_loadavg(const std::string& loadavg) {
  char* end = nullptr;
  const double v = std::strtod(loadavg.c_str(), &end);
  return end == loadavg.c_str() ? kNaN : v;
}

double parse_cpu_max(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return kNaN;
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  return end == quota.c_str() || q <= 0 ? kNaN : q / period;
}

long long parse_schedstat_wait_ns(std::string_view schedstat) {
  auto skip_spaces = [&](std::size_t at) {
    while (at < schedstat.size() && (schedstat[at] == ' ' || schedstat[at] == '\t')) ++at;
    return at;
  };
  long long on_cpu = 0, wait = 0;
  std::size_t at = skip_spaces(0);
  auto r = std::from_chars(schedstat.data() + at, schedstat.data() + schedstat.size(), on_cpu);
  if (r.ec != std::errc() || r.ptr == schedstat.data() + at) return -1;
  at = skip_spaces(static_cast<std::size_t>(r.ptr - schedstat.data()));
  r = std::from_chars(schedstat.data() + at, schedstat.data() + schedstat.size(), wait);
  if (r.ec != std::errc() || r.ptr == schedstat.data() + at) return -1;
  return wait;
}

bool parse_pid_stat(const std::string& stat, std::string& comm, std::uint64_t& cpu_ticks) {
  const auto open = stat.find('(');
  const auto close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  comm = stat.substr(open + 1, close - open - 1);
  // After ") ": field 3 (state) is the first; utime and stime are fields 14 and 15.
  std::istringstream in(stat.substr(close + 1));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 13; ++i)
    if (!(in >> field)) return false;
  if (!(in >> utime >> stime)) return false;
  cpu_ticks = utime + stime;
  return true;
}

bool parse_pid_state(const std::string& stat, char& state, std::uint64_t& start_ticks) {
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return false;
  // After ") ": field 3 (state) is the first; the start time is field 22.
  std::istringstream in(stat.substr(close + 1));
  std::string field;
  if (!(in >> field) || field.size() != 1) return false;
  state = field[0];
  for (int i = 4; i <= 21; ++i)
    if (!(in >> field)) return false;
  return static_cast<bool>(in >> start_ticks);
}

std::array<double, 3> cpu_shares(const CpuTimes& before, const CpuTimes& after) {
  if (!before.valid || !after.valid || after.total() <= before.total()) return {kNaN, kNaN, kNaN};
  const double total = static_cast<double>(after.total() - before.total());
  auto d = [](std::uint64_t a, std::uint64_t b) { return a >= b ? static_cast<double>(a - b) : 0; };
  const double idle = d(after.idle, before.idle) + d(after.iowait, before.iowait);
  return {100.0 * (total - idle) / total, 100.0 * d(after.steal, before.steal) / total,
          100.0 * d(after.iowait, before.iowait) / total};
}

HostMonitor::HostMonitor(std::set<long> job_pids)
    : job_pids_(std::move(job_pids)),
      cpu_(parse_proc_stat_cpu(read_proc("/proc/stat"))),
      procs_(scan_processes()),
      since_(steady_seconds()) {}

std::map<long, std::pair<std::string, std::uint64_t>> HostMonitor::scan_processes() const {
  std::map<long, std::pair<std::string, std::uint64_t>> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  const long self = static_cast<long>(::getpid());
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == self || job_pids_.count(pid)) continue;
    const std::string stat = read_proc(("/proc/" + std::string(e->d_name) + "/stat").c_str());
    std::string comm;
    std::uint64_t ticks = 0;
    if (parse_pid_stat(stat, comm, ticks)) out[pid] = {std::move(comm), ticks};
  }
  ::closedir(dir);
  return out;
}

HostSnapshot HostMonitor::sample() {
  HostSnapshot s;
  auto& v = s.values;
  const std::string stat = read_proc("/proc/stat");
  const CpuTimes now = parse_proc_stat_cpu(stat);
  const std::array<double, 3> shares = cpu_shares(cpu_, now);
  cpu_ = now;
  v[kHostLoad1] = parse_loadavg(read_proc("/proc/loadavg"));
  const int running = parse_procs_running(stat);
  v[kHostProcsRunning] = running < 0 ? kNaN : running;
  v[kHostCpuBusy] = shares[0];
  v[kHostSteal] = shares[1];
  v[kHostIowait] = shares[2];
  const std::vector<int> cpus = allowed_cpus();
  v[kHostFreq] = mean_freq_mhz(cpus);
  v[kHostCpusAllowed] = cpus.empty() ? kNaN : static_cast<double>(cpus.size());
  v[kHostCpuLimit] = cgroup_cpu_limit();
  for (int f = kGpuSmMhz; f < kNumHostFields; ++f) v[f] = kNaN;  // the backend's to fill

  // Busy processes: at least half a CPU over the interval.
  const double t = steady_seconds();
  const double elapsed = t - since_;
  since_ = t;
  auto procs = scan_processes();
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::vector<std::pair<double, std::string>> busy;
  for (const auto& [pid, info] : procs) {
    auto it = procs_.find(pid);
    if (it == procs_.end() || elapsed <= 0 || hz <= 0) continue;
    const double used = static_cast<double>(info.second - std::min(info.second, it->second.second));
    const double share = used / hz / elapsed;
    if (share >= 0.5)
      busy.emplace_back(share, info.first + " (" + std::to_string(pid) + ") " +
                                   std::to_string(static_cast<int>(std::lround(100 * share))) +
                                   "%");
  }
  procs_ = std::move(procs);
  std::sort(busy.begin(), busy.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  v[kHostBusyProcesses] = elapsed > 0 ? static_cast<double>(busy.size()) : kNaN;
  for (std::size_t i = 0; i < busy.size() && i < 5; ++i) s.busy.push_back(busy[i].second);
  return s;
}

ThreadWaitClock::ThreadWaitClock() {
  refresh();
}

ThreadWaitClock::~ThreadWaitClock() {
  close_all();
}

void ThreadWaitClock::close_all() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
  last_ms_.clear();
}

void ThreadWaitClock::refresh() {
  close_all();
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = "/proc/self/task/" + std::string(e->d_name) + "/schedstat";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) fds_.push_back(fd);
  }
  ::closedir(dir);
  last_ms_.assign(fds_.size(), 0.0);
  // Each thread's wait so far, so that a thread that exits keeps what it had.
  mark_ms_ = now_ms();
}

double ThreadWaitClock::since_last_ms() {
  const double now = now_ms();
  const double d = now - mark_ms_;
  mark_ms_ = now;
  return d;
}

double ThreadWaitClock::now_ms() const {
  if (fds_.empty()) return kNaN;
  double total = 0;
  bool any = false;
  char buf[128];
  for (std::size_t i = 0; i < fds_.size(); ++i) {
    const ssize_t n = ::pread(fds_[i], buf, sizeof buf - 1, 0);
    if (n > 0) {
      buf[n] = '\0';
      const long long ns =
          parse_schedstat_wait_ns(std::string_view(buf, static_cast<std::size_t>(n)));
      if (ns >= 0) {
        last_ms_[i] = 1e-6 * static_cast<double>(ns);
        any = true;
      }
    }
    total += last_ms_[i];
  }
  return any ? total : kNaN;
}

}  // namespace specrun
