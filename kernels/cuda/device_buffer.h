// Owning RAII buffers: device memory (cudaMalloc) and page-locked host memory (cudaMallocHost)
// for staging copies. Move-only. grow() reallocates only when more bytes are needed (contents
// are not kept), so scratch buffers stop allocating once a run is warm.
//
// Two hooks for step graphs (step_graphs.h), which record a step's launches before issuing them:
// allocation_epoch() counts this process's (re)allocations, so a step that allocated is known;
// and while a DeferFrees scope is alive on a thread, buffers released on that thread are kept
// (a recorded launch may still name them) and freed when the outermost scope ends.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace specrun::cuda {

// True while an exception unwinds the stack. Destructors then skip calls that synchronise the
// device (cudaFree, cudaStreamSynchronize, cublasDestroy): after a hung collective they would
// block forever, and the process is about to end with MPI_Abort anyway (the memory is left to
// process exit).
inline bool unwinding() {
  return std::uncaught_exceptions() > 0;
}

namespace detail {
inline std::atomic<std::uint64_t>& allocation_counter() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}
struct DeferredFrees {
  int depth = 0;
  std::vector<std::pair<void*, bool>> held;  // pointer, is host (pinned) memory
};
inline DeferredFrees& deferred_frees() {
  thread_local DeferredFrees frees;
  return frees;
}
}  // namespace detail

// Device or pinned allocations made by Buffer so far in this process.
inline std::uint64_t allocation_epoch() {
  return detail::allocation_counter().load(std::memory_order_relaxed);
}

// While alive, Buffer releases on this thread are deferred to the end of the outermost scope.
// Freeing synchronises the device (cudaFree), so work already issued on the held memory is done
// first.
class DeferFrees {
 public:
  DeferFrees() { ++detail::deferred_frees().depth; }
  ~DeferFrees() {
    detail::DeferredFrees& d = detail::deferred_frees();
    if (--d.depth > 0) return;
    std::vector<std::pair<void*, bool>> held = std::move(d.held);
    d.held.clear();
    if (unwinding()) return;  // leak rather than risk blocking (see unwinding())
    for (const auto& [ptr, host] : held) (void)(host ? cudaFreeHost(ptr) : cudaFree(ptr));
  }
  DeferFrees(const DeferFrees&) = delete;
  DeferFrees& operator=(const DeferFrees&) = delete;
};

template <bool kHost>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes) { grow(bytes); }
  ~Buffer() { release(); }
  Buffer(Buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Ensures at least `bytes` bytes (old contents are lost when it reallocates).
  void grow(std::size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    detail::allocation_counter().fetch_add(1, std::memory_order_relaxed);
    if constexpr (kHost)
      CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
    else
      CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (ptr_ == nullptr) return;
    if (unwinding()) {  // see unwinding(): leak rather than risk blocking
      ptr_ = nullptr;
      bytes_ = 0;
      return;
    }
    if (detail::DeferredFrees& d = detail::deferred_frees(); d.depth > 0) {
      d.held.emplace_back(ptr_, kHost);
      ptr_ = nullptr;
      bytes_ = 0;
      return;
    }
    if constexpr (kHost)
      (void)cudaFreeHost(ptr_);
    else
      (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

using DeviceBuffer = Buffer<false>;
using PinnedBuffer = Buffer<true>;

// An owned CUDA event without timing (cudaEventDisableTiming), for ordering host and stream.
class Event {
 public:
  Event() { CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() {
    if (event_ != nullptr && !unwinding()) (void)cudaEventDestroy(event_);
  }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace specrun::cuda
