#include "engine/job_runner.h"

#include "engine/dataset_job.h"
#include "engine/decode_job.h"

namespace specrun {

int run_job(const JobConfig& config, MpiSession& mpi, const RunOptions& options) {
  JobSetup job(config, mpi);
  if (config.uses_mode(kModeDataset)) return run_dataset_job(config, options, job);
  return run_decode_job(config, options, job);
}

}  // namespace specrun
