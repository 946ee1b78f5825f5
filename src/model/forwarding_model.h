// A LanguageModel that hands every call to another one: the base of wrappers that change or
// watch one part of a model (model/routing_observer.h reports each pass's expert routing) and
// leave the rest, caches and views included, to the model they wrap.
#pragma once

#include <memory>
#include <utility>

#include "model/language_model.h"

namespace specrun {

class ForwardingModel : public LanguageModel {
 public:
  explicit ForwardingModel(std::shared_ptr<LanguageModel> model) : model_(std::move(model)) {}

  const ModelConfig& config() const override { return model_->config(); }
  BackendKind backend() const override { return model_->backend(); }
  std::unique_ptr<KvCache> new_cache(int capacity) override { return model_->new_cache(capacity); }
  ForwardResult forward(std::span<const SeqChunk> batch, const ForwardRequest& request) override {
    return model_->forward(batch, request);
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
  std::size_t weight_bytes() const override { return model_->weight_bytes(); }
  std::size_t kv_bytes_per_token() const override { return model_->kv_bytes_per_token(); }

 protected:
  LanguageModel& inner() { return *model_; }
  const LanguageModel& inner() const { return *model_; }

 private:
  std::shared_ptr<LanguageModel> model_;
};

}  // namespace specrun
