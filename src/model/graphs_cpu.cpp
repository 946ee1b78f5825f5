// The model graphs compiled for the CPU backend.
#include "backend/cpu_backend.h"
#include "model/deepseek_model.h"
#include "model/head_graphs.h"
#include "model/llama_model.h"
#include "model/model_factory.h"

namespace specrun {

template class LlamaModel<CpuBackend>;
template class Eagle3Model<CpuBackend>;
template class DeepseekModel<CpuBackend>;
template class MtpModel<CpuBackend>;

std::unique_ptr<LanguageModel> load_cpu_model(const Checkpoint& checkpoint, Communicator& tp_comm,
                                              int threads, int ep) {
  if (checkpoint.config().is_mla())
    return std::make_unique<DeepseekModel<CpuBackend>>(checkpoint, CpuBackend(threads), tp_comm,
                                                       ep);
  return std::make_unique<LlamaModel<CpuBackend>>(checkpoint, CpuBackend(threads), tp_comm, ep);
}

std::unique_ptr<DraftHead> load_cpu_head(const Checkpoint& head, const Checkpoint& target,
                                         const HeadConfig& config, int threads,
                                         Communicator* tp_comm) {
  return make_head(head, target, config, CpuBackend(threads), tp_comm);
}

}  // namespace specrun
