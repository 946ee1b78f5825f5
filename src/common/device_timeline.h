// Time on an accelerator's own work queue. The host's clock times a phase by when the host got
// through it; on a GPU a forward pass only enqueues work, so that clock says how long launching
// took, and the device's time lands in whichever later phase waits. A DeviceTimeline puts marks
// into the queue between the phases (CUDA events on the rank's compute stream), and reads the
// time between consecutive marks only after the device has passed them, at a wait that happens
// anyway (the end of a batch): never one wait per step.
// The CUDA backend's implementation is CudaPhaseTimeline (backend/cuda_timeline.h); the CPU
// backend has none (its work is done when the host returns).
#pragma once

#include <vector>

namespace specrun {

// How a device's forward passes were issued, counted since its backend started: replayed as a
// kept CUDA graph, captured into a new graph (and launched), or launched one kernel at a time,
// either recorded first (eager: a shape seen once, memory allocated while recording, a capture
// the driver refused, or the tensor-parallel ranks agreed on it) or never recorded (unrecorded:
// graphs off, or a pass larger than a step graph takes).
struct DevicePasses {
  long long replayed = 0, captured = 0, eager = 0, unrecorded = 0;
};

class DeviceTimeline {
 public:
  virtual ~DeviceTimeline() = default;

  // Puts a mark into the device's queue after everything enqueued so far; returns its index
  // among the marks since the last read() (0, 1, ...). Cheap on the host (one event record), no
  // wait.
  virtual int mark() = 0;

  // Room for `marks` marks between two reads, made now, so that marking during the timed steps
  // creates nothing (the CUDA events of a batch; nothing for clocks that need no room).
  virtual void reserve(int marks) { (void)marks; }

  // Waits until the device has passed every mark (a deadline-bound wait: a hung device becomes
  // an error, not a hang), sets out[i] to the milliseconds of device time between mark i and
  // mark i + 1 (out has marks - 1 elements; none when fewer than two marks), and forgets the
  // marks.
  virtual void read(std::vector<double>& out) = 0;

  // The device's passes so far (host-side counters: no wait). A timeline with no such record
  // reports zeros.
  virtual DevicePasses passes() const { return {}; }
};

}  // namespace specrun
