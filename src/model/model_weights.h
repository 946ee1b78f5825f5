// A model's weights prepared on a backend, laid out by the weight schema (weight_schema.h): one
// backend Weight per role, model-level and per layer. Preparing walks the schema twice: once to
// size the backend's weight memory (one allocation), once to prepare each tensor in it.
#pragma once

#include <array>
#include <vector>

#include "common/error.h"
#include "model/weight_schema.h"

namespace specrun {

template <class B>
struct ModelWeights {
  ShardPlan plan;
  std::array<typename B::Weight, kNumRoles> model{};
  std::vector<std::array<typename B::Weight, kNumRoles>> layers;
  std::vector<std::array<bool, kNumRoles>> layer_has;  // which roles each layer has
  std::size_t bytes = 0;  // the backend's weight memory for them (what reserve_weights took)

  const typename B::Weight& get(Role r) const { return model[static_cast<int>(r)]; }
  const typename B::Weight& at(int layer, Role r) const {
    return layers[layer][static_cast<int>(r)];
  }
  // The weight, or nullptr when the layer has no such tensor (biases, q/k norms, a tensor of
  // another layer kind).
  const typename B::Weight* maybe(int layer, Role r) const {
    return layer_has[layer][static_cast<int>(r)] ? &layers[layer][static_cast<int>(r)] : nullptr;
  }
};

// Prepares `host` on backend `b`. gate and up become one kGateUp weight stored under
// Role::kGate; a tied embedding reuses lm_head's prepared copy.
template <class B>
ModelWeights<B> prepare_weights(B& b, const HostWeights& host, const ModelConfig& config,
                                std::span<const TensorSpec> schema = llama_schema()) {
  ModelWeights<B> w;
  w.plan = host.plan;
  w.layers.resize(host.layers.size());
  w.layer_has.resize(host.layers.size());
  auto tied = [&](const TensorSpec& s) {
    return s.role == Role::kEmbed && config.tie_word_embeddings;
  };
  auto each = [&](auto&& fn) {
    for (const TensorSpec& s : schema) {
      if (s.role == Role::kUp) continue;  // up goes with gate
      const int layers = s.per_layer() ? static_cast<int>(host.layers.size()) : 1;
      for (int layer = 0; layer < layers; ++layer)
        if (present(s, config, layer)) fn(s, layer);
    }
  };
  std::size_t bytes = 0;
  each([&](const TensorSpec& s, int layer) {
    if (!tied(s)) bytes += b.weight_bytes(host.get(s, layer), s.use);
  });
  b.reserve_weights(bytes);
  w.bytes = bytes;
  each([&](const TensorSpec& s, int layer) {
    const int r = static_cast<int>(s.role);
    typename B::Weight& dst = s.per_layer() ? w.layers[layer][r] : w.model[r];
    if (s.per_layer()) w.layer_has[layer][r] = true;
    if (tied(s)) {
      dst = b.prepare_tied(w.get(Role::kLmHead));
    } else if (s.use == WeightUse::kGateUp) {
      const int up_role = static_cast<int>(Role::kUp);
      const HostTensor& up = s.per_layer() ? host.layers[layer][up_role] : host.model[up_role];
      dst = b.prepare_pair(host.get(s, layer), up);
    } else {
      dst = b.prepare(host.get(s, layer), s.use);
    }
  });
  return w;
}

}  // namespace specrun
