// Serialisation of a BatchResult for the gather to rank 0 at batch boundaries (CBOR via
// nlohmann-json). Rank 0 merges the tp ranks' per-step rows (timings, CPU rows) into
// [steps x tp x width] arrays and their host snapshots into [tp x fields], then places a group's
// ranks among the world's (place_group).
#pragma once

#include <string>
#include <vector>

#include "io/records.h"

namespace specrun {

// with_records = false encodes only the per-rank parts: timings, CPU rows, host snapshot (what
// non-leader tp ranks contribute).
std::string encode_batch(const BatchResult& result, bool with_records);
BatchResult decode_batch(const std::string& bytes);

// Merges the results of the ranks of one tp group (index = tp rank; rank 0 holds the records)
// into one BatchResult whose timings are [n_steps x tp x phases] (CPU rows, device rows and host
// snapshots likewise; device rows stay empty when no rank sent any). Throws if the step counts
// differ (the ranks must have agreed on every decision).
BatchResult merge_group(const std::vector<BatchResult>& by_tp_rank);

// A group's merged result (n_ranks = tp) widened to the world: its ranks' values at world ranks
// [first_rank, first_rank + tp), NaN (and "" busy lists) for every other rank.
BatchResult place_group(BatchResult group, int first_rank, int world_size);

}  // namespace specrun
