// Host load in a comparison of two runs (`specrun compare`, docs/analysis.md "Host load"): how
// busy each run's host was, whether one ran on a busier host, and which timing changes that
// explains better than the code does. Pure functions on ModeData (tests build it by hand).
//
// Evidence of a busier host comes from what the result file records per step and batch (schema
// version 3): the run-queue wait of the ranks' threads per step (time they were runnable but had
// no CPU), and the host snapshots (other processes using at least half a CPU, CPU steal). When
// NEW ran on a busier host, a phase that got slower is attributed to the host unless its main
// thread's CPU time grew too, by at least 0.4 of the wall-time growth and by more than the
// threshold: a busy neighbour keeps a rank off the CPU (wall grows, CPU barely does), slower
// code keeps it on (both grow). Communication and "other" (waits for partners, bookkeeping) are
// then the host's; the step total and tokens/s are when no compute phase is the code's; the
// speedup always is (host load weighs unequally on the two modes it pairs). Files without these
// records (schema 1 and 2) are never reattributed.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace specrun {

// One mode of one run: means over its steps, and over its ranks' batch snapshots.
struct HostLoad {
  double wait_ms = 0;     // run-queue wait per step, ms (the mean over the ranks)
  double busy = 0;        // other busy processes per rank snapshot
  double load1 = 0;       // 1-minute load average
  double steal_pct = 0;   // CPU steal, percent of all CPUs
  bool recorded = false;  // the file has the records (else all of the above are 0)
  // The busy processes seen most often, "sha256sum (4242) 99%", at most 3.
  std::vector<std::string> busy_names;
  // The GPU (CUDA runs: schema 4 snapshots with NVML readings; else gpu = false and zeros):
  // means over the snapshots, the share of snapshots with a slowdown reason, the largest ECC
  // count and the XID events summed over the snapshots.
  bool gpu = false;
  double gpu_sm_mhz = 0, gpu_mem_mhz = 0, gpu_temp_c = 0, gpu_power_w = 0;
  double gpu_slowdown_share = 0, gpu_ecc = 0, gpu_xid = 0;
};
HostLoad summarize_host(const ModeData& data);

// "host (speculative): run-queue wait 2.5 ms/step, busy processes 0.0, load 1.1, steal 0.0%
// [, busy: sha256sum (4242)]", one line per mode with the records; "" when none has them.
std::string format_hosts(const std::vector<ModeData>& modes);
// The GPU part of a HostLoad as JSON: {sm_mhz, mem_mhz, temp_c, power_w, slowdown_share,
// ecc_uncorrected, xid}.
nlohmann::json gpu_to_json(const HostLoad& h);
// The same as JSON: mode -> {run_queue_wait_ms, busy_processes, load1, steal_pct, busy_names,
// gpu (where recorded)}.
nlohmann::json hosts_to_json(const std::vector<ModeData>& modes);

struct HostChange {
  std::string mode;
  HostLoad base, next;
  Interval wait_relative;    // run-queue wait per step, NEW / BASE - 1, bootstrap 95% interval
  bool next_busier = false;  // NEW ran on a busier host than BASE
  bool base_busier = false;  // BASE ran on a busier host than NEW
  // The GPU ran slower in one run: its SM clock lower by more than the threshold, a slowdown
  // reason in a quarter more of the snapshots, or XID errors; gpu_clock_ratio = the slower
  // run's SM clock against the other's (< 1), 1 when not recorded.
  bool gpu_slower = false;
  double gpu_clock_ratio = 1;
  // The CPU side (run-queue wait, busy processes, steal) made a run busier, not the GPU alone.
  bool cpu_busier = false;
  // "run-queue wait 2.6 -> 26.0 ms/step, busy processes 0.0 -> 1.0 (sha256sum (4242) 99%)".
  std::string describe() const;
};

// A host is busier when its run-queue wait per step grew by more than threshold_pct with
// confidence and by more than min_abs_ms, or it had half a busy process more per snapshot, or
// its CPU steal grew by 5 points, or its GPU ran slower (gpu_slower above).
HostChange compare_host(const std::string& mode, const ModeData& base, const ModeData& next,
                        double threshold_pct, double min_abs_ms, int resamples, std::uint64_t seed);

// Whether the change of compute phase `phase` (draft, verify, sample) between the runs is what a
// busier host does rather than the code. The code's is a change whose main-thread CPU time per
// step moved by at least 0.4 times as much as its wall time, by more than threshold_pct of its BASE
// wall time (and min_abs_ms), and, relative to its own CPU time, by more than three times as much
// as a reference phase of other code did (plus the threshold): contention inflates the CPU time
// of all compute alike (caches, memory bandwidth, threads spinning at barriers for a descheduled
// partner), slower code only its own. ref_base/ref_next: that reference phase (`ref_phase` of
// the given modes; nullptr when the job has none, e.g. baseline only). False (the code's) when
// either run lacks CPU rows.
// Whether a GPU clock ratio (HostChange::gpu_clock_ratio, < 1 for the slower run) explains a
// compute phase's relative change `relative` (NEW / BASE - 1, toward the slower run): device
// work slows at most as the clock does, so up to 1 / ratio - 1 plus the threshold.
bool gpu_explains_change(double relative, double gpu_clock_ratio, double threshold_pct);

bool host_explains_phase(const ModeData& base, const ModeData& next, int phase,
                         const ModeData* ref_base, const ModeData* ref_next, int ref_phase,
                         double threshold_pct, double min_abs_ms);

}  // namespace specrun
