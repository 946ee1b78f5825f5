#include <gtest/gtest.h>

#include "common/error.h"
#include "dist/world.h"

using specrun::Error;
using specrun::World;

TEST(World, DerivesGridFromRankAndTp) {
  // 8 ranks, tp 2: groups {0,1} {2,3} {4,5} {6,7}.
  for (int rank = 0; rank < 8; ++rank) {
    World w = World::make(rank, 8, rank, 8, 2);
    EXPECT_EQ(w.dp, 4);
    EXPECT_EQ(w.tp_rank, rank % 2);
    EXPECT_EQ(w.dp_index, rank / 2);
    EXPECT_EQ(w.tp_group_first_rank(), (rank / 2) * 2);
    EXPECT_EQ(w.is_tp_leader(), rank % 2 == 0);
  }
}

TEST(World, TpEqualsSizeIsOneGroup) {
  World w = World::make(5, 8, 5, 8, 8);
  EXPECT_EQ(w.dp, 1);
  EXPECT_EQ(w.tp_rank, 5);
  EXPECT_EQ(w.dp_index, 0);
}

TEST(World, SingleRank) {
  World w = World::make(0, 1, 0, 1, 1);
  EXPECT_TRUE(w.is_root());
  EXPECT_EQ(w.dp, 1);
}

TEST(World, SizeNotDivisibleByTpIsAUsageError) {
  try {
    World::make(0, 6, 0, 6, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("not divisible by parallel.tp = 4"), std::string::npos)
        << e.what();
  }
}

TEST(World, TpBelowOneIsAUsageError) {
  EXPECT_THROW(World::make(0, 2, 0, 2, 0), Error);
}
