// One decoding step's phase times (io/records.h kPhaseNames). Communication is measured inside
// the communicator and subtracted from the phase it happened in, so that the phases partition
// the step: draft + verify + comm + sample + other = total (other takes the remainder).
#pragma once

#include <algorithm>
#include <array>

#include "common/activity.h"
#include "common/clock.h"
#include "dist/communicator.h"
#include "io/records.h"

namespace specrun {

class StepTimer {
 public:
  // comm: the communicator whose comm_seconds() counts the step's collectives.
  explicit StepTimer(const Communicator& comm)
      : comm_(comm), start_(SteadyClock::now()), comm_start_(comm.comm_seconds()) {}

  // Starts timing `phase`, which is also this process's activity (common/activity.h) until end().
  void begin(Phase phase) {
    phase_ = phase;
    set_activity(kPhaseNames[phase]);
    t_ = SteadyClock::now();
    c_ = comm_.comm_seconds();
  }
  void end() {
    const double wall = seconds_since(t_);
    const double comm = comm_.comm_seconds() - c_;
    ms_[phase_] += 1e3 * std::max(0.0, wall - comm);
    set_activity(nullptr);
  }
  // The step's row of milliseconds, appended to `out`.
  template <class Out>
  void finish(Out& out) {
    ms_[kPhaseComm] = 1e3 * (comm_.comm_seconds() - comm_start_);
    ms_[kPhaseTotal] = 1e3 * seconds_since(start_);
    const double known = ms_[kPhaseDraft] + ms_[kPhaseVerify] + ms_[kPhaseSample] + ms_[kPhaseComm];
    ms_[kPhaseOther] = std::max(0.0, ms_[kPhaseTotal] - known);
    for (int i = 0; i < kNumPhases; ++i) out.push_back(static_cast<float>(ms_[i]));
  }

 private:
  const Communicator& comm_;
  SteadyClock::time_point start_, t_;
  double comm_start_, c_ = 0;
  Phase phase_ = kPhaseOther;
  std::array<double, kNumPhases> ms_{};
};

}  // namespace specrun
