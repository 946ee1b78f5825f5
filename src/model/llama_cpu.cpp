// The Llama-family graph compiled for the CPU backend.
#include "backend/cpu_backend.h"
#include "model/llama_model.h"
#include "model/model_factory.h"

namespace specrun {

template class LlamaModel<CpuBackend>;

std::unique_ptr<LanguageModel> load_cpu_model(const Checkpoint& checkpoint, Communicator& tp_comm,
                                              int threads) {
  return std::make_unique<LlamaModel<CpuBackend>>(checkpoint, CpuBackend(threads), tp_comm);
}

}  // namespace specrun
