// What else the host was doing while a rank ran: the load, CPU steal and iowait, clocks, the
// cgroup's CPU limit, other busy processes (HostMonitor, sampled at the start of a job and after
// every batch), and, per decoding step, how long this process's threads were runnable but
// waited for a CPU (ThreadWaitClock, from the scheduler's /proc/<pid>/task/<tid>/schedstat).
// `specrun compare` uses them to tell a slowdown caused by a competing process from one caused
// by the code (docs/analysis.md, "Host load"). Linux /proc and /sys only; every reader returns
// NaN (or an empty value) for a file it cannot read, never throws.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace specrun {

// The fields of one host snapshot, in this order (the result file's /<mode>/host last axis).
//   load1            1-minute load average (/proc/loadavg)
//   procs_running    runnable tasks on the host, this rank included (/proc/stat)
//   cpu_busy_pct     non-idle share of all CPUs since the previous snapshot, percent
//   steal_pct        time the hypervisor ran something else, percent of all CPUs
//   iowait_pct       idle with I/O outstanding, percent of all CPUs
//   freq_mhz         mean current frequency of the CPUs this rank may run on (NaN: unreadable)
//   busy_processes   processes outside the job that used >= half a CPU since the previous snapshot
//   cpus_allowed     CPUs in this rank's affinity mask
//   cpu_limit        the cgroup's CPU limit in CPUs (cpu.max / cfs quota; NaN: no limit)
// and, on the CUDA backend, the rank's GPU through NVML (NaN on the CPU backend, or where NVML
// cannot read it; kernels/cuda/device_info.h GpuSampler):
//   gpu_sm_mhz       current SM clock
//   gpu_mem_mhz      current memory clock
//   gpu_temp_c       GPU temperature, degrees C
//   gpu_power_w      board power draw, W
//   gpu_slowdown     the clock event reasons that slow the GPU down, as NVML's bit mask (software
//                    power cap 0x4, hardware slowdown 0x8, software thermal 0x20, hardware
//                    thermal 0x40, power brake 0x80; idle, application clocks and sync boost are
//                    left out); 0: running at the clocks it chose
//   gpu_ecc_uncorrected  volatile uncorrected ECC errors since the driver loaded
//   gpu_xid          XID critical error events since the previous snapshot
// Result schema 3 files have the first 9 fields only (the reader fills the rest with NaN).
inline constexpr std::array<const char*, 16> kHostFields = {
    "load1",       "procs_running", "cpu_busy_pct",        "steal_pct",
    "iowait_pct",  "freq_mhz",      "busy_processes",      "cpus_allowed",
    "cpu_limit",   "gpu_sm_mhz",    "gpu_mem_mhz",         "gpu_temp_c",
    "gpu_power_w", "gpu_slowdown",  "gpu_ecc_uncorrected", "gpu_xid"};
inline constexpr int kNumHostFields = static_cast<int>(kHostFields.size());
// The fields of result schema 3 (host only).
inline constexpr int kNumHostFieldsV3 = 9;
enum HostField : int {
  kHostLoad1,
  kHostProcsRunning,
  kHostCpuBusy,
  kHostSteal,
  kHostIowait,
  kHostFreq,
  kHostBusyProcesses,
  kHostCpusAllowed,
  kHostCpuLimit,
  kGpuSmMhz,
  kGpuMemMhz,
  kGpuTempC,
  kGpuPowerW,
  kGpuSlowdown,
  kGpuEccUncorrected,
  kGpuXid
};
// The NVML clock event reasons counted in gpu_slowdown (nvml.h nvmlClocksEventReason*).
inline constexpr unsigned long long kGpuSlowdownMask = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

struct HostSnapshot {
  std::array<double, kNumHostFields> values{};
  // The busy processes, "name (pid) 97%", busiest first, at most 5.
  std::vector<std::string> busy;
};

// /proc/stat's aggregate "cpu" line, in clock ticks.
struct CpuTimes {
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                steal = 0;
  std::uint64_t total() const {
    return user + nice + system + idle + iowait + irq + softirq + steal;
  }
  bool valid = false;
};

// Pure parsers, tested on literal text.
CpuTimes parse_proc_stat_cpu(const std::string& proc_stat);
// "procs_running N" of /proc/stat; -1 when absent.
int parse_procs_running(const std::string& proc_stat);
// First field of /proc/loadavg; NaN when unparsable.
double parse_loadavg(const std::string& loadavg);
// cgroup v2 cpu.max ("max 100000" -> NaN, "150000 100000" -> 1.5).
double parse_cpu_max(const std::string& cpu_max);
// Second field of a schedstat line ("<on-cpu ns> <run-queue wait ns> <slices>"), in ns; -1 when
// unparsable. Allocates nothing (it runs on every decoding step).
long long parse_schedstat_wait_ns(std::string_view schedstat);
// /proc/<pid>/stat: the command name (field 2, in parentheses, may hold spaces and parentheses)
// and utime + stime in ticks (fields 14 and 15). False when unparsable.
bool parse_pid_stat(const std::string& stat, std::string& comm, std::uint64_t& cpu_ticks);
// /proc/<pid>/stat: the state letter (field 3: R, S, D, T stopped, t traced, Z zombie, ...) and
// the start time in clock ticks after boot (field 22), which with the pid names one process.
// False when unparsable.
bool parse_pid_state(const std::string& stat, char& state, std::uint64_t& start_ticks);

// Percentages of one interval between two /proc/stat samples: busy, steal, iowait.
std::array<double, 3> cpu_shares(const CpuTimes& before, const CpuTimes& after);

// Samples the host. sample() compares with the previous call (the first compares with the
// construction), so each snapshot's percentages and busy processes cover the interval since the
// last one. `job_pids`: the job's processes on this host (other ranks), never counted as busy.
class HostMonitor {
 public:
  explicit HostMonitor(std::set<long> job_pids = {});
  HostSnapshot sample();

 private:
  std::map<long, std::pair<std::string, std::uint64_t>> scan_processes() const;

  std::set<long> job_pids_;
  CpuTimes cpu_;
  std::map<long, std::pair<std::string, std::uint64_t>> procs_;  // pid -> (name, ticks)
  double since_ = 0;                                             // steady seconds at last sample
};

// Total run-queue wait of this process's threads (ms since an arbitrary origin), read from
// schedstat files kept open between calls. refresh() re-lists the threads (call it where
// threads may have started, e.g. before a batch); now_ms() is a few pread calls. Returns NaN
// where schedstat is not available (kernel without CONFIG_SCHED_INFO).
class ThreadWaitClock {
 public:
  ThreadWaitClock();
  ~ThreadWaitClock();
  ThreadWaitClock(const ThreadWaitClock&) = delete;
  ThreadWaitClock& operator=(const ThreadWaitClock&) = delete;
  void refresh();
  double now_ms() const;
  // The wait since the previous call (or refresh()): one read per decoding step.
  double since_last_ms();
  // Threads whose wait is read (those alive at the last refresh()).
  int threads() const { return static_cast<int>(fds_.size()); }

 private:
  void close_all();
  std::vector<int> fds_;
  // Each thread's last value: a thread that has exited keeps it, so the total never goes back.
  mutable std::vector<double> last_ms_;
  double mark_ms_ = 0;  // the total at the previous since_last_ms() or refresh()
};

}  // namespace specrun
