// Owning RAII buffers: device memory (cudaMalloc) and page-locked host memory (cudaMallocHost)
// for staging copies. Move-only. grow() reallocates only when more bytes are needed (contents
// are not kept), so scratch buffers stop allocating once a run is warm.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <exception>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace specrun::cuda {

// True while an exception unwinds the stack. Destructors then skip calls that synchronise the
// device (cudaFree, cudaStreamSynchronize, cublasDestroy): after a hung collective they would
// block forever, and the process is about to end with MPI_Abort anyway (the memory is left to
// process exit).
inline bool unwinding() {
  return std::uncaught_exceptions() > 0;
}

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

}  // namespace specrun::cuda
