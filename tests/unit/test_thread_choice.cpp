// The OpenMP threads per rank (engine/job_setup.h choose_threads) and the reason printed at
// start-up: parallel.threads wins over OMP_NUM_THREADS and says so; with parallel.threads = 0 a
// set OMP_NUM_THREADS is used (its first value), a malformed one is an error naming it; else the
// node's cores divided among its ranks.
#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/job_setup.h"

using namespace specrun;

TEST(ThreadChoice, ParallelThreadsWinsOverOmpNumThreadsAndSaysSo) {
  ThreadChoice c = choose_threads(4, "2", 16, 2);
  EXPECT_EQ(c.threads, 4);
  EXPECT_EQ(c.why, "parallel.threads = 4, over OMP_NUM_THREADS=2");
  c = choose_threads(3, nullptr, 16, 2);
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.why, "parallel.threads = 3");
}

TEST(ThreadChoice, AutomaticUsesOmpNumThreadsThenTheCores) {
  ThreadChoice c = choose_threads(0, "2", 16, 4);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.why, "OMP_NUM_THREADS=2 (parallel.threads = 0)");
  EXPECT_EQ(choose_threads(0, "6,2", 16, 4).threads, 6);  // nesting levels: the first is ours
  c = choose_threads(0, nullptr, 16, 4);
  EXPECT_EQ(c.threads, 4);
  EXPECT_EQ(c.why, "16 cores / 4 ranks on the node (parallel.threads = 0, OMP_NUM_THREADS unset)");
  EXPECT_EQ(choose_threads(0, "", 2, 8).threads, 1);  // empty = unset; never 0 threads
}

TEST(ThreadChoice, MalformedOmpNumThreadsIsAnErrorNamingIt) {
  for (const char* bad : {"0", "-2", "two", ",4", "99999999"}) {
    try {
      choose_threads(0, bad, 16, 1);
      ADD_FAILURE() << "OMP_NUM_THREADS=" << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage) << bad;
      EXPECT_NE(e.message().find(std::string("OMP_NUM_THREADS=") + bad), std::string::npos)
          << e.message();
      EXPECT_NE(e.message().find("parallel.threads"), std::string::npos) << e.message();
    }
  }
  EXPECT_EQ(choose_threads(2, "two", 16, 1).threads, 2);  // not used: not an error
}
