// libFuzzer target: the result file reader on arbitrary bytes (mutated HDF5 files, from the seed
// corpus) as `report`, `compare` and `--resume` read them: the whole file in a child process
// first (check_result_file), then everything in this process.
#include <cstdint>
#include <string>

#include "common/error.h"
#include "io/checked_read.h"
#include "io/result_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = specrun::fuzz::write_input("result.h5", data, size);
  try {
    specrun::check_result_file(path);
    specrun::ResultReader reader(path);
    for (const std::string& mode : reader.modes()) {
      (void)reader.draft_len(mode);
      (void)reader.batches_committed(mode);
      (void)reader.committed_batches(mode);
      (void)reader.committed_prompt_indices(mode);
      (void)reader.sequences(mode);
      (void)reader.steps(mode);
      const specrun::TimingTable t = reader.timings(mode);
      if (t.rows < 0 || t.ms.size() != static_cast<size_t>(t.rows) * static_cast<size_t>(t.ranks) *
                                           t.phases.size())
        __builtin_trap();
      (void)reader.accepted_per_position(mode);
    }
  } catch (const specrun::Error& e) {
    specrun::fuzz::count_refusal(e.what());
  }
  return 0;
}
