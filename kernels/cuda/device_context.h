// One rank's CUDA device: the device made current, the compute stream every kernel and
// collective of this rank runs on, and a cuBLAS handle bound to that stream. Created once per
// process by the CUDA backend, passed explicitly (no globals), destroyed after everything that
// uses its stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace specrun::cuda {

// Compute capabilities this build has device code for, from nvcc's __CUDA_ARCH_LIST__
// (CMAKE_CUDA_ARCHITECTURES, default "80 90"): {80, 90} means sm_80 and sm_90 SASS plus PTX.
std::vector<int> built_architectures();

// Reads `device`'s compute capability and checks that this build can run on it (SASS for the
// same major version, or PTX of an older architecture that the driver compiles at start).
// Throws naming the device, its capability and the built list, with advice, when it cannot.
// Returns a one-line description ("NVIDIA H200, GPU-<uuid>, sm_90, SASS sm_90").
std::string check_architecture(int device);

class DeviceContext {
 public:
  // Makes `device` current for this thread, checks its architecture, creates a non-blocking
  // stream and a cuBLAS handle on it with a private workspace (so cuBLAS never allocates
  // during a step).
  explicit DeviceContext(int device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  const std::string& description() const { return description_; }
  // The device's compute capability, major version (9 for H100/H200).
  int compute_major() const { return compute_major_; }
  // Whether the device code running here was compiled for sm_90 or later, which programmatic
  // dependent launches need (device_util.cuh: wait_for_prior_grids is empty below it): false
  // on an sm_90 device running a build's sm_80 PTX.
  bool dependent_launch_code() const { return dependent_launch_code_; }
  // Free and total device memory in bytes, now.
  std::size_t free_bytes() const;
  std::size_t total_bytes() const;

 private:
  int device_ = 0;
  int compute_major_ = 0;
  bool dependent_launch_code_ = false;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  std::string description_;
};

}  // namespace specrun::cuda
