// The models of one rank on the job's backend, and the communicator the engine uses with them.
// Build-independent: the CPU-only build has the same API and rejects the CUDA backend with a
// clear error (parse_backend). `run`, `generate` and `bench` all build their models here.
//
//   cpu:  LlamaModel<CpuBackend> over the MPI tp group, `threads` OpenMP threads per rank.
//   cuda: one device per rank, chosen by local rank (dist/nccl_comm.h choose_device), its
//         compute stream and cuBLAS handle, an NcclComm of the tp group (and a one-rank one for
//         replicated models): LlamaModel<CudaBackend> (backend/cuda_backend.h).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/device_timeline.h"
#include "common/host_stats.h"
#include "dist/communicator.h"
#include "dist/mpi_comm.h"
#include "dist/world.h"
#include "model/draft_head.h"
#include "model/language_model.h"

namespace specrun {

class Checkpoint;
class CudaContext;

// How a CUDA rank launches its forward passes (the [parallel] section's cuda_* keys).
struct CudaLaunchOptions {
  bool step_graphs = true;       // parallel.cuda_graphs: decode/verify/draft passes as graphs
  bool dependent_launch = true;  // parallel.cuda_pdl: a step graph's projections as programmatic
                                 // dependent launches (compute capability 9.0 on)
  bool tensor_cores = false;     // parallel.cuda_tensor_cores: decode and verify projections of
                                 // BF16 weights on the tensor cores (kernels/cuda/gemv_mma.cu)
  bool fused_ops = true;         // parallel.cuda_fused_ops: RoPE, RMSNorm and residual adds
                                 // inside the kernels beside them
};

class ModelFactory {
 public:
  // Collective over tp_comm for CUDA (NCCL bootstrap). tp_comm and self_comm (MPI_COMM_SELF)
  // must outlive the factory; the factory must outlive every model it makes.
  // comm_timeout_s: parallel.comm_timeout_s, the deadline of every wait on the device.
  ModelFactory(BackendKind backend, MpiComm& tp_comm, MpiComm& self_comm, const World& world,
               int threads, double comm_timeout_s);
  ~ModelFactory();
  ModelFactory(const ModelFactory&) = delete;
  ModelFactory& operator=(const ModelFactory&) = delete;

  BackendKind backend() const { return backend_; }

  // Loads a model: sharded over the tp group (all its ranks call), or replicated (a whole copy
  // on this rank, no communication). The checkpoint is not needed afterwards.
  std::unique_ptr<LanguageModel> load(const Checkpoint& checkpoint, bool sharded);
  // Loads the draft head in `dir` (its kind read from its config.json: HeadConfig::from_dir) for
  // the target in `target`: sharded over the tp group like the target (all its ranks call), or
  // replicated (a whole copy on this rank).
  // mtp_chain_shared_head_norm: an MTP head's MtpConfig::chain_shared_head_norm.
  std::unique_ptr<DraftHead> load_head(const std::string& dir, const Checkpoint& target,
                                       bool sharded, bool mtp_chain_shared_head_norm = false);

  // The tp group's communicator for the engine's decisions (host buffers). On CUDA it is the
  // NcclComm of the models, so its comm_seconds() also holds the NCCL time of forward passes.
  Communicator& tp_comm();

  // The rank's CUDA state (nullptr on the CPU backend): token decisions run on its stream.
  CudaContext* cuda_context();

  // The device's own clock for the engine's phase timing (common/device_timeline.h): CUDA events
  // on the rank's stream; nullptr on the CPU backend. Owned by the factory.
  DeviceTimeline* device_timeline() { return timeline_.get(); }

  // CUDA: how this rank's passes are launched (CudaLaunchOptions); nothing on the CPU backend.
  void set_cuda_launch(const CudaLaunchOptions& options);
  // Expert parallelism of the mixture-of-experts models it loads sharded (parallel.ep: 0 = tp,
  // 1, or tp; weight_schema.h); replicated models hold every expert.
  void set_expert_parallel(int ep) { ep_ = ep; }
  // CUDA: "step graphs on: R of S passes replayed, C graphs captured (M ms), E launched one by
  // one, U not recorded (...)"; empty on the CPU backend.
  std::string step_graph_report() const;

  // CUDA: fills the GPU fields of a host snapshot (common/host_stats.h: clocks, temperature,
  // power, slowdown reasons, ECC errors, XID events) from NVML for this rank's device; they stay
  // NaN on the CPU backend or where NVML cannot read them.
  void sample_device(HostSnapshot& snapshot);

  // "cpu, 4 threads" or "cuda device 0 (NVIDIA H200, GPU-<uuid>, sm_90, SASS sm_90)", plus a
  // note worth logging when there is one (per-task GPU binding).
  const std::string& description() const { return description_; }
  // What computes the models, for reports: the CPU kernel variant in use
  // (cpu::describe_kernel_choice, "avx512 (best for this CPU)") on the CPU backend, description()
  // on a device.
  std::string kernel_description() const;

 private:
  BackendKind backend_;
  MpiComm& tp_mpi_;
  MpiComm& self_mpi_;
  World world_;
  int threads_;
  int ep_ = 0;
  std::string description_;
  std::unique_ptr<CudaContext> cuda_;
  std::unique_ptr<DeviceTimeline> timeline_;  // declared after cuda_: destroyed before it
  struct DeviceSampler;                       // NVML, opened at the first sample_device
  std::unique_ptr<DeviceSampler> sampler_;
};

// A CPU model outside a job (tests, tools): this rank's shard for the group `tp_comm`, with
// expert parallelism ep for MoE layers (0: tp).
std::unique_ptr<LanguageModel> load_cpu_model(const Checkpoint& checkpoint, Communicator& tp_comm,
                                              int threads, int ep = 0);
// A draft head on the CPU (config: HeadConfig::from_dir of the head for this target, or a kind's
// own config), sharded over tp_comm, or whole when it is nullptr.
std::unique_ptr<DraftHead> load_cpu_head(const Checkpoint& head, const Checkpoint& target,
                                         const HeadConfig& config, int threads,
                                         Communicator* tp_comm = nullptr);

#ifdef SPECRUN_HAVE_CUDA
class NcclComm;
// A CUDA model on `context`'s device, sharded over `comm` (context.tp() or context.self()).
std::unique_ptr<LanguageModel> load_cuda_model(const Checkpoint& checkpoint, CudaContext& context,
                                               NcclComm& comm, int ep = 0);
// The DeepSeek-V3 family (multi-head latent attention, its MoE layers) on CUDA:
// DeepseekModel<CudaBackend>, compiled but not yet verified on a GPU, so load_cuda_model refuses
// it (docs/gpu.md). For the GPU tests only (tests/unit/test_cuda_transformer.cpp), which compare
// it with the CPU backend.
std::unique_ptr<LanguageModel> load_cuda_mla_model_unverified(const Checkpoint& checkpoint,
                                                              CudaContext& context, NcclComm& comm,
                                                              int ep = 0);
std::unique_ptr<DraftHead> load_cuda_head(const Checkpoint& head, const Checkpoint& target,
                                          const HeadConfig& config, CudaContext& context,
                                          NcclComm* tp_comm = nullptr);
#endif

}  // namespace specrun
