// Parameter sweeps (`specrun sweep`, slurm/sweep.sbatch): a grid of job options, one run and
// one result file per point.
//
// Grid syntax, one axis per --grid (or per word of SPECRUN_SWEEP_GRID for Slurm):
//   decode.draft_len=1,2,4,8                    one key, comma-separated values
//   decode.tree_top_k+decode.tree_depth+decode.tree_nodes=1/4/4,4/5/15
//                                               coupled keys joined by '+', each value a
//                                               '/'-separated tuple (chains and trees in one axis)
// Points are the Cartesian product of the axes, the first axis varying slowest.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace specrun {

struct GridAxis {
  std::vector<std::string> keys;                 // "decode.draft_len", or coupled keys
  std::vector<std::vector<std::string>> values;  // per value: one entry per key
};

// Parses one axis; throws specrun::Error (exit code 2) naming the text and what is wrong.
GridAxis parse_grid_axis(const std::string& text);

struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> sets;  // key, value: --set key=value
  std::string name;  // "draft_len=4_temperature=0.8": the file name, without ".h5"
};

// Every point of the grid, in order (first axis slowest). Throws when a key appears twice.
std::vector<SweepPoint> sweep_points(const std::vector<GridAxis>& axes);

}  // namespace specrun
