// The model graphs compiled for the CUDA backend (the same graph files as the CPU's).
#ifdef SPECRUN_HAVE_CUDA

#include "backend/cuda_backend.h"
#include "model/head_graphs.h"
#include "model/llama_model.h"
#include "model/model_factory.h"

namespace specrun {

template class LlamaModel<CudaBackend>;
template class Eagle3Model<CudaBackend>;

std::unique_ptr<LanguageModel> load_cuda_model(const Checkpoint& checkpoint, CudaContext& context,
                                               NcclComm& comm) {
  SPEC_INPUT_CHECK(checkpoint.config().head_dim <= cuda::kMaxHeadDim,
                   checkpoint.dir()
                       << "/config.json: head_dim " << checkpoint.config().head_dim
                       << " exceeds the CUDA attention kernel's limit of " << cuda::kMaxHeadDim);
  return std::make_unique<LlamaModel<CudaBackend>>(checkpoint, CudaBackend(context), comm);
}

std::unique_ptr<DraftHead> load_cuda_head(const Checkpoint& head, const Checkpoint& target,
                                          const HeadConfig& config, CudaContext& context,
                                          NcclComm* tp_comm) {
  SPEC_INPUT_CHECK(config.layers().head_dim <= cuda::kMaxHeadDim,
                   head.dir() << "/config.json: head_dim " << config.layers().head_dim
                              << " exceeds the CUDA attention kernel's limit of "
                              << cuda::kMaxHeadDim);
  return make_head(head, target, config, CudaBackend(context), tp_comm);
}

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
