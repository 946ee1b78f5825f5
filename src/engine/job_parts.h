// Pieces shared by the two kinds of `specrun run` job (engine/job_runner.cpp: baseline and
// speculative decoding into a result file; engine/dataset_job.cpp: dataset generation).
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/job_config.h"
#include "io/provenance.h"
#include "io/result_file.h"
#include "model/model_config.h"

namespace specrun {

class Checkpoint;
class ModelFactory;
struct World;

// The identity every output file of the job records: build, layout, job text and hash, prompt
// file, every rank's provenance and their mismatches.
// `models`: the models attribute when the caller computed it already (models_json), else it
// is computed here.
ResultHeader job_header(const JobConfig& config, const World& world,
                        const std::string& prompts_hash,
                        const std::vector<ProvenanceRecord>& records,
                        const std::string* models = nullptr);

// The models attribute of the job's files (JSON text): the target's and the draft's directory
// fingerprinted by content (io/model_fingerprint.h), with their paths; `contents` false: the
// weights by size and header only. `specrun run` records that at the start and the whole
// contents when the job finishes.
std::string models_json(const JobConfig& config, bool contents = true);

// target.dtype against the checkpoint's stored type: "auto" accepts any; otherwise they must
// match (weights are kept in their checkpoint dtype). Throws (exit code 2) with advice.
void check_target_dtype(const JobConfig& config, const Checkpoint& checkpoint);

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

// The [parallel] section's CUDA launch settings (cuda_graphs, cuda_pdl, cuda_tensor_cores) on
// the factory's device, before its first pass; nothing on the CPU backend.
void configure_cuda(ModelFactory& factory, const JobConfig& config);

}  // namespace specrun
