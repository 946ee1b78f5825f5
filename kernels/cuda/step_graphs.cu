// Step graphs (step_graphs.h): record, look up, capture, replay.
#include <chrono>

#include "common/hash.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/step_graphs.h"

namespace specrun::cuda {

void memcpy_async(cudaStream_t stream, void* dst, const void* src, std::size_t bytes,
                  cudaMemcpyKind kind) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
}

void memcpy2d_async(cudaStream_t stream, void* dst, std::size_t dst_pitch, const void* src,
                    std::size_t src_pitch, std::size_t width, std::size_t height,
                    cudaMemcpyKind kind) {
  CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, kind, stream));
}

StepGraphs::~StepGraphs() {
  if (unwinding()) return;  // see unwinding(): the process is about to end
  for (auto& [hash, list] : graphs_)
    for (Graph& g : list) (void)cudaGraphExecDestroy(g.exec);
}

void StepGraphs::begin(bool record) {
  // A step abandoned by an exception left its launches unissued: drop them.
  ops_.clear();
  signature_.clear();
  defer_.reset();
  recording_ = record;
  if (!record) return;
  epoch_at_begin_ = allocation_epoch();
  defer_ = std::make_unique<DeferFrees>();
  ++stats_->steps;
}

void StepGraphs::run_recorded() {
  for (const std::function<void()>& op : ops_) op();
}

cudaGraphExec_t StepGraphs::capture(cudaStream_t stream) {
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    run_recorded();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream, &broken);
    if (broken != nullptr) (void)cudaGraphDestroy(broken);
    throw;
  }
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  CUDA_CHECK(rc);
  stats_->capture_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++stats_->captures;
  return exec;
}

void StepGraphs::end(cudaStream_t stream) {
  if (!recording_) return;
  recording_ = false;
  const bool allocated = allocation_epoch() != epoch_at_begin_;
  const std::uint64_t hash = fnv1a64(signature_.data(), signature_.size() * sizeof(std::uint64_t));
  if (const auto found = graphs_.find(hash); found != graphs_.end()) {
    for (const Graph& g : found->second) {
      if (g.signature != signature_) continue;
      CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
      ++stats_->replays;
      ops_.clear();
      signature_.clear();
      defer_.reset();
      return;
    }
  }
  if (seen_.size() > 4096) seen_.clear();  // shapes that never repeat
  const int seen = allocated ? 0 : ++seen_[hash];
  if (seen >= 2 && n_graphs_ < kMaxGraphs) {
    Graph g{std::move(signature_), capture(stream)};
    CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
    graphs_[hash].push_back(std::move(g));
    ++n_graphs_;
    seen_.erase(hash);
  } else {
    run_recorded();
    ++stats_->eager;
  }
  ops_.clear();
  signature_.clear();
  defer_.reset();  // frees what was released while recording (after the launches above)
}

}  // namespace specrun::cuda
