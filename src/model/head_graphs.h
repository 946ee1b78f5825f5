// The graph of each draft head kind (model/head_config.h), for a backend B: included by the
// files that compile the graphs per backend (graphs_cpu.cpp, graphs_cuda.cpp), so a new kind is
// one line here for both.
#pragma once

#include <memory>
#include <utility>

#include "common/error.h"
#include "dist/communicator.h"
#include "model/checkpoint.h"
#include "model/draft_head.h"
#include "model/eagle3_model.h"
#include "model/head_config.h"
#include "model/mtp_model.h"

namespace specrun {

// head: the head's checkpoint (opened with config.layers()); target: the target's (a head may
// read its embedding); tp_comm: the group to shard over, or nullptr for a whole head.
template <class B>
std::unique_ptr<DraftHead> make_head(const Checkpoint& head, const Checkpoint& target,
                                     const HeadConfig& config, B backend, Communicator* tp_comm) {
  switch (config.kind()) {
    case HeadKind::kEagle3:
      return std::make_unique<Eagle3Model<B>>(head, target, std::get<Eagle3Config>(config.of),
                                              std::move(backend), tp_comm);
    case HeadKind::kMtp:
      // Its decoder layer is MLA's latent attention, which the CUDA backend does not run yet
      // (graphs_cuda.cpp refuses an MLA target the same way).
      if constexpr (B::kKind == BackendKind::kCuda) {
        SPEC_INPUT_FAIL(head.dir() << "/config.json: draft.kind = \"mtp\": the MTP layer has "
                                      "multi-head latent attention (MLA), which the CUDA backend "
                                      "does not run yet: use parallel.backend = \"cpu\" (or "
                                      "--backend cpu)");
      } else {
        return std::make_unique<MtpModel<B>>(head, target, std::get<MtpConfig>(config.of),
                                             std::move(backend), tp_comm);
      }
  }
  SPEC_FAIL("a draft head of kind " << static_cast<int>(config.kind()) << " has no graph");
}

}  // namespace specrun
