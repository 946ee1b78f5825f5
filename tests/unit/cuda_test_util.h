// Test helpers of the GPU tests (label "gpu"): the one device context of a test program, and
// the skip that makes a GPU test visible as skipped where there is no device.
#pragma once

#ifdef SPECRUN_HAVE_CUDA

#include <memory>
#include <string>

#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"

namespace specrun::test {

// Device 0's context, made on first use; nullptr without a device.
inline cuda::DeviceContext* device_context() {
  static std::unique_ptr<cuda::DeviceContext> ctx = [] {
    std::unique_ptr<cuda::DeviceContext> c;
    if (cuda::device_count() > 0) c = std::make_unique<cuda::DeviceContext>(0);
    return c;
  }();
  return ctx.get();
}

}  // namespace specrun::test

// Skips the current test, saying why, when no CUDA device is visible.
#define REQUIRE_DEVICE()                                                           \
  do {                                                                             \
    std::string why_no_device;                                                     \
    if (::specrun::cuda::device_count(&why_no_device) == 0)                        \
      GTEST_SKIP() << "no CUDA device visible (" << why_no_device << "): skipped"; \
  } while (0)

#endif  // SPECRUN_HAVE_CUDA
