// One decoding step's phase times (io/records.h kPhaseNames). Communication is measured inside
// the communicator and subtracted from the phase it happened in, so that the phases partition
// the step: draft + verify + comm + sample + other = total (other takes the remainder).
// Beside the wall time it keeps the step's CPU row (io/records.h kCpuColumns): the main thread's
// CPU time per phase, split the same way (collectives' CPU time under comm), and the run-queue
// wait of the process's threads over the step (common/host_stats.h). A phase's wall time beyond
// its CPU time is time the rank was off the CPU: descheduled, or blocked.
#pragma once

#include <algorithm>
#include <array>
#include <limits>

#include "common/activity.h"
#include "common/clock.h"
#include "common/host_stats.h"
#include "dist/communicator.h"
#include "io/records.h"

namespace specrun {

class StepTimer {
 public:
  // comm: the communicator whose comm_seconds() and comm_cpu_seconds() count the step's
  // collectives; wait: the process's run-queue clock, read once per step at finish() (the wait
  // since the previous step's; null: the wait column is NaN).
  StepTimer(const Communicator& comm, ThreadWaitClock* wait)
      : comm_(comm),
        wait_(wait),
        start_(SteadyClock::now()),
        comm_start_(comm.comm_seconds()),
        comm_cpu_start_(comm.comm_cpu_seconds()),
        cpu_start_(thread_cpu_seconds()) {}

  // Starts timing `phase`, which is also this process's activity (common/activity.h) until end().
  void begin(Phase phase) {
    phase_ = phase;
    set_activity(kPhaseNames[phase]);
    t_ = SteadyClock::now();
    c_ = comm_.comm_seconds();
    cc_ = comm_.comm_cpu_seconds();
    cpu_ = thread_cpu_seconds();
  }
  void end() {
    const double wall = seconds_since(t_);
    const double comm = comm_.comm_seconds() - c_;
    const double comm_cpu = comm_.comm_cpu_seconds() - cc_;
    ms_[phase_] += 1e3 * std::max(0.0, wall - comm);
    cpu_ms_[phase_] += 1e3 * std::max(0.0, thread_cpu_seconds() - cpu_ - comm_cpu);
    set_activity(nullptr);
  }
  // Appends the step's row of milliseconds (kNumPhases) to `out` and its CPU row
  // (kNumCpuColumns) to `cpu_out`.
  template <class Out>
  void finish(Out& out, Out& cpu_out) {
    ms_[kPhaseComm] = 1e3 * (comm_.comm_seconds() - comm_start_);
    ms_[kPhaseTotal] = 1e3 * seconds_since(start_);
    const double known = ms_[kPhaseDraft] + ms_[kPhaseVerify] + ms_[kPhaseSample] + ms_[kPhaseComm];
    ms_[kPhaseOther] = std::max(0.0, ms_[kPhaseTotal] - known);
    for (int i = 0; i < kNumPhases; ++i) out.push_back(static_cast<float>(ms_[i]));

    cpu_ms_[kPhaseComm] = 1e3 * (comm_.comm_cpu_seconds() - comm_cpu_start_);
    cpu_ms_[kPhaseTotal] = 1e3 * (thread_cpu_seconds() - cpu_start_);
    const double known_cpu =
        cpu_ms_[kPhaseDraft] + cpu_ms_[kPhaseVerify] + cpu_ms_[kPhaseSample] + cpu_ms_[kPhaseComm];
    cpu_ms_[kPhaseOther] = std::max(0.0, cpu_ms_[kPhaseTotal] - known_cpu);
    for (int i = 0; i < kNumPhases; ++i) cpu_out.push_back(static_cast<float>(cpu_ms_[i]));
    cpu_out.push_back(wait_ != nullptr ? static_cast<float>(wait_->since_last_ms())
                                       : std::numeric_limits<float>::quiet_NaN());
  }

 private:
  const Communicator& comm_;
  ThreadWaitClock* wait_;
  SteadyClock::time_point start_, t_;
  double comm_start_, comm_cpu_start_, cpu_start_;
  double c_ = 0, cc_ = 0, cpu_ = 0;
  Phase phase_ = kPhaseOther;
  std::array<double, kNumPhases> ms_{}, cpu_ms_{};
};

}  // namespace specrun
