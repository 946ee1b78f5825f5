// Check macros of the CUDA backend, built on SPEC_CHECK_GEN_ (src/common/error.h) like the rest
// of the family: the failing call as text, file:line, rank and host, and the library's own
// error string. They throw specrun::Error (exit code 1); nothing here calls exit().
//
//   CUDA_CHECK(cudaMemcpyAsync(...));      cudaGetErrorName + cudaGetErrorString
//   CUBLAS_CHECK(cublasGemmEx(...));       cublasGetStatusName + cublasGetStatusString
//   NCCL_CHECK(ncclAllReduce(...), comm);  ncclGetErrorString + ncclGetLastError(comm)
//   CUDA_CHECK_LAUNCH();                   after a <<<...>>> launch: cudaGetLastError
//
// Usable from .cu files (CUDA 17) and from C++20 files compiled with SPECRUN_HAVE_CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "common/error.h"

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t spec_cuda_rc_ = (call);                                                           \
    SPEC_CHECK_GEN_(spec_cuda_rc_ == cudaSuccess, #call,                                          \
                    cudaGetErrorName(spec_cuda_rc_) << ": " << cudaGetErrorString(spec_cuda_rc_), \
                    ::specrun::kExitFailure);                                                     \
  } while (0)

// After a kernel launch: configuration errors (bad grid, too much shared memory, no kernel
// image for this device) surface here; errors inside the kernel surface at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                 \
  do {                                                                     \
    cublasStatus_t spec_cublas_rc_ = (call);                               \
    SPEC_CHECK_GEN_(spec_cublas_rc_ == CUBLAS_STATUS_SUCCESS, #call,       \
                    cublasGetStatusName(spec_cublas_rc_)                   \
                        << ": " << cublasGetStatusString(spec_cublas_rc_), \
                    ::specrun::kExitFailure);                              \
  } while (0)

// `comm` may be nullptr (before a communicator exists); ncclGetLastError then reports the last
// error of any communicator of this process.
#define NCCL_CHECK(call, comm)                                                                  \
  do {                                                                                          \
    ncclResult_t spec_nccl_rc_ = (call);                                                        \
    SPEC_CHECK_GEN_(spec_nccl_rc_ == ncclSuccess, #call,                                        \
                    ncclGetErrorString(spec_nccl_rc_) << " (" << ncclGetLastError(comm) << ")", \
                    ::specrun::kExitFailure);                                                   \
  } while (0)
