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

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace specrun {

// The most points a grid may have: each is one mpirun, so more is a mistake (a 10^9-point grid
// would only run out of memory while its points are listed).
inline constexpr std::int64_t kMaxSweepPoints = 100000;
// The longest point name: with ".log" it must fit a file name of 255 bytes.
inline constexpr std::size_t kMaxPointNameBytes = 251;

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

// The number of points of the grid, saturated at INT64_MAX; computed without listing them.
std::int64_t sweep_point_count(const std::vector<GridAxis>& axes);

// Every point of the grid, in order (first axis slowest). Throws specrun::Error (exit code 2),
// before listing anything, when a key appears twice or the grid has more than kMaxSweepPoints
// points; then when two points would share a file name (their values differ only in characters
// the name replaces, e.g. "a/b" and "a_b") or a name is longer than kMaxPointNameBytes, naming
// the points: so no point is ever skipped as "finished" because of another point's file.
std::vector<SweepPoint> sweep_points(const std::vector<GridAxis>& axes);

// What a sweep finds at a point's result file before running the point.
struct PointFile {
  enum class State {
    kAbsent,      // run the point
    kFinished,    // the point's own finished run: skip it
    kUnfinished,  // continue it (`run --resume` checks it is this point's run)
    kRefused,     // not this point's result, or unreadable: `reason` says why; nothing runs
  };
  State state = State::kAbsent;
  std::string reason;
};

// Reads `path` in a child process (io/checked_read.h: a corrupted file that crashes or hangs
// libhdf5 is refused, never read in this process). A finished file counts as the point's only
// when it records `config_hash` (config_hash_hex of the point's job, as `run --resume` checks);
// a symbolic link or a file that is not a specrun result is refused.
PointFile inspect_point_file(const std::string& path, const std::string& config_hash);

}  // namespace specrun
