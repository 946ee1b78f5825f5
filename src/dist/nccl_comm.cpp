#include "dist/nccl_comm.h"

#include <string>

#include "common/error.h"

namespace specrun {

int choose_device(int local_rank, int local_size, int device_count, std::string* note) {
  if (note != nullptr) note->clear();
  SPEC_CHECK(local_rank >= 0 && local_size >= 1 && local_rank < local_size,
             "local rank " << local_rank << " of " << local_size << " is not a valid placement");
  SPEC_INPUT_CHECK(device_count >= 1,
                   "parallel.backend = \"cuda\" but local rank "
                       << local_rank
                       << " sees no CUDA device: run on a GPU node, check CUDA_VISIBLE_DEVICES "
                          "and the driver (nvidia-smi), or use parallel.backend = \"cpu\"");
  if (device_count >= local_size) return local_rank;
  if (device_count == 1) {
    if (note != nullptr && local_size > 1)
      *note =
          "each rank sees exactly one GPU (per-task binding, e.g. srun --gpus-per-task=1): "
          "using device 0; NCCL may fall back from P2P/NVLink to slower paths when ranks "
          "cannot see each other's GPUs (srun --gpu-bind=none with all GPUs visible avoids "
          "this)";
    return 0;
  }
  SPEC_INPUT_FAIL("this node runs " << local_size << " ranks but local rank " << local_rank
                                    << " sees only " << device_count
                                    << " CUDA devices: start one rank per GPU (mpirun -np "
                                       "<GPUs per node x nodes>), make every GPU visible to "
                                       "every rank, or bind exactly one GPU per task");
}

}  // namespace specrun

#ifdef SPECRUN_HAVE_CUDA

#include <algorithm>
#include <exception>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/clock.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/step_graph_choice.h"
#include "kernels/cuda/step_graphs.h"

namespace specrun {

using Clock = SteadyClock;

NcclComm::NcclComm(MpiComm& group, int device, cudaStream_t stream, double timeout_s)
    : group_(group),
      rank_(group.rank()),
      size_(group.size()),
      device_(device),
      stream_(stream),
      timeout_s_(timeout_s) {
  SPEC_CHECK(stream != nullptr, "NcclComm needs the rank's compute stream");
  SPEC_CHECK(timeout_s > 0, "parallel.comm_timeout_s must be positive, got " << timeout_s);
  ncclUniqueId id{};
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
  MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, group.handle()));
  CUDA_CHECK(cudaSetDevice(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  NCCL_CHECK(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), nullptr);
  int nccl_rank = -1, nccl_size = -1, nccl_device = -1;
  NCCL_CHECK(ncclCommUserRank(comm_, &nccl_rank), comm_);
  NCCL_CHECK(ncclCommCount(comm_, &nccl_size), comm_);
  NCCL_CHECK(ncclCommCuDevice(comm_, &nccl_device), comm_);
  SPEC_CHECK(nccl_rank == rank_ && nccl_size == size_ && nccl_device == device,
             "NCCL communicator reports rank " << nccl_rank << " of " << nccl_size << " on device "
                                               << nccl_device << ", expected " << rank_ << " of "
                                               << size_ << " on device " << device);
}

