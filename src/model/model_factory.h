// The models of one rank for the job's backend, and the communicator the engine uses with them.
// Build-independent: the CPU-only build has the same API and rejects parallel.backend = "cuda"
// with a clear error; the CUDA build adds CudaTransformer (cuda_transformer.h).
//
//   backend "cpu":  Transformer over the MPI tp group, `threads` OpenMP threads per rank.
//   backend "cuda": one device per rank, chosen by local rank (dist/nccl_comm.h
//                   choose_device), its compute stream and cuBLAS handle, an NcclComm of the tp
//                   group (and a one-rank one for replicated drafts), CudaTransformer models.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/mpi_comm.h"
#include "dist/world.h"
#include "model/language_model.h"

namespace specrun {

class Checkpoint;

class ModelFactory {
 public:
  // Throws (exit code 2) when `backend` is not "cpu" or "cuda", or is "cuda" in a build without
  // CUDA. Cheap: call it before loading anything.
  static void check_backend(const std::string& backend);

  // Collective over tp_comm for "cuda" (NCCL bootstrap). tp_comm and self_comm (MPI_COMM_SELF)
  // must outlive the factory; the factory must outlive every model it makes.
  // comm_timeout_s: parallel.comm_timeout_s, the deadline of every wait on the device.
  ModelFactory(const std::string& backend, MpiComm& tp_comm, MpiComm& self_comm, const World& world,
               int threads, double comm_timeout_s);
  ~ModelFactory();
  ModelFactory(const ModelFactory&) = delete;
  ModelFactory& operator=(const ModelFactory&) = delete;

  // Loads a model: sharded over the tp group (all its ranks call), or replicated (a whole copy
  // on this rank, no communication). `checkpoint` must outlive a CPU model (its weights view
  // the mapped files); a CUDA model copies what it needs to the device.
  std::unique_ptr<LanguageModel> load(const Checkpoint& checkpoint, bool sharded);

  // The tp group's communicator for the engine's decisions (host buffers). On "cuda" it is the
  // NcclComm of the models, so its comm_seconds() also holds the NCCL time of forward passes.
  Communicator& tp_comm();

  // "cpu, 4 threads" or "cuda device 0 (NVIDIA H200, GPU-<uuid>, sm_90, SASS sm_90)", plus a
  // note worth logging when there is one (per-task GPU binding).
  const std::string& description() const { return description_; }

 private:
  struct Cuda;
  std::string backend_;
  MpiComm& tp_mpi_;
  MpiComm& self_mpi_;
  World world_;
  int threads_;
  double comm_timeout_s_;
  std::string description_;
  std::unique_ptr<Cuda> cuda_;
};

}  // namespace specrun
