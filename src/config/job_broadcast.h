// Loading the job on every rank: rank 0 reads the file, every rank parses the same text with
// the same overrides, and the ranks prove they agree by comparing configuration hashes.
#pragma once

#include <string>
#include <vector>

#include "config/job_config.h"
#include "dist/communicator.h"

namespace specrun {

// Collective over `comm`: every rank calls it. Rank 0 reads and parses `path` with `overrides`
// (only rank 0's path and overrides are used; the other ranks receive them). On failure every
// rank throws an Error with rank 0's message and exit code (no rank waits forever). On success
// rank 0 broadcasts the file text, its directory and the overrides, every rank parses them,
// and check_config_agreement runs. Returns the same JobConfig on every rank. `extra`: checks of
// other layers (ConfigValidator), run with the built-in ones.
JobConfig load_job_on_all_ranks(const std::string& path, const std::vector<std::string>& overrides,
                                Communicator& comm, const ConfigValidator& extra = {});

// Collective over `comm`: all-gathers config_hash(config) and throws on every rank (exit code
// 1), naming the ranks whose hash differs from rank 0's, when they are not all equal.
void check_config_agreement(const JobConfig& config, Communicator& comm);

}  // namespace specrun
