// The CUDA backend's DeviceTimeline (common/device_timeline.h): marks are CUDA events recorded on
// the rank's compute stream, the one every kernel, collective and token decision of the rank
// runs on, so the time between two marks is the device time of the work enqueued between them
// (idle time included when the device ran ahead of the host and waited for it). Events are kept
// in a pool, made ahead by reserve() (the decoder reserves a batch's worth) or as marks need
// them, and reused, so a timed step creates none. Built only with CUDA (SPECRUN_HAVE_CUDA).
#pragma once

#ifdef SPECRUN_HAVE_CUDA

#include <cuda_runtime.h>

#include <vector>

#include "common/device_timeline.h"

namespace specrun {

class CudaContext;

class CudaPhaseTimeline final : public DeviceTimeline {
 public:
  // context must outlive the timeline.
  explicit CudaPhaseTimeline(CudaContext& context);
  ~CudaPhaseTimeline() override;
  CudaPhaseTimeline(const CudaPhaseTimeline&) = delete;
  CudaPhaseTimeline& operator=(const CudaPhaseTimeline&) = delete;

  int mark() override;
  // Creates events until the pool holds `marks` (it never shrinks).
  void reserve(int marks) override;
  // Waits with CudaContext::synchronize (the communicators' deadline).
  void read(std::vector<double>& out) override;
  // The context's step-graph counts (CudaContext::step_graph_stats: every model of the rank).
  DevicePasses passes() const override;

 private:
  CudaContext& ctx_;
  std::vector<cudaEvent_t> events_;  // the pool; the first used_ are this read's marks
  int used_ = 0;
};

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
