// Watching a model's expert routing pass by pass from outside its owner: a drafter owns its
// draft model and runs its forward passes itself, so the engine cannot read routing() after each
// of them. observe_routing wraps the model in a LanguageModel that forwards every call and, after
// each forward pass of a mixture-of-experts model, tells an observer the pass's batch and routing
// (the engine's expert accounting of a draft model, engine/expert_accounting.h). A dense model's
// passes are not reported (routing() is nullptr); the wrapper changes nothing the model computes.
#pragma once

#include <memory>
#include <span>

#include "model/expert_routing.h"
#include "model/language_model.h"

namespace specrun {

class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  // After a forward pass over `batch` that routed its tokens as `routing` (valid during the
  // call only).
  virtual void observe(std::span<const SeqChunk> batch, const ExpertRouting& routing) = 0;
};

// `model` behind a LanguageModel that reports each forward pass's routing to `observer` (which
// must outlive it); caches, views and everything else are the model's own.
std::shared_ptr<LanguageModel> observe_routing(std::shared_ptr<LanguageModel> model,
                                               RoutingObserver& observer);

}  // namespace specrun
