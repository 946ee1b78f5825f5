#ifdef SPECRUN_HAVE_CUDA

#include "backend/cuda_timeline.h"

#include "backend/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace specrun {

CudaPhaseTimeline::CudaPhaseTimeline(CudaContext& context) : ctx_(context) {}

CudaPhaseTimeline::~CudaPhaseTimeline() {
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
}

void CudaPhaseTimeline::reserve(int marks) {
  while (static_cast<int>(events_.size()) < marks) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));  // with timing (the default flags)
    events_.push_back(e);
  }
}

int CudaPhaseTimeline::mark() {
  if (used_ == static_cast<int>(events_.size())) reserve(used_ + 1);
  CUDA_CHECK(cudaEventRecord(events_[static_cast<std::size_t>(used_)], ctx_.stream()));
  return used_++;
}

DevicePasses CudaPhaseTimeline::passes() const {
  const cuda::StepGraphStats& s = ctx_.step_graph_stats();
  return DevicePasses{s.replays, s.captures, s.eager, s.unrecorded};
}

void CudaPhaseTimeline::read(std::vector<double>& out) {
  out.clear();
  if (used_ == 0) return;
  ctx_.synchronize();
  for (int i = 0; i + 1 < used_; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[static_cast<std::size_t>(i)],
                                    events_[static_cast<std::size_t>(i) + 1]));
    out.push_back(ms);
  }
  used_ = 0;
}

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
