#include "model/routing_observer.h"

#include "model/forwarding_model.h"

namespace specrun {

namespace {

class ObservedModel final : public ForwardingModel {
 public:
  ObservedModel(std::shared_ptr<LanguageModel> model, RoutingObserver& observer)
      : ForwardingModel(std::move(model)), observer_(observer) {}

  ForwardResult forward(std::span<const SeqChunk> batch, const ForwardRequest& request) override {
    const ForwardResult out = inner().forward(batch, request);
    if (const ExpertRouting* r = inner().routing()) observer_.observe(batch, *r);
    return out;
  }

 private:
  RoutingObserver& observer_;
};

}  // namespace

std::shared_ptr<LanguageModel> observe_routing(std::shared_ptr<LanguageModel> model,
                                               RoutingObserver& observer) {
  return std::make_shared<ObservedModel>(std::move(model), observer);
}

}  // namespace specrun
