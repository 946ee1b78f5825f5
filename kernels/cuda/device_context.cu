// DeviceContext: device selection check, compute stream and cuBLAS handle of one rank.
#include <iomanip>
#include <sstream>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"

namespace specrun::cuda {
namespace {

constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;  // cuBLAS's Hopper advice

// A kernel whose attributes tell which image the driver picked for the device.
__global__ void probe_kernel() {}

std::string list(const std::vector<int>& archs) {
  std::ostringstream out;
  for (std::size_t i = 0; i < archs.size(); ++i) out << (i ? ", " : "") << "sm_" << archs[i];
  return out.str();
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints it.
std::string uuid_text(const cudaDeviceProp& prop) {
  std::ostringstream out;
  out << "GPU-" << std::hex << std::setfill('0');
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out << '-';
    out << std::setw(2) << (static_cast<unsigned>(static_cast<unsigned char>(prop.uuid.bytes[i])));
  }
  return out.str();
}

}  // namespace

std::vector<int> built_architectures() {
  std::vector<int> out;
#ifdef __CUDA_ARCH_LIST__
  for (int a : {__CUDA_ARCH_LIST__}) out.push_back(a / 10);
#endif
  return out;
}

std::string check_architecture(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const int cc = prop.major * 10 + prop.minor;
  const std::vector<int> archs = built_architectures();
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaSetDevice(device));
  cudaError_t rc = cudaFuncGetAttributes(&attr, probe_kernel);
  if (rc != cudaSuccess) (void)cudaGetLastError();  // clear the error state before throwing
  SPEC_CHECK(rc == cudaSuccess,
             "device " << device << " (" << prop.name << ") has compute capability sm_" << cc
                       << " but this build has device code only for " << list(archs) << " ("
                       << cudaGetErrorString(rc) << "): rebuild with -DCMAKE_CUDA_ARCHITECTURES=\""
                       << cc << "\" (or add it to the list)");
  std::ostringstream out;
  out << prop.name << ", " << uuid_text(prop) << ", sm_" << cc << ", ";
  if (attr.binaryVersion / 10 == prop.major)
    out << "SASS sm_" << attr.binaryVersion;
  else
    out << "PTX " << attr.ptxVersion << " compiled by the driver (slow first start; rebuild with "
        << "-DCMAKE_CUDA_ARCHITECTURES including " << cc << ")";
  return out.str();
}

DeviceContext::DeviceContext(int device) : device_(device) {
  description_ = check_architecture(device);
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaDeviceGetAttribute(&compute_major_, cudaDevAttrComputeCapabilityMajor, device));
  // Kernels wait for the grids before them (griddepcontrol.wait) only in code compiled for
  // sm_90 on; PTX of an older architecture compiled by the driver has no wait in it.
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, probe_kernel));
  dependent_launch_code_ =
      attr.ptxVersion >= 90 || (attr.ptxVersion == 0 && attr.binaryVersion >= 90);
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // After cublasSetStream: setting the stream resets a user workspace.
  CUDA_CHECK(cudaMalloc(&workspace_, kCublasWorkspaceBytes));
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_, kCublasWorkspaceBytes));
  CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));  // no TF32 for F32 GEMMs
}

DeviceContext::~DeviceContext() {
  // Best effort: errors here cannot be reported (destructors do not throw). While an exception
  // unwinds, nothing that may wait for the device (see unwinding() in device_buffer.h).
  if (unwinding()) return;
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

std::size_t DeviceContext::free_bytes() const {
  std::size_t free = 0, total = 0;
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

std::size_t DeviceContext::total_bytes() const {
  std::size_t free = 0, total = 0;
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total;
}

}  // namespace specrun::cuda
