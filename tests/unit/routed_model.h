// Test helper: a dense model presented as a mixture of experts, so that the expert accounting of
// the engine is tested without an MoE graph. forward() runs the dense model and routes every
// token of the pass by its id alone: in MoE layer index l, token t goes to experts
// (5 t + 3 l + j) mod n_experts for j = 0 .. top_k-1 (distinct, since top_k <= n_experts), so a
// test computes what any pass must have read from the tokens it fed (RoutedModel::expert_of).
#pragma once

#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "model/forwarding_model.h"

namespace specrun::test {

class RoutedModel final : public ForwardingModel {
 public:
  RoutedModel(std::shared_ptr<LanguageModel> model, std::vector<int> layers, int n_experts,
              int top_k, int ep, std::int64_t expert_bytes)
      : ForwardingModel(std::move(model)) {
    routing_.layers = std::move(layers);
    routing_.n_experts = n_experts;
    routing_.top_k = top_k;
    routing_.ep = ep;
    routing_.expert_bytes = expert_bytes;
  }

  static std::int32_t expert_of(std::int32_t token, int layer_index, int j, int n_experts) {
    return static_cast<std::int32_t>((5 * static_cast<long>(token) + 3 * layer_index + j) %
                                     n_experts);
  }
  // The unique experts of `tokens` in MoE layer index l.
  int unique_of(const std::vector<std::int32_t>& tokens, int l) const {
    std::set<std::int32_t> seen;
    for (std::int32_t t : tokens)
      for (int j = 0; j < routing_.top_k; ++j) seen.insert(expert_of(t, l, j, routing_.n_experts));
    return static_cast<int>(seen.size());
  }
  int forward_calls() const { return calls_; }

  ForwardResult forward(std::span<const SeqChunk> batch, const ForwardRequest& request) override {
    const ForwardResult out = inner().forward(batch, request);
    ++calls_;
    int n = 0;
    for (const SeqChunk& c : batch) n += c.n_tokens;
    const int L = static_cast<int>(routing_.layers.size()), k = routing_.top_k;
    routing_.n_tokens = n;
    routing_.experts.resize(static_cast<std::size_t>(L) * n * k);
    for (int l = 0; l < L; ++l) {
      int t = 0;
      for (const SeqChunk& c : batch)
        for (int i = 0; i < c.n_tokens; ++i, ++t)
          for (int j = 0; j < k; ++j)
            routing_.experts[(static_cast<std::size_t>(l) * n + t) * k + j] =
                expert_of(c.tokens[i], l, j, routing_.n_experts);
    }
    return out;
  }
  const ExpertRouting* routing() const override { return &routing_; }

 private:
  ExpertRouting routing_;
  int calls_ = 0;
};

}  // namespace specrun::test
