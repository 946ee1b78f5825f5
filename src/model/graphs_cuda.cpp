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
                                               NcclComm& comm, int ep) {
  // MLA's latent attention (model/deepseek_model.h) needs the attention variant whose values
  // are inside the key rows and an explicit softmax scale (AttentionHeads::values_in_keys),
  // which the CUDA attention kernel does not have yet.
  SPEC_INPUT_CHECK(!checkpoint.config().is_mla(),
                   checkpoint.dir()
                       << "/config.json: " << checkpoint.config().architecture
                       << " has multi-head latent attention (MLA), which the CUDA backend does "
                          "not run yet: use parallel.backend = \"cpu\" (or --backend cpu)");
  SPEC_INPUT_CHECK(checkpoint.config().head_dim <= cuda::kMaxHeadDim,
                   checkpoint.dir()
                       << "/config.json: head_dim " << checkpoint.config().head_dim
                       << " exceeds the CUDA attention kernel's limit of " << cuda::kMaxHeadDim);
  // The MoE block's router decides on the host (fused::moe_route reads the logits back), which
  // a pass recorded as a step graph cannot do; until the router and the per-expert token counts
  // stay on the device, mixture-of-experts models run on the CPU backend only.
  SPEC_INPUT_CHECK(!checkpoint.config().has_moe_layers(),
                   checkpoint.dir()
                       << "/config.json: " << checkpoint.config().architecture
                       << " has mixture-of-experts layers, which the CUDA backend does not run "
                          "yet: use parallel.backend = \"cpu\" (or --backend cpu)");
  return std::make_unique<LlamaModel<CudaBackend>>(checkpoint, CudaBackend(context), comm, ep);
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
