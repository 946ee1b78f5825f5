// The Llama-family graph compiled for the CUDA backend (the same graph file as the CPU's).
#ifdef SPECRUN_HAVE_CUDA

#include "backend/cuda_backend.h"
#include "model/llama_model.h"
#include "model/model_factory.h"

namespace specrun {

template class LlamaModel<CudaBackend>;

std::unique_ptr<LanguageModel> load_cuda_model(const Checkpoint& checkpoint, CudaContext& context,
                                               NcclComm& comm) {
  SPEC_INPUT_CHECK(checkpoint.config().head_dim <= cuda::kMaxHeadDim,
                   checkpoint.dir()
                       << "/config.json: head_dim " << checkpoint.config().head_dim
                       << " exceeds the CUDA attention kernel's limit of " << cuda::kMaxHeadDim);
  return std::make_unique<LlamaModel<CudaBackend>>(checkpoint, CudaBackend(context), comm);
}

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
