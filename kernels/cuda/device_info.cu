// device_count, self_test, nccl_runtime_version: the first CUDA translation unit. It keeps the
// CUDA build path (nvcc, cudart, NCCL) compiled and linked from day one.
#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"

namespace specrun::cuda {
namespace {

// x[i] += 1 for i < n.
__global__ void add_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

}  // namespace

int device_count(std::string* error) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (error) *error = cudaGetErrorString(rc);
    return 0;
  }
  return n;
}

void self_test(int device) {
  constexpr int kN = 1000;
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  int* d = nullptr;
  CUDA_CHECK(cudaMallocAsync(&d, kN * sizeof(int), stream));
  CUDA_CHECK(cudaMemsetAsync(d, 0, kN * sizeof(int), stream));
  add_one<<<(kN + 255) / 256, 256, 0, stream>>>(d, kN);
  CUDA_CHECK(cudaGetLastError());
  int host[kN];
  CUDA_CHECK(cudaMemcpyAsync(host, d, sizeof(host), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaFreeAsync(d, stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  for (int i = 0; i < kN; ++i)
    SPEC_CHECK(host[i] == 1, "device self-test: element " << i << " is " << host[i] << ", not 1");
}

int nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

}  // namespace specrun::cuda
