// `specrun run`: a batch job. Every rank of MPI_COMM_WORLD calls run_job with the same
// configuration (broadcast by rank 0 beforehand). The job is set up once (engine/job_setup.h:
// the world, its communicators and their timeouts, threads, the prompt file checked, every rank's
// provenance, job.output claimed), then run as a decoding job into a result file
// (engine/decode_job.h) or, with decode.modes = ["dataset"], as a dataset job
// (engine/dataset_job.h).
#pragma once

#include "config/job_config.h"
#include "engine/job_setup.h"

namespace specrun {

class MpiSession;

// Returns the process exit code (0 on success, kExitStopped when a signal stopped it). Throws
// specrun::Error on failure.
int run_job(const JobConfig& config, MpiSession& mpi, const RunOptions& options);

}  // namespace specrun
