// The rule by which the ranks of a tensor-parallel group agree on what to do with a recorded
// step (kernels/cuda/step_graph_choice.h; NcclComm::agree_step reduces the choices with MPI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/step_graph_choice.h"

namespace {

using namespace specrun::cuda;

// What the group decides from its ranks' choices, as agree_step computes it from one max
// reduction of (choice, -choice).
std::int64_t group_choice(const std::vector<std::int64_t>& mine) {
  const auto [lo, hi] = std::minmax_element(mine.begin(), mine.end());
  return agreed_step_choice(*lo, *hi);
}

TEST(StepGraphChoice, AUnanimousChoiceStands) {
  for (std::int64_t c : {kStepEager, kStepCapture, kStepReplay, kStepReplay + 7})
    EXPECT_EQ(group_choice({c, c, c, c}), c);
}

TEST(StepGraphChoice, OneEagerRankMakesTheStepEagerEverywhere) {
  EXPECT_EQ(group_choice({kStepCapture, kStepEager}), kStepEager);
  EXPECT_EQ(group_choice({kStepReplay + 3, kStepReplay + 3, kStepEager}), kStepEager);
  EXPECT_EQ(group_choice({kStepEager, kStepReplay, kStepCapture}), kStepEager);
}

TEST(StepGraphChoice, ReplaysOfDifferentCapturesOrAReplayAndACaptureCaptureAnew) {
  EXPECT_EQ(group_choice({kStepReplay + 2, kStepReplay + 5}), kStepCapture);
  EXPECT_EQ(group_choice({kStepReplay + 2, kStepCapture}), kStepCapture);
  EXPECT_EQ(group_choice({kStepCapture, kStepCapture, kStepReplay}), kStepCapture);
}

// Every rank can carry out the group's choice: it is the rank's own, eager (always possible),
// or a capture where the rank chose a capture or a replay (it has room, or replaces that graph).
// Exhaustive over groups of 1 to 4 ranks and the choices eager, capture, replay of captures 0-2.
TEST(StepGraphChoice, EveryRankCanCarryOutTheGroupsChoice) {
  const std::vector<std::int64_t> kinds = {kStepEager, kStepCapture, kStepReplay, kStepReplay + 1,
                                           kStepReplay + 2};
  const int k = static_cast<int>(kinds.size());
  for (int ranks = 1; ranks <= 4; ++ranks) {
    int combos = 1;
    for (int r = 0; r < ranks; ++r) combos *= k;
    for (int code = 0; code < combos; ++code) {
      std::vector<std::int64_t> mine;
      for (int r = 0, c = code; r < ranks; ++r, c /= k) mine.push_back(kinds[c % k]);
      const std::int64_t group = group_choice(mine);
      for (std::int64_t m : mine)
        EXPECT_TRUE(group == m || group == kStepEager || (group == kStepCapture && m > group))
            << "rank choice " << m << ", group " << group;
      // A replay only when every rank replays the same capture's graph.
      if (group >= kStepReplay) {
        EXPECT_TRUE(std::all_of(mine.begin(), mine.end(), [&](auto m) { return m == group; }));
      }
    }
  }
}

}  // namespace
