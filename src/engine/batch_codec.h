// Serialisation of a BatchResult for the gather to rank 0 at batch boundaries (CBOR via
// nlohmann-json). Rank 0 merges the tp ranks' timing rows into one [steps x tp x phases] array.
#pragma once

#include <string>
#include <vector>

#include "io/records.h"

namespace specrun {

// with_records = false encodes only the timings (what non-leader tp ranks contribute).
std::string encode_batch(const BatchResult& result, bool with_records);
BatchResult decode_batch(const std::string& bytes);

// Merges the results of the ranks of one tp group (index = tp rank; rank 0 holds the records)
// into one BatchResult whose timings are [n_steps x tp x phases]. Throws if the step counts
// differ (the ranks must have agreed on every decision).
BatchResult merge_group(const std::vector<BatchResult>& by_tp_rank);

}  // namespace specrun
