// What the CUDA runtime sees on this process: device count and names. Built only with
// -DSPECRUN_CUDA=ON; the CPU build has no CUDA symbols at all.
#pragma once

#include <string>
#include <vector>

namespace specrun::cuda {

// Number of visible devices; 0 (with `error` set) when the runtime or driver is unavailable.
int device_count(std::string* error = nullptr);

// Runs a trivial kernel on `device` (adds 1 to a buffer) and checks the result: proves the
// build's device code matches the GPU (sm_80 / sm_90). Throws specrun::Error on failure.
void self_test(int device);

// NCCL version linked at run time, encoded as NCCL_VERSION_CODE.
int nccl_runtime_version();

}  // namespace specrun::cuda
