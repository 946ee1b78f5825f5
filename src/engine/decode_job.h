// A decoding job: `specrun run JOB.toml` with decode.modes of baseline and speculative, into a
// result file (io/result_file.h). engine/job_runner.cpp sets the job up (engine/job_setup.h),
// then hands it here.
//
// Schedule: the prompts are cut into batches (io/prompt_file.h: batch b holds prompts
// [b*B, (b+1)*B)); batches are dealt round-robin to the dp groups. In round r, group g decodes
// batch r*dp + g in every mode of decode.modes, one after the other on the same ranks (so the
// baseline/speculative comparison is paired). At the end of each mode of each round, rank 0
// gathers the groups' records and timings (the only gather: nothing is synchronised per step),
// appends them to the result file and flushes it, and prints a progress line. SIGUSR1 or SIGTERM
// to any rank stops every rank at the next mode boundary (exit code 75) with every finished batch
// written; `run --resume` continues after them.
#pragma once

#include <string>

#include "backend/backend.h"
#include "config/job_config.h"
#include "engine/job_setup.h"
#include "model/model_config.h"

namespace specrun {

// Returns the process exit code (0, or kExitStopped). Throws specrun::Error on failure.
int run_decode_job(const JobConfig& config, const RunOptions& options, JobSetup& job);

// Whether the CUDA projections of a target with these weights and shapes can run on the tensor
// cores (cuda::gemv_tokens: BF16 weights, every projection input a multiple of 32).
bool tensor_core_projections(DType weights, const ModelConfig& target);

// On CUDA, a greedy speculative job whose verify passes (data.batch_size x window tokens) exceed
// what the target's projections keep batch-invariant (backend.h: kCudaBatchInvariantTokens, or
// kCudaTensorCoreBatchInvariantTokens with parallel.cuda_tensor_cores when
// tensor_core_projections) may differ from its baseline at a near-tie: the warning that says so,
// with the batch size (or the setting) that keeps the guarantee; empty when there is nothing to
// say. `weights`: the target checkpoint's stored type.
std::string batch_variance_warning(const JobConfig& config, BackendKind backend, DType weights,
                                   const ModelConfig& target);

}  // namespace specrun
