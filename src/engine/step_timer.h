// One decoding step's phase times (io/records.h kPhaseNames). Communication is measured inside
// the communicator and subtracted from the phase it happened in, so that the phases partition
// the step: draft + verify + comm + sample + other = total (other takes the remainder).
// Beside the wall time it keeps the step's CPU row (io/records.h kCpuColumns): the main thread's
// CPU time per phase, split the same way (collectives' CPU time under comm), and the run-queue
// wait of the process's threads over the step (common/host_stats.h). A phase's wall time beyond
// its CPU time is time the rank was off the CPU: descheduled, or blocked.
// On a device (DeviceTimeline), each phase's start and the step's end are also marked on the
// device's queue; DevicePhaseLog turns a batch's marks into one device row per step
// (io/records.h kDeviceColumns) at the batch's end, the only wait it adds, and one pass row
// (kPassColumns: how the phases' forward passes were issued, graphs or launches).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <limits>
#include <vector>

#include "common/activity.h"
#include "common/clock.h"
#include "common/device_timeline.h"
#include "common/host_stats.h"
#include "dist/communicator.h"
#include "io/records.h"

namespace specrun {

// The device marks of a batch's steps (one per phase start, one at each step's end) and their
// resolution into device rows. Not thread-safe; one per decoder.
class DevicePhaseLog {
 public:
  // timeline: the rank's device clock (nullptr: no device; on() is false and nothing is marked).
  explicit DevicePhaseLog(DeviceTimeline* timeline) : timeline_(timeline) {}
  bool on() const { return timeline_ != nullptr; }

  // Room for `steps` steps of up to `phases` phase starts each, so that a step allocates nothing.
  void reserve(std::size_t steps, std::size_t phases) {
    marks_.reserve(steps * (phases + 1));
    elapsed_.reserve(steps * (phases + 1));
    if (timeline_ != nullptr) timeline_->reserve(static_cast<int>(steps * (phases + 1)));
  }
  // True while marks wait for resolve() (a batch that ended by an error leaves some).
  bool pending() const { return !marks_.empty(); }
  void phase(Phase p) { marks_.push_back(Mark{p, timeline_->mark(), timeline_->passes()}); }
  void end_step() { marks_.push_back(Mark{kStepEnd, timeline_->mark(), timeline_->passes()}); }

  // Waits for the device once (DeviceTimeline::read) and appends a row of kNumDeviceColumns per
  // step ended since the last call to `out`: each phase's device time from its start to the next
  // mark, summed when a phase runs twice in a step (the drafter's work after the verdicts),
  // columns of phases the step did not run 0, and the total from the step's first mark to its
  // end; and a row of kNumPassColumns per step to `passes`: the forward passes issued between a
  // phase's start and the next mark, by how they were issued (io/records.h kPassColumns; known on
  // the host, no wait). Marks after the last ended step are dropped.
  void resolve(std::vector<float>& out, std::vector<float>& passes) {
    timeline_->read(elapsed_);
    const auto between = [&](int a, int b) {
      double ms = 0;
      for (int i = a; i < b && i < static_cast<int>(elapsed_.size()); ++i)
        ms += elapsed_[static_cast<std::size_t>(i)];
      return ms;
    };
    std::array<double, kNumDeviceColumns> row{};
    std::array<long long, kNumPassColumns> issued{};
    std::size_t first = 0;  // the current step's first mark
    for (std::size_t i = 0; i < marks_.size(); ++i) {
      const Mark& m = marks_[i];
      if (m.phase == kStepEnd) {
        row[static_cast<std::size_t>(device_column(kPhaseTotal))] =
            between(marks_[first].index, m.index);
        for (double v : row) out.push_back(static_cast<float>(v));
        for (long long v : issued) passes.push_back(static_cast<float>(v));
        row.fill(0);
        issued.fill(0);
        first = i + 1;
      } else if (i + 1 < marks_.size()) {
        if (const int c = device_column(m.phase); c >= 0)
          row[static_cast<std::size_t>(c)] += between(m.index, marks_[i + 1].index);
        const DevicePasses& a = m.passes;
        const DevicePasses& b = marks_[i + 1].passes;
        long long* at = issued.data() + pass_column(m.phase);
        at[0] += b.replayed - a.replayed;
        at[1] += b.captured - a.captured;
        at[2] += b.eager - a.eager;
        at[3] += b.unrecorded - a.unrecorded;
      }
    }
    marks_.clear();
  }
  // The device rows alone.
  void resolve(std::vector<float>& out) {
    std::vector<float> passes;
    resolve(out, passes);
  }

