// Step graphs (step_graphs.h): record, look up, capture, replay.
#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>

#include "common/error.h"
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

namespace {

// Every StepGraphs of the process (drop_all), and the one capturing on this thread.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<StepGraphs*>& registry() {
  static std::vector<StepGraphs*> all;
  return all;
}
thread_local StepGraphs* t_capturing = nullptr;
thread_local std::uint64_t t_capture_id = 0, t_captures = 0;

}  // namespace

StepGraphs::StepGraphs(StepGraphStats& stats, int max_graphs)
    : stats_(&stats), max_graphs_(max_graphs) {
  SPEC_CHECK(max_graphs > 0, "StepGraphs: max_graphs must be positive, got " << max_graphs);
  const std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(this);
}

// The graphs go even while an exception unwinds (unwinding()): cudaGraphExecDestroy does not wait
// for a launch in flight (the graph is freed when it completes), and a graph left alive would
// keep an NCCL communicator's abort waiting forever.
StepGraphs::~StepGraphs() {
  {
    const std::lock_guard<std::mutex> lock(registry_mutex());
    std::vector<StepGraphs*>& all = registry();
    all.erase(std::remove(all.begin(), all.end(), this), all.end());
  }
  drop();
}

void StepGraphs::drop() {
  for (auto& [hash, list] : graphs_)
    for (Graph& g : list) (void)cudaGraphExecDestroy(g.exec);
  graphs_.clear();
  seen_.clear();
  n_graphs_ = 0;
}

void StepGraphs::drop_all() {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  for (StepGraphs* g : registry()) g->drop();
}

StepGraphs* StepGraphs::capturing() {
  return t_capturing;
}

std::uint64_t StepGraphs::capture_id() {
  return t_capture_id;
}

void StepGraphs::on_launch(std::function<void()> hook) {
  SPEC_CHECK(t_capturing == this, "StepGraphs::on_launch outside this object's capture");
  capture_hooks_.push_back(std::move(hook));
}

void StepGraphs::begin(bool record) {
  // A step abandoned by an exception left its launches unissued: drop them.
  ops_.clear();
  signature_.clear();
  defer_.reset();
  recording_ = record;
  if (!record) {
    ++stats_->unrecorded;
    return;
  }
  epoch_at_begin_ = allocation_epoch();
  defer_ = std::make_unique<DeferFrees>();
  ++stats_->steps;
}

void StepGraphs::run_recorded() {
  for (const std::function<void()>& op : ops_) op();
}

bool StepGraphs::capture(cudaStream_t stream, Graph& g, bool fall_back) {
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  capture_hooks_.clear();
  t_capturing = this;
  t_capture_id = ++t_captures;
  std::exception_ptr failure;
  try {
    run_recorded();
  } catch (...) {
    failure = std::current_exception();
  }
  t_capturing = nullptr;
  t_capture_id = 0;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  if (!failure) {
    try {
      CUDA_CHECK(ended);
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  if (failure) {
    capture_hooks_.clear();
    // With collectives of several ranks this is fatal for the job (the other ranks' captured
    // collectives wait for this rank's): the error ends it, no later pass runs.
    if (!fall_back) std::rethrow_exception(failure);
    (void)cudaGetLastError();  // the failed capture's error is not the next launch's
    if (stats_->capture_failures++ == 0) {
      try {
        std::rethrow_exception(failure);
      } catch (const std::exception& e) {
        stats_->capture_error = e.what();
      } catch (...) {
        stats_->capture_error = "an exception that is not a std::exception";
      }
    }
    return false;
  }
  g.exec = exec;
  if (!capture_hooks_.empty())
    g.hooks = std::make_shared<const std::vector<std::function<void()>>>(std::move(capture_hooks_));
  capture_hooks_.clear();
  stats_->capture_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++stats_->captures;
  return true;
}

void StepGraphs::launch_graph(const Graph& g, cudaStream_t stream) {
  if (g.hooks) {
    // Holds the hooks: a hook that fails may drop g (a communicator's abort calls drop_all)
    // while it runs.
    const std::shared_ptr<const std::vector<std::function<void()>>> hooks = g.hooks;
    for (const std::function<void()>& hook : *hooks) hook();
  }
  CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
}

StepGraphs::Graph* StepGraphs::find(std::uint64_t hash) {
  const auto found = graphs_.find(hash);
  if (found == graphs_.end()) return nullptr;
  for (Graph& g : found->second)
    if (g.signature == signature_) return &g;
  return nullptr;
}

void StepGraphs::evict() {
  auto oldest_list = graphs_.end();
  std::size_t oldest = 0;
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
    for (std::size_t i = 0; i < it->second.size(); ++i)
      if (oldest_list == graphs_.end() ||
          it->second[i].last_use < oldest_list->second[oldest].last_use) {
        oldest_list = it;
        oldest = i;
      }
  if (oldest_list == graphs_.end()) return;
  std::vector<Graph>& list = oldest_list->second;
  (void)cudaGraphExecDestroy(list[oldest].exec);  // a launch in flight completes first
  list.erase(list.begin() + static_cast<std::ptrdiff_t>(oldest));
  if (list.empty()) graphs_.erase(oldest_list);
  --n_graphs_;
  ++stats_->evicted;
}

void StepGraphs::end(cudaStream_t stream, const Agree& agree) {
  if (!recording_) return;
  recording_ = false;
  const bool allocated = allocation_epoch() != epoch_at_begin_;
  const std::uint64_t hash = fnv1a64(signature_.data(), signature_.size() * sizeof(std::uint64_t));
  Graph* found = find(hash);
  std::int64_t choice = kStepEager;
  if (found != nullptr) {
    choice = kStepReplay + found->serial;
  } else {
    if (seen_.size() > 4096) seen_.clear();  // shapes that never repeat
    const int seen = allocated ? 0 : ++seen_[hash];
    if (seen >= 2 && !capture_failed_) choice = kStepCapture;
  }
  // The group's choice can only lower this rank's: a replay to a capture (this rank then
  // replaces its graph of that signature), anything to eager.
  if (agree) {
    const std::int64_t mine = choice;
    choice = agree(mine);
    SPEC_CHECK(choice == mine || choice == kStepEager || (choice == kStepCapture && mine > choice),
               "step graphs: the tp group chose " << choice << " for a step this rank chose "
                                                  << mine << " for (a rank that diverged)");
  }
  if (choice == kStepCapture) {
    Graph g{signature_, nullptr, n_captures_, {}};
    if (capture(stream, g, /*fall_back=*/!agree)) {
      ++n_captures_;
      if (found != nullptr) {
        (void)cudaGraphExecDestroy(found->exec);
        *found = std::move(g);
      } else {
        if (n_graphs_ >= max_graphs_) evict();
        std::vector<Graph>& list = graphs_[hash];
        list.push_back(std::move(g));
        found = &list.back();
        ++n_graphs_;
      }
      seen_.erase(hash);
      found->last_use = ++uses_;
      launch_graph(*found, stream);
    } else {
      capture_failed_ = true;  // nothing ran: the step goes one by one, and so do later ones
      run_recorded();
      ++stats_->eager;
    }
  } else if (choice >= kStepReplay) {
    found->last_use = ++uses_;
    launch_graph(*found, stream);
    ++stats_->replays;
  } else {
    run_recorded();
    ++stats_->eager;
  }
  ops_.clear();
  signature_.clear();
  defer_.reset();  // frees what was released while recording (after the launches above)
}

}  // namespace specrun::cuda
