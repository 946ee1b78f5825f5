// The model graphs compiled for the CUDA backend (the same graph files as the CPU's).
#ifdef SPECRUN_HAVE_CUDA

#include "backend/cuda_backend.h"
#include "model/deepseek_model.h"
#include "model/head_graphs.h"
#include "model/llama_model.h"
#include "model/model_factory.h"

namespace specrun {

template class LlamaModel<CudaBackend>;
template class Eagle3Model<CudaBackend>;
// Built, not yet verified on a GPU: load_cuda_model refuses MLA targets; the GPU tests construct
// it through load_cuda_mla_model_unverified.
template class DeepseekModel<CudaBackend>;

std::unique_ptr<LanguageModel> load_cuda_model(const Checkpoint& checkpoint, CudaContext& context,
                                               NcclComm& comm, int ep) {
  // MLA's latent attention (model/deepseek_model.h) and its MoE layers have a CUDA path
  // (DeepseekModel<CudaBackend>, cuda::latent_attention, the MoE block's default compositions
  // with the noaux_tc router on the host), compiled but never run on a GPU: refused until a GPU
  // run has checked it (docs/gpu.md).
  SPEC_INPUT_CHECK(
      !checkpoint.config().is_mla(),
      checkpoint.dir()
          << "/config.json: " << checkpoint.config().architecture
          << " has multi-head latent attention (MLA), whose CUDA path is built but not "
             "yet verified on a GPU (docs/gpu.md): use parallel.backend = \"cpu\" (or "
             "--backend cpu)");
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

std::unique_ptr<LanguageModel> load_cuda_mla_model_unverified(const Checkpoint& checkpoint,
                                                              CudaContext& context, NcclComm& comm,
                                                              int ep) {
  SPEC_INPUT_CHECK(checkpoint.config().is_mla(),
                   checkpoint.dir() << "/config.json: " << checkpoint.config().architecture
                                    << " has no multi-head latent attention");
  // Its MoE layers route on the host (the router's logits read back, combine_rows' host arrays),
  // which a pass recorded as a step graph cannot do: every pass runs launch by launch.
  CudaBackend backend(context);
  backend.set_step_graphs(false);
  return std::make_unique<DeepseekModel<CudaBackend>>(checkpoint, std::move(backend), comm, ep);
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
