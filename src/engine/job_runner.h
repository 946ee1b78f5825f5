// `specrun run`: the batch job. Every rank of MPI_COMM_WORLD calls run_job with the same
// configuration (broadcast by rank 0 beforehand).
//
// Schedule: the prompts are cut into batches (io/prompt_file.h: batch b holds prompts
// [b*B, (b+1)*B)); batches are dealt round-robin to the dp groups. In round r, group g decodes
// batch r*dp + g in every mode of decode.modes, one after the other on the same ranks (so the
// baseline/speculative comparison is paired). At the end of each mode of each round, rank 0
// gathers the groups' records and timings (the only gather: nothing is synchronised per step),
// appends them to the result file and flushes it, and prints a progress line.
#pragma once

#include <string>

#include "config/job_config.h"

namespace specrun {

class MpiSession;

struct RunOptions {
  bool resume = false;  // continue an interrupted result file (job.output)
};

// Returns the process exit code (0 on success). Throws specrun::Error on failure.
int run_job(const JobConfig& config, MpiSession& mpi, const RunOptions& options);

}  // namespace specrun