 private:
  static constexpr int kStepEnd = -1;
  struct Mark {
    int phase;            // a Phase, or kStepEnd
    int index;            // DeviceTimeline::mark's index
    DevicePasses passes;  // DeviceTimeline::passes() at the mark
  };
  DeviceTimeline* timeline_;
  std::vector<Mark> marks_;
  std::vector<double> elapsed_;
};

class StepTimer {
 public:
  // comm: the communicator whose comm_seconds() and comm_cpu_seconds() count the step's
  // collectives; wait: the process's run-queue clock, read once per step at finish() (the wait
  // since the previous step's; null: the wait column is NaN); device: where the step's device
  // marks go (null or off: none).
  StepTimer(const Communicator& comm, ThreadWaitClock* wait, DevicePhaseLog* device = nullptr)
      : comm_(comm), wait_(wait), device_(device != nullptr && device->on() ? device : nullptr) {
    read(now_);
    start_ = now_;
  }

  // Starts timing `phase`, which is also this process's activity (common/activity.h) until end().
  // Right after the constructor or end(), their clock readings are the start's: a phase
  // boundary costs one reading of each clock (the thread CPU clock is a system call), and the
  // phases and the rest of the step still partition its total.
  void begin(Phase phase) {
    if (device_ != nullptr) device_->phase(phase);
    phase_ = phase;
    set_activity(kPhaseNames[phase]);
    if (!fresh_) read(now_);
    fresh_ = false;
    begin_ = now_;
  }
  void end() {
    read(now_);
    fresh_ = true;
    const double wall = std::chrono::duration<double>(now_.wall - begin_.wall).count();
    const double comm = now_.comm - begin_.comm;
    const double comm_cpu = now_.comm_cpu - begin_.comm_cpu;
    ms_[phase_] += 1e3 * std::max(0.0, wall - comm);
    cpu_ms_[phase_] += 1e3 * std::max(0.0, now_.cpu - begin_.cpu - comm_cpu);
    set_activity(nullptr);
  }
  // Appends the step's row of milliseconds (kNumPhases) to `out` and its CPU row
  // (kNumCpuColumns) to `cpu_out`. Right after end(), its readings are the step's end.
  template <class Out>
  void finish(Out& out, Out& cpu_out) {
    if (device_ != nullptr) device_->end_step();
    if (!fresh_) read(now_);
    fresh_ = false;
    ms_[kPhaseComm] = 1e3 * (now_.comm - start_.comm);
    ms_[kPhaseTotal] = 1e3 * std::chrono::duration<double>(now_.wall - start_.wall).count();
    const double known = ms_[kPhaseDraft] + ms_[kPhaseVerify] + ms_[kPhaseSample] + ms_[kPhaseComm];
    ms_[kPhaseOther] = std::max(0.0, ms_[kPhaseTotal] - known);
    for (int i = 0; i < kNumPhases; ++i) out.push_back(static_cast<float>(ms_[i]));

    cpu_ms_[kPhaseComm] = 1e3 * (now_.comm_cpu - start_.comm_cpu);
    cpu_ms_[kPhaseTotal] = 1e3 * (now_.cpu - start_.cpu);
    const double known_cpu =
        cpu_ms_[kPhaseDraft] + cpu_ms_[kPhaseVerify] + cpu_ms_[kPhaseSample] + cpu_ms_[kPhaseComm];
    cpu_ms_[kPhaseOther] = std::max(0.0, cpu_ms_[kPhaseTotal] - known_cpu);
    for (int i = 0; i < kNumPhases; ++i) cpu_out.push_back(static_cast<float>(cpu_ms_[i]));
    cpu_out.push_back(wait_ != nullptr ? static_cast<float>(wait_->since_last_ms())
                                       : std::numeric_limits<float>::quiet_NaN());
  }

 private:
  // One reading of every clock the rows need.
  struct Reading {
    SteadyClock::time_point wall;
    double comm = 0, comm_cpu = 0, cpu = 0;
  };
  void read(Reading& r) const {
    r.wall = SteadyClock::now();
    r.comm = comm_.comm_seconds();
    r.comm_cpu = comm_.comm_cpu_seconds();
    r.cpu = thread_cpu_seconds();
  }

  const Communicator& comm_;
  ThreadWaitClock* wait_;
  DevicePhaseLog* device_;
  Reading start_, begin_, now_;  // the step's start, the phase's start, the last reading
  bool fresh_ = true;            // now_ was read by the constructor or end() and not used since
  Phase phase_ = kPhaseOther;
  std::array<double, kNumPhases> ms_{}, cpu_ms_{};
};

}  // namespace specrun
