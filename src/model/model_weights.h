// A model's weights prepared on a backend, laid out by the weight schema (weight_schema.h): one
// backend Weight per role, model-level and per layer. Preparing walks the schema twice: once to
// size the backend's weight memory (one allocation), once to prepare each tensor in it.
#pragma once

#include <array>
#include <span>
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
  // MoE layers: per per-expert role, the stack of the rank's experts (plan.experts, in index
  // order; gate/up pairs under kExpertGate), prepared one after the other.
  std::vector<std::array<std::vector<typename B::Weight>, kNumRoles>> experts;

  const typename B::Weight& get(Role r) const { return model[static_cast<int>(r)]; }
  const typename B::Weight& at(int layer, Role r) const {
    return layers[layer][static_cast<int>(r)];
  }
  // The weight, or nullptr when the layer has no such tensor (biases, q/k norms, a tensor of
  // another layer kind).
  const typename B::Weight* maybe(int layer, Role r) const {
    return layer_has[layer][static_cast<int>(r)] ? &layers[layer][static_cast<int>(r)] : nullptr;
  }
  // The stack of role r in `layer` (empty for a layer without it).
  std::span<const typename B::Weight> stack(int layer, Role r) const {
    return experts[layer][static_cast<int>(r)];
  }
};

// Prepares `host` on backend `b`. gate and up become one kGateUp weight stored under
// Role::kGate (each expert's under kExpertGate); a tied embedding reuses lm_head's prepared copy.
template <class B>
ModelWeights<B> prepare_weights(B& b, const HostWeights& host, const ModelConfig& config,
                                std::span<const TensorSpec> schema = llama_schema()) {
  ModelWeights<B> w;
  w.plan = host.plan;
  w.layers.resize(host.layers.size());
  w.layer_has.resize(host.layers.size());
  w.experts.resize(host.layers.size());
  auto tied = [&](const TensorSpec& s) {
    return s.role == Role::kEmbed && config.tie_word_embeddings;
  };
  // fn(spec, layer, tensor, up): every tensor to prepare (an expert's once per expert, in
  // order), with its up when it is a gate/up pair.
  auto each = [&](auto&& fn) {
    for (const TensorSpec& s : schema) {
      if (is_up(s.role)) continue;  // up goes with gate
      const int layers = s.per_layer() ? static_cast<int>(host.layers.size()) : 1;
      for (int layer = 0; layer < layers; ++layer) {
        if (!present(s, config, layer)) continue;
        const bool pair = s.use == WeightUse::kGateUp;
        if (s.per_expert()) {
          const std::vector<HostTensor>& stack = host.stack(s, layer);
          const std::vector<HostTensor>* ups =
              pair ? &host.experts[layer][static_cast<int>(up_of(s.role))] : nullptr;
          for (std::size_t e = 0; e < stack.size(); ++e)
            fn(s, layer, stack[e], pair ? &(*ups)[e] : nullptr);
          continue;
        }
        const int up_role = pair ? static_cast<int>(up_of(s.role)) : 0;
        const HostTensor* up = !pair           ? nullptr
                               : s.per_layer() ? &host.layers[layer][up_role]
                                               : &host.model[up_role];
        fn(s, layer, host.get(s, layer), up);
      }
    }
  };
  std::size_t bytes = 0;
  each([&](const TensorSpec& s, int, const HostTensor& t, const HostTensor*) {
    if (!tied(s)) bytes += b.weight_bytes(t, s.use);
  });
  b.reserve_weights(bytes);
  each([&](const TensorSpec& s, int layer, const HostTensor& t, const HostTensor* up) {
    const int r = static_cast<int>(s.role);
    typename B::Weight prepared;
    if (tied(s))
      prepared = b.prepare_tied(w.get(Role::kLmHead));
    else if (up != nullptr)
      prepared = b.prepare_pair(t, *up);
    else
      prepared = b.prepare(t, s.use);
    if (s.per_expert()) {
      w.experts[layer][r].push_back(prepared);
    } else if (s.per_layer()) {
      w.layers[layer][r] = prepared;
      w.layer_has[layer][r] = true;
    } else {
      w.model[r] = prepared;
    }
  });
  return w;
}

}  // namespace specrun
