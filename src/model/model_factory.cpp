#include "model/model_factory.h"

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/transformer.h"

#ifdef SPECRUN_HAVE_CUDA
#include "dist/nccl_comm.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "model/cuda_transformer.h"
#endif

namespace specrun {

#ifdef SPECRUN_HAVE_CUDA
// Destroyed in reverse order: communicators before the device context whose stream they use.
struct ModelFactory::Cuda {
  std::unique_ptr<cuda::DeviceContext> device;
  std::unique_ptr<NcclComm> tp;
  std::unique_ptr<NcclComm> self;  // made on first use, for replicated drafts
};
#else
struct ModelFactory::Cuda {};
#endif

void ModelFactory::check_backend(const std::string& backend) {
  SPEC_INPUT_CHECK(backend == "cpu" || backend == "cuda",
                   "parallel.backend = \"" << backend << "\" is unknown: use \"cpu\" or \"cuda\"");
#ifndef SPECRUN_HAVE_CUDA
  SPEC_INPUT_CHECK(backend == "cpu",
                   "parallel.backend = \"cuda\" but this specrun was built without CUDA: "
                   "rebuild with -DSPECRUN_CUDA=ON (needs nvcc and NCCL, see docs/gpu.md) or use "
                   "parallel.backend = \"cpu\"");
#endif
}

ModelFactory::ModelFactory(const std::string& backend, MpiComm& tp_comm, MpiComm& self_comm,
                           const World& world, int threads, double comm_timeout_s)
    : backend_(backend),
      tp_mpi_(tp_comm),
      self_mpi_(self_comm),
      world_(world),
      threads_(threads),
      comm_timeout_s_(comm_timeout_s) {
  check_backend(backend);
  if (backend == "cpu") {
    description_ = "cpu, " + std::to_string(threads) + " thread(s) per rank";
    return;
  }
#ifdef SPECRUN_HAVE_CUDA
  std::string why, note;
  const int count = cuda::device_count(&why);
  SPEC_INPUT_CHECK(count > 0, "parallel.backend = \"cuda\" but rank "
                                  << world.rank << " sees no CUDA device (" << why
                                  << "): run on a GPU node, check CUDA_VISIBLE_DEVICES and the "
                                     "driver (nvidia-smi), or use parallel.backend = \"cpu\"");
  const int device = choose_device(world.local_rank, world.local_size, count, &note);
  cuda_ = std::make_unique<Cuda>();
  cuda_->device = std::make_unique<cuda::DeviceContext>(device);
  cuda_->tp = std::make_unique<NcclComm>(tp_comm, device, cuda_->device->stream(), comm_timeout_s);
  description_ = "cuda device " + std::to_string(device) + " (" + cuda_->device->description() +
                 ")" + (note.empty() ? "" : "; " + note);
#endif
}

ModelFactory::~ModelFactory() = default;

std::unique_ptr<LanguageModel> ModelFactory::load(const Checkpoint& checkpoint, bool sharded) {
  if (backend_ == "cpu") {
    if (sharded)
      return std::make_unique<Transformer>(checkpoint, tp_mpi_, world_.tp_rank, world_.tp,
                                           threads_);
    return std::make_unique<Transformer>(checkpoint, self_mpi_, 0, 1, threads_);
  }
#ifdef SPECRUN_HAVE_CUDA
  if (sharded)
    return std::make_unique<CudaTransformer>(checkpoint, *cuda_->tp, *cuda_->device, world_.tp_rank,
                                             world_.tp);
  if (!cuda_->self)
    cuda_->self = std::make_unique<NcclComm>(self_mpi_, cuda_->device->device(),
                                             cuda_->device->stream(), comm_timeout_s_);
  return std::make_unique<CudaTransformer>(checkpoint, *cuda_->self, *cuda_->device, 0, 1);
#else
  SPEC_FAIL("unreachable: backend " << backend_ << " in a build without CUDA");
#endif
}

Communicator& ModelFactory::tp_comm() {
#ifdef SPECRUN_HAVE_CUDA
  if (cuda_) return *cuda_->tp;
#endif
  return tp_mpi_;
}

}  // namespace specrun
