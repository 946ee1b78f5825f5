// Collectives over a group of ranks. The CPU backend implements it with MPI on host buffers
// (MpiComm), the CUDA backend with NCCL on device buffers. Every rank of the group must call
// each collective in the same order. Time spent inside collectives is accumulated so that the
// engine can report it as the "communication" phase without synchronising per step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specrun {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // rank inside this communicator
  virtual int size() const = 0;

  // In place: data[i] = sum over ranks of data[i]. All ranks call it.
  virtual void all_reduce_sum(float* data, std::size_t count) = 0;
  // In place: data[i] = max over ranks of data[i]. All ranks call it.
  virtual void all_reduce_max(float* data, std::size_t count) = 0;
  // recv holds size() * bytes_per_rank bytes, rank r's block at offset r * bytes_per_rank.
  virtual void all_gather(const void* send, void* recv, std::size_t bytes_per_rank) = 0;
  // root's bytes are copied to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  // Seconds spent inside collectives since the last reset (host wall clock on the CPU backend).
  double comm_seconds() const { return comm_seconds_; }
  // The calling thread's CPU seconds inside those calls (waiting ranks spin or yield; on CUDA the
  // host cost of enqueueing).
  double comm_cpu_seconds() const { return comm_cpu_seconds_; }
  std::int64_t comm_calls() const { return comm_calls_; }
  void reset_timing() {
    comm_seconds_ = 0;
    comm_cpu_seconds_ = 0;
    comm_calls_ = 0;
  }

 protected:
  void add_timing(double seconds, double cpu_seconds = 0) {
    comm_seconds_ += seconds;
    comm_cpu_seconds_ += cpu_seconds;
    ++comm_calls_;
  }

 private:
  double comm_seconds_ = 0;
  double comm_cpu_seconds_ = 0;
  std::int64_t comm_calls_ = 0;
};

}  // namespace specrun
