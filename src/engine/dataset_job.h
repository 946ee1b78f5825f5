// A generation job: `specrun run JOB.toml` with decode.modes = ["dataset"]. engine/job_runner.cpp
// sets the job up (engine/job_setup.h: the prompt file checked, the ranks' provenance gathered,
// job.output claimed by rank 0 until the job ends), then hands it here.
//
// Every dp group decodes its stream of prompts (prompt i belongs to group i % dp, in prompt
// order) with continuous batching (engine/dataset_generator.h) and its tp rank 0 writes the
// group's shard (io/dataset_file.h); no step is synchronised across groups. When every group is
// done, rank 0 writes the top-level file job.output over the shards. Before anything is loaded,
// rank 0 estimates the bytes the job will write and refuses to start when the output's file
// system lacks them.
// SIGUSR1, SIGTERM or SIGINT to any one rank stops every group at one of its next step boundaries
// (engine/stop_request.h, StopVote), each sealing its open part (exit code 75); `run --resume`
// continues each shard from its last sealed part.
#pragma once

#include <string>
#include <vector>

#include "config/job_config.h"
#include "engine/job_setup.h"
#include "model/model_config.h"

namespace specrun {

// Returns the process exit code (0, or kExitStopped). Throws specrun::Error on failure.
int run_dataset_job(const JobConfig& config, const RunOptions& options, JobSetup& job);

// The capture ids of dataset.hidden_layers for a target of `config` (eagle3: {2, N/2, N-3},
// made strictly ascending within [1, N-1] for shallow targets: {2, 3, 4} for N = 6, {1, 2, 3}
// for N = 4; "final" is id N). Throws (exit code 2) naming the key.
std::vector<int> dataset_capture_layers(const std::string& hidden_layers,
                                        const ModelConfig& config);

}  // namespace specrun
