// What every `specrun run` job does before its own work, and the pieces both kinds of job use
// (engine/decode_job.h: baseline and speculative decoding into a result file;
// engine/dataset_job.h: dataset generation). engine/job_runner.cpp sets a job up, then hands it
// to one of them; neither calls back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/log.h"
#include "config/job_config.h"
#include "dist/mpi_comm.h"
#include "dist/world.h"
#include "io/output_lock.h"
#include "io/prompt_file.h"
#include "io/provenance.h"
#include "io/result_file.h"
#include "model/language_model.h"
#include "spec/sampling.h"
#include "spec/token_ops.h"

namespace specrun {

class Checkpoint;
class ModelFactory;

struct RunOptions {
  bool resume = false;  // continue an interrupted job (job.output)
  // `specrun preflight`: everything `run` does up to its first step (the job, the prompts, the
  // output path, the models and the drafter loaded as the job would, the draft checked against
  // the target), then a verdict; no result file is written and nothing is decoded.
  bool preflight = false;
};

// A job set up on this rank, everything checked that can be before a model loads. Every rank of
// MPI_COMM_WORLD constructs it with the same configuration (collective), in this order:
//   - the world (dp x tp), parallel.backend, data.prompts and target.path given;
//   - the communicators: the world's, whose collectives (start-up, each batch's stop agreement
//     and gather, the end of the job) fail the job once a rank they wait for is stopped or dead
//     past parallel.comm_timeout_s (MpiComm::Overdue::kFailsIfStopped: ranks that run are waited
//     for, since between them a dp group decodes alone, or rank 0 checks or fingerprints alone);
//     the tensor-parallel group's, which fails on any wait past it (the CUDA backend bounds its
//     device waits with the same value); this rank's own;
//   - the OpenMP threads per rank (choose_threads: parallel.threads, OMP_NUM_THREADS, or the
//     node's cores among its ranks);
//   - rank 0 reads the whole prompt file in a child process (a corrupted file that would crash
//     or hang libhdf5 fails the job with a clear message), checks the prompt lengths against the
//     target's context from the offsets alone (a file declaring one enormous prompt is refused
//     at once) and hashes it; then every rank opens it;
//   - every rank's provenance, gathered before anything heavy happens;
//   - rank 0 claims job.output (io/output_lock.h) until the job ends: another job writing it, or
//     its replacement, would remove or rename this one's files. A job.output whose directory is
//     missing is left to the job's own checks, with their message.
// The OpenMP threads per rank and why (for the start-up line): parallel.threads when set, which
// wins over OMP_NUM_THREADS (then named as overridden); else OMP_NUM_THREADS's first value when
// set (a Slurm script's --cpus-per-task); else the node's cores divided among its local ranks. A
// set OMP_NUM_THREADS that is not a positive integer list is an input error naming it when it
// would be used. omp_num_threads: the variable's value, nullptr when unset.
struct ThreadChoice {
  int threads = 1;
  std::string why;  // "parallel.threads = 4, over OMP_NUM_THREADS=2", "OMP_NUM_THREADS=2", ...
};
ThreadChoice choose_threads(int configured, const char* omp_num_threads, unsigned cores,
                            int local_ranks);

struct JobSetup {
  JobSetup(const JobConfig& config, MpiSession& mpi);
  JobSetup(const JobSetup&) = delete;
  JobSetup& operator=(const JobSetup&) = delete;

  const World world;
  const Logger log;
  const BackendKind backend;
  MpiComm world_comm;
  MpiComm tp_comm;
  MpiComm self_comm;
  const ThreadChoice thread_choice;
  const int threads;         // thread_choice.threads
  std::string prompts_hash;  // rank 0 only
  PromptReader prompts;
  const std::int64_t n_prompts;  // the prompts the job decodes: the first data.max_prompts, or all
  std::vector<ProvenanceRecord> records;  // every rank's, in rank order
  OutputLock output_lock;                 // rank 0
};

// This rank's target: the factory on the job's backend (with the [parallel] section's CUDA launch
// settings, before its first pass), the model sharded over the tp group (all its ranks call) and
// its token decisions. Members are destroyed in reverse order: the factory last.
// load_target logs rank 0's weight memory (weight_memory_line) and gathers every rank's
// (LanguageModel::weight_bytes) over the world for the result file (ResultHeader), logging them
// too when they differ.
struct JobTarget {
  std::unique_ptr<ModelFactory> factory;
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<TokenOps> ops;
  std::vector<std::int64_t> weight_bytes;  // per world rank: LanguageModel::weight_bytes
};
JobTarget load_target(const JobConfig& config, JobSetup& job, const Checkpoint& checkpoint);
// "target weights: 812.3 MiB per rank (tp 2, ep 2: 8 of 16 experts per rank, 6.0 MiB per
// expert)": the line load_target logs (rank 0; every rank of a group holds an equal share).
std::string weight_memory_line(const LanguageModel& model, const World& world);

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

// Preflight (issue 47: a draft worker that silently loaded the target as its draft): "" or the
// warning that a job's draft model is its target. draft_is_target: draft.path names the target's
// folder (the same directory, through links too). same_model_contents: the models attribute
// (models_json with contents) gives the draft the target's content fingerprint, from another
// folder (a copy). The job runs on (self-speculation is a legitimate upper bound), and the
// warning is recorded among the result file's alarms.
std::string draft_is_target(const JobConfig& config);
std::string same_model_contents(const std::string& models_json_text);

// The job's [decode] sampling settings (temperature, top_k, top_p) as the samplers take them.
SamplingParams sampling_params(const JobConfig& config);

// target.dtype against the checkpoint's stored type: "auto" accepts any; otherwise they must
// match (weights are kept in their checkpoint dtype). Throws (exit code 2) with advice.
void check_target_dtype(const JobConfig& config, const Checkpoint& checkpoint);

}  // namespace specrun
