#include "engine/job_runner.h"

#include "common/error.h"

#include "engine/dataset_job.h"
#include "engine/decode_job.h"

namespace specrun {

int run_job(const JobConfig& config, MpiSession& mpi, const RunOptions& options) {
  SPEC_INPUT_CHECK(!(options.preflight && config.uses_mode(kModeDataset)),
                   "specrun preflight checks decoding jobs; a decode.modes = [\"dataset\"] job is "
                   "checked by `specrun run` itself before it writes");
  JobSetup job(config, mpi);
  if (config.uses_mode(kModeDataset)) return run_dataset_job(config, options, job);
  return run_decode_job(config, options, job);
}

}  // namespace specrun
