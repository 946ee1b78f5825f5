// CUDA backend smoke test (label "gpu"). Without a CUDA build or without a device it skips
// visibly, saying why.
#include <gtest/gtest.h>

#ifdef SPECRUN_HAVE_CUDA
#include "kernels/cuda/device_info.h"
#endif

TEST(Cuda, DeviceSelfTest) {
#ifndef SPECRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no GPU test to run";
#else
  std::string why;
  int n = specrun::cuda::device_count(&why);
  if (n == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  EXPECT_GT(specrun::cuda::nccl_runtime_version(), 0);
  for (int d = 0; d < n; ++d) specrun::cuda::self_test(d);
#endif
}
