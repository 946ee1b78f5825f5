// NCCL communicator of a tensor-parallel group, bootstrapped from MPI (CUDA backend).
//
// Which device a rank drives (choose_device) is pure arithmetic and exists in every build; the
// NcclComm class exists only when the build has CUDA (SPECRUN_HAVE_CUDA).
#pragma once

#include <string>

namespace specrun {

// The CUDA device of a rank that is local_rank of local_size ranks on its node and sees
// device_count devices:
//   device_count >= local_size  -> local_rank (one rank per GPU, all GPUs visible);
//   device_count == 1           -> 0 (Slurm's per-task binding: CUDA_VISIBLE_DEVICES has one
//                                  entry per task; `note` says NCCL may lose P2P between them);
//   otherwise (0, or fewer than local_size) -> throws (exit code 2) with advice.
// `note` (may be nullptr) is set to a remark worth logging, or cleared.
int choose_device(int local_rank, int local_size, int device_count, std::string* note = nullptr);

}  // namespace specrun

#ifdef SPECRUN_HAVE_CUDA

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "dist/mpi_comm.h"

namespace specrun {

class NcclComm final : public Communicator {
 public:
  // Collective over `group` (every rank of it calls): rank 0 of the group makes the NCCL unique
  // id, MPI_Bcast sends it, every rank calls ncclCommInitRankConfig on `device`. Collectives on
  // device buffers are enqueued on `stream` (the rank's compute stream). `group` must outlive
  // the NcclComm. timeout_s (parallel.comm_timeout_s) bounds every wait in synchronize().
  NcclComm(MpiComm& group, int device, cudaStream_t stream, double timeout_s);
  // Healthy: waits for the stream and destroys the communicator. While an exception unwinds, or
  // after an error: ncclCommAbort (never blocks on peers that may be gone).
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t handle() const { return comm_; }

  // Buffers in device memory: NCCL on the stream, asynchronous (the data is ready once the
  // stream is synchronised, e.g. by synchronize()). Buffers in host memory (the engine's token
  // decisions): MPI on the group, synchronous. Mixing a host and a device buffer is an error.
  // Every rank of the group calls each collective in the same order.
  void all_reduce_sum(float* data, std::size_t count) override;
  void all_reduce_max(float* data, std::size_t count) override;
  void all_gather(const void* send, void* recv, std::size_t bytes_per_rank) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  // Waits for this rank's stream, then MPI_Barrier on the group.
  void barrier() override;

  // wait_or_abort: polls the stream until it is idle, checking ncclCommGetAsyncError and the
  // deadline (timeout_s from now). On an async NCCL error or a timeout: ncclCommAbort and a
  // clear error naming the rank, the device and the deadline; on a CUDA error: the error.
  // Use it instead of cudaStreamSynchronize wherever the stream may hold collectives.
  void synchronize();

  // Adds the time of finished collectives (CUDA events recorded on the stream around each
  // one) to comm_seconds(). Never waits: collectives still running are counted at a later call.
  // Call after synchronize() (e.g. when a forward pass has copied its logits to the host) or
  // at batch boundaries; no device synchronisation happens for the sake of timing.
  void collect_timing();

  // The device collectives as launch functions of a step graph (CudaBackend records them among a
  // pass's kernels; kernels/cuda/step_graphs.h): comm's collective on `stream`, which must be
  // comm's. Timed as above, also inside a captured graph: the graph records the events, and
  // every launch of it queues them for collect_timing().
  static void launch_all_reduce_sum(cudaStream_t stream, NcclComm* comm, float* data,
                                    std::size_t count);
  static void launch_all_gather(cudaStream_t stream, NcclComm* comm, const void* send, void* recv,
                                std::size_t bytes_per_rank);
  // The group's choice for a step graph from this rank's (StepGraphs::Agree): one MPI reduction
  // over the group (watched by parallel.comm_timeout_s), then cuda::agreed_step_choice.
  std::int64_t agree_step(std::int64_t choice);

 private:
  enum class Where { kHost, kDevice };
  // CUDA events around a collective; in_graph: recorded by a step graph's launches (owned by
  // its GraphEvents, never recycled).
  struct Timed {
    cudaEvent_t start = nullptr, end = nullptr;
    bool in_graph = false;
  };
  // The events of one step graph's collectives, recorded by every launch of it; destroyed with
  // the last holder: the graph's launch hook, or a launch of it not yet counted.
  struct GraphEvents {
    std::vector<Timed> timed;
    GraphEvents() = default;
    GraphEvents(const GraphEvents&) = delete;
    GraphEvents& operator=(const GraphEvents&) = delete;
    ~GraphEvents();
  };
  // A collective enqueued and not yet counted; graph: the step graph's events it belongs to
  // (null: a pair recycled into free_events_ once counted).
  struct Pending {
    Timed t;
    std::shared_ptr<GraphEvents> graph;
  };
  Where where(const void* a, const void* b, const char* op) const;
  void check_usable(const char* op) const;
  Timed begin_timed();
  void end_timed(Timed events);
  // A step graph whose collectives record `events` is about to be launched: queue them, once
  // its previous launch has been counted.
  void graph_launched(const std::shared_ptr<GraphEvents>& events);
  void enqueue_all_reduce(float* data, std::size_t count, ncclRedOp_t op);
  void enqueue_all_gather(const void* send, void* recv, std::size_t bytes_per_rank);
  [[noreturn]] void abort_with(const std::string& why);

  MpiComm& group_;
  int rank_ = 0, size_ = 1;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  double timeout_s_ = 600;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  // Collectives enqueued, oldest first; finished pairs are recycled, except those of step graphs.
  std::vector<Pending> pending_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> free_events_;
  // The step-graph capture in progress (StepGraphs::capture_id) and its collectives' events.
  std::uint64_t capture_id_ = 0;
  std::shared_ptr<GraphEvents> capture_events_;
};

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