NcclComm::~NcclComm() {
  // Destructors must not throw; errors here are ignored on purpose (the job is ending).
  // NCCL finalises, destroys or aborts a communicator only once no graph holds its collectives,
  // and the graphs' launch hooks point here: the models' step graphs should be gone by now;
  // this makes sure.
  cuda::StepGraphs::drop_all();
  if (comm_ != nullptr) {
    bool healthy = !aborted_ && std::uncaught_exceptions() == 0;
    if (healthy) {
      try {
        synchronize();
      } catch (...) {
        healthy = false;  // synchronize() already aborted the communicator
      }
    }
    if (comm_ != nullptr) {
      if (healthy && ncclCommFinalize(comm_) == ncclSuccess)
        (void)ncclCommDestroy(comm_);
      else
        (void)ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  for (const Pending& p : pending_)
    if (!p.graph) free_events_.emplace_back(p.t.start, p.t.end);
  pending_.clear();  // the step graphs' events go with their GraphEvents
  capture_events_.reset();
  for (auto [a, b] : free_events_) {
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
  }
}

NcclComm::GraphEvents::~GraphEvents() {
  for (const Timed& t : timed) {
    (void)cudaEventDestroy(t.start);
    (void)cudaEventDestroy(t.end);
  }
}

void NcclComm::check_usable(const char* op) const {
  SPEC_CHECK(!aborted_ && comm_ != nullptr,
             "NcclComm::" << op << " on a communicator that was aborted after an earlier error "
                          << "(rank " << rank_ << " of the tp group)");
}

NcclComm::Where NcclComm::where(const void* a, const void* b, const char* op) const {
  auto on_device = [](const void* p) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  };
  const bool da = on_device(a), db = b == nullptr ? da : on_device(b);
  SPEC_CHECK(da == db, "NcclComm::" << op
                                    << ": one buffer is in device memory and the other in host "
                                       "memory; pass both on the same side");
  return da ? Where::kDevice : Where::kHost;
}

NcclComm::Timed NcclComm::begin_timed() {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  Timed t;
  if (capture != cudaStreamCaptureStatusNone) {
    // Inside a step graph's capture: events of the graph, recorded by each of its launches,
    // queued by one hook per graph. A capture that is not a step graph's: untimed.
    const std::uint64_t id = cuda::StepGraphs::capture_id();
    if (id == 0) return t;
    if (id != capture_id_) {
      capture_id_ = id;
      capture_events_ = std::make_shared<GraphEvents>();
      cuda::StepGraphs::capturing()->on_launch(
          [this, events = capture_events_] { graph_launched(events); });
    }
    // Relaxed while creating them, as NCCL does for its own resources during a capture.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t rc = cudaEventCreate(&t.start);
    if (rc == cudaSuccess) {
      rc = cudaEventCreate(&t.end);
      if (rc != cudaSuccess) (void)cudaEventDestroy(t.start);
    }
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    CUDA_CHECK(rc);
    t.in_graph = true;
    capture_events_->timed.push_back(t);
    CUDA_CHECK(cudaEventRecordWithFlags(t.start, stream_, cudaEventRecordExternal));
    return t;
  }
  if (!free_events_.empty()) {
    std::tie(t.start, t.end) = free_events_.back();
    free_events_.pop_back();
  } else {
    CUDA_CHECK(cudaEventCreate(&t.start));
    CUDA_CHECK(cudaEventCreate(&t.end));
  }
  CUDA_CHECK(cudaEventRecord(t.start, stream_));
  return t;
}

void NcclComm::end_timed(Timed events) {
  if (events.start == nullptr) return;
  if (!events.in_graph) {
    CUDA_CHECK(cudaEventRecord(events.end, stream_));
    pending_.push_back(Pending{events, nullptr});
    return;
  }
  CUDA_CHECK(cudaEventRecordWithFlags(events.end, stream_, cudaEventRecordExternal));
}

void NcclComm::graph_launched(const std::shared_ptr<GraphEvents>& events) {
  // The launch rewrites the events of the graph's previous one: count that one first, all of
  // its collectives (it has normally finished, the host having read the pass's logits since;
  // otherwise wait for it).
  auto queued = [&] {
    return std::any_of(pending_.begin(), pending_.end(),
                       [&](const Pending& p) { return p.graph == events; });
  };
  if (queued()) {
    collect_timing();
    if (queued()) {
      synchronize();
      collect_timing();
    }
  }
  for (const Timed& t : events->timed) pending_.push_back(Pending{t, events});
}

void NcclComm::collect_timing() {
  std::size_t done = 0;
  for (; done < pending_.size(); ++done) {
    const Timed& t = pending_[done].t;
    const cudaError_t rc = cudaEventQuery(t.end);
    if (rc == cudaErrorNotReady) break;  // later events are later on the same stream
    CUDA_CHECK(rc);
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t.start, t.end));
    add_timing(ms * 1e-3);
    if (!pending_[done].graph) free_events_.emplace_back(t.start, t.end);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

void NcclComm::enqueue_all_reduce(float* data, std::size_t count, ncclRedOp_t op) {
  check_usable(op == ncclSum ? "all_reduce_sum" : "all_reduce_max");
  const Timed events = begin_timed();
  NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, op, comm_, stream_), comm_);
  end_timed(events);
}

void NcclComm::enqueue_all_gather(const void* send, void* recv, std::size_t bytes_per_rank) {
  check_usable("all_gather");
  const Timed events = begin_timed();
  NCCL_CHECK(ncclAllGather(send, recv, bytes_per_rank, ncclChar, comm_, stream_), comm_);
  end_timed(events);
}

void NcclComm::launch_all_reduce_sum(cudaStream_t stream, NcclComm* comm, float* data,
                                     std::size_t count) {
  SPEC_CHECK(stream == comm->stream_, "NcclComm::launch_all_reduce_sum on another stream");
  if (count == 0 || comm->size_ == 1) return;
  comm->enqueue_all_reduce(data, count, ncclSum);
}

