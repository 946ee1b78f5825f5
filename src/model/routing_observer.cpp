#include "model/routing_observer.h"

namespace specrun {

namespace {

class ObservedModel final : public LanguageModel {
 public:
  ObservedModel(std::shared_ptr<LanguageModel> model, RoutingObserver& observer)
      : model_(std::move(model)), observer_(observer) {}

  const ModelConfig& config() const override { return model_->config(); }
  BackendKind backend() const override { return model_->backend(); }
  std::unique_ptr<KvCache> new_cache(int capacity) override { return model_->new_cache(capacity); }
  ForwardResult forward(std::span<const SeqChunk> batch, const ForwardRequest& request) override {
    const ForwardResult out = model_->forward(batch, request);
    if (const ExpertRouting* r = model_->routing()) observer_.observe(batch, *r);
    return out;
  }
  void keep(KvCache& cache, int first, std::span<const int> rows) override {
    model_->keep(cache, first, rows);
  }
  void read(const RowsView& view, int first, int count, float* host) override {
    model_->read(view, first, count, host);
  }
  void read_kv(const KvCache& cache, int layer, int which, float* host) override {
    model_->read_kv(cache, layer, which, host);
  }
  int kv_heads() const override { return model_->kv_heads(); }
  void synchronize() override { model_->synchronize(); }
  const ExpertRouting* routing() const override { return model_->routing(); }
  std::int64_t weight_bytes() const override { return model_->weight_bytes(); }

 private:
  std::shared_ptr<LanguageModel> model_;
  RoutingObserver& observer_;
};

}  // namespace

std::shared_ptr<LanguageModel> observe_routing(std::shared_ptr<LanguageModel> model,
                                               RoutingObserver& observer) {
  return std::make_shared<ObservedModel>(std::move(model), observer);
}

}  // namespace specrun
