// Pieces shared by the two kinds of `specrun run` job (engine/job_runner.cpp: baseline and
// speculative decoding into a result file; engine/dataset_job.cpp: dataset generation).
#pragma once

#include "config/job_config.h"

namespace specrun {

class Checkpoint;

// target.dtype against the checkpoint's stored type: "auto" accepts any; otherwise they must
// match (weights are kept in their checkpoint dtype). Throws (exit code 2) with advice.
void check_target_dtype(const JobConfig& config, const Checkpoint& checkpoint);

}  // namespace specrun