void NcclComm::launch_all_gather(cudaStream_t stream, NcclComm* comm, const void* send, void* recv,
                                 std::size_t bytes_per_rank) {
  SPEC_CHECK(stream == comm->stream_, "NcclComm::launch_all_gather on another stream");
  if (bytes_per_rank == 0) return;
  comm->enqueue_all_gather(send, recv, bytes_per_rank);
}

std::int64_t NcclComm::agree_step(std::int64_t choice) {
  if (size_ == 1) return choice;
  // Exact in float: a choice is 2 + the number of graphs captured before, far below 2^24. On
  // the host (MPI), timed as this communicator's: the wait for the slowest rank is comm time.
  float span[2] = {static_cast<float>(choice), -static_cast<float>(choice)};
  all_reduce_max(span, 2);
  return cuda::agreed_step_choice(-static_cast<std::int64_t>(span[1]),
                                  static_cast<std::int64_t>(span[0]));
}

void NcclComm::all_reduce_sum(float* data, std::size_t count) {
  if (count == 0 || size_ == 1) return;
  if (where(data, nullptr, "all_reduce_sum") == Where::kHost) {
    const auto t0 = Clock::now();
    group_.all_reduce_sum(data, count);
    add_timing(seconds_since(t0));
    return;
  }
  enqueue_all_reduce(data, count, ncclSum);
}

void NcclComm::all_reduce_max(float* data, std::size_t count) {
  if (count == 0 || size_ == 1) return;
  if (where(data, nullptr, "all_reduce_max") == Where::kHost) {
    const auto t0 = Clock::now();
    group_.all_reduce_max(data, count);
    add_timing(seconds_since(t0));
    return;
  }
  enqueue_all_reduce(data, count, ncclMax);
}

void NcclComm::all_gather(const void* send, void* recv, std::size_t bytes_per_rank) {
  if (bytes_per_rank == 0) return;
  if (where(send, recv, "all_gather") == Where::kHost) {
    const auto t0 = Clock::now();
    group_.all_gather(send, recv, bytes_per_rank);
    add_timing(seconds_since(t0));
    return;
  }
  enqueue_all_gather(send, recv, bytes_per_rank);
}

void NcclComm::broadcast(void* data, std::size_t bytes, int root) {
  if (bytes == 0 || size_ == 1) return;
  SPEC_CHECK(root >= 0 && root < size_, "broadcast root " << root << " outside 0.." << size_ - 1);
  if (where(data, nullptr, "broadcast") == Where::kHost) {
    const auto t0 = Clock::now();
    group_.broadcast(data, bytes, root);
    add_timing(seconds_since(t0));
    return;
  }
  check_usable("broadcast");
  auto events = begin_timed();
  NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_), comm_);
  end_timed(events);
}

void NcclComm::barrier() {
  synchronize();
  const auto t0 = Clock::now();
  group_.barrier();
  add_timing(seconds_since(t0));
}

void NcclComm::abort_with(const std::string& why) {
  if (comm_ != nullptr && !aborted_) {
    cuda::StepGraphs::drop_all();  // an abort waits until no graph holds the collectives
    (void)ncclCommAbort(comm_);
  }
  aborted_ = true;
  comm_ = nullptr;
  SPEC_FAIL(why);
}

void NcclComm::synchronize() {
  const auto t0 = Clock::now();
  for (;;) {
    const cudaError_t rc = cudaStreamQuery(stream_);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) {
      std::ostringstream why;
      why << "CUDA error on device " << device_
          << " while waiting for the compute stream: " << cudaGetErrorName(rc) << ": "
          << cudaGetErrorString(rc);
      abort_with(why.str());
    }
    if (comm_ != nullptr) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &async);
      if (q != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        std::ostringstream why;
        why << "NCCL reported an asynchronous error on tp rank " << rank_ << " of " << size_
            << " (device " << device_ << "): " << ncclGetErrorString(q != ncclSuccess ? q : async)
            << " (" << ncclGetLastError(comm_) << "); the communicator was aborted. Check the "
            << "other ranks' logs, NCCL_DEBUG=WARN, and the network/NVLink health";
        abort_with(why.str());
      }
    }
    const double waited = seconds_since(t0);
    if (waited > timeout_s_) {
      std::ostringstream why;
      why << "the compute stream of tp rank " << rank_ << " of " << size_ << " (device " << device_
          << ") did not finish within parallel.comm_timeout_s = " << timeout_s_
          << " s: a collective is probably waiting for a rank that died or hung; the NCCL "
          << "communicator was aborted. Look for the first failing rank in the log, or raise "
          << "parallel.comm_timeout_s if steps are legitimately this slow";
      abort_with(why.str());
    }
    // Spin briefly for low latency at step ends, then back off so a long wait costs no CPU.
    if (waited < 0.02)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
