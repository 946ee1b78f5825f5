// What a rank does with a recorded step (StepGraphs::end, step_graphs.h), as one number that the
// ranks of a tensor-parallel group compare with one min/max reduction. NCCL treats whether a
// collective is captured as a collective property: every rank of the communicator must capture
// it, or run it eagerly, together, and a graph holding captured collectives must be replayed by
// every rank, each with its graph from that same capture. Plain arithmetic (no CUDA), so that
// the rule is tested on any machine.
#pragma once

#include <cstdint>

namespace specrun::cuda {

inline constexpr std::int64_t kStepEager = 0;    // run the recorded launches one by one
inline constexpr std::int64_t kStepCapture = 1;  // capture them into a new graph, launch it
// kStepReplay + s: replay the graph made by capture number s of this StepGraphs (the captures
// of a group's ranks are numbered alike, since they capture together).
inline constexpr std::int64_t kStepReplay = 2;

// The group's choice from the smallest and the largest of its ranks' choices: the same on every
// rank -> that; some rank runs eagerly (a first sight, an allocation while recording, no room
// for a graph) -> all do; otherwise (ranks would replay graphs of different captures, or some
// replay and some capture) -> every rank captures anew.
constexpr std::int64_t agreed_step_choice(std::int64_t lowest, std::int64_t highest) {
  if (lowest == highest) return lowest;
  if (lowest == kStepEager) return kStepEager;
  return kStepCapture;
}

}  // namespace specrun::cuda
