// libFuzzer target: what `specrun sweep` reads from an existing point file (mutated HDF5 result
// files, from the seed corpus): inspect_point_file reads the header in a child process
// (check_result_head; a file that crashes or hangs libhdf5 there is refused) and decides whether
// the point is finished, to be resumed or refused. Checked beyond "no crash": a refusal says why,
// and whenever the child's read was accepted, this process's own read of the file agrees with it
// (finished, and the configuration hash that decides a skip).
#include <cstdint>
#include <string>

#include "analysis/sweep.h"
#include "common/error.h"
#include "io/result_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = specrun::fuzz::write_input("point.h5", data, size);
  using State = specrun::PointFile::State;
  // The hash of a finished seed (result-contiguous.h5), so that both the skip and the refusal of a
  // finished file of another configuration are reached.
  const std::string point_hash = "0x1575400f15ecf561";
  const specrun::PointFile state = specrun::inspect_point_file(path, point_hash);
  if (state.state == State::kAbsent) __builtin_trap();  // the file exists
  if ((state.state == State::kRefused) != !state.reason.empty()) __builtin_trap();
  if (state.state == State::kRefused) {
    specrun::fuzz::count_refusal(state.reason);
    return 0;
  }
  try {
    const specrun::ResultReader reader(path);
    const bool finished = !reader.info().finished.empty();
    if (finished != (state.state == State::kFinished)) __builtin_trap();
    if (finished && reader.info().header.config_hash != point_hash) __builtin_trap();
  } catch (const specrun::Error&) {
    __builtin_trap();  // the child opened it: so must this process
  }
  return 0;
}
