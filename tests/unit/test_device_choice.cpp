// Which CUDA device a rank drives (dist/nccl_comm.h choose_device): pure placement arithmetic,
// tested in every build, with and without GPUs.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "dist/nccl_comm.h"

using specrun::choose_device;
using specrun::Error;

TEST(DeviceChoice, OneRankPerVisibleGpuUsesTheLocalRank) {
  std::string note = "stale";
  for (int r = 0; r < 8; ++r) EXPECT_EQ(choose_device(r, 8, 8, &note), r);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_device(3, 4, 8), 3);  // more GPUs than ranks: the first ones
}

TEST(DeviceChoice, PerTaskBindingUsesDeviceZeroAndSaysWhy) {
  std::string note;
  EXPECT_EQ(choose_device(5, 8, 1, &note), 0);
  EXPECT_NE(note.find("per-task binding"), std::string::npos) << note;
  EXPECT_EQ(choose_device(0, 1, 1, &note), 0);
  EXPECT_TRUE(note.empty()) << "a single rank on a single GPU needs no remark";
}

TEST(DeviceChoice, TooFewOrNoDevicesIsAUsageError) {
  try {
    choose_device(3, 8, 4);
    FAIL() << "8 ranks on 4 visible GPUs must be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), specrun::kExitUsage);
    EXPECT_NE(e.message().find("only 4 CUDA devices"), std::string::npos) << e.message();
  }
  try {
    choose_device(0, 2, 0);
    FAIL() << "no visible device must be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), specrun::kExitUsage);
    EXPECT_NE(e.message().find("sees no CUDA device"), std::string::npos) << e.message();
  }
}
