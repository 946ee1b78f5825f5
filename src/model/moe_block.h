// The mixture-of-experts block (Qwen3-MoE, Mixtral, DeepSeek-V3): a layer's MLP when its kind is
// MlpKind::kMoe, on the residual stream of any graph (GraphBase's ResidualStream), written once
// against the backend interface.
//
//   xn = rmsnorm(x, post-attention norm)                          [n, H]
//   logits = xn router^T (float32)                                [n, E]
//   per token: its top_k experts and weights by the router's rule (RouterRule, backend.h):
//     softmax top-k (Qwen3-MoE, Mixtral; renormalised when norm_topk_prob, Mixtral always), or
//     DeepSeek-V3's noaux_tc (sigmoid scores, selection on scores + the layer's
//     e_score_correction_bias within the best groups, weights the unbiased scores, normalised,
//     times routed_scaling_factor)
//   x += sum over the token's experts e, in ascending e, of w_e * down_e(silu(gate_e xn) * up_e xn)
//        (+ the shared experts' down(silu(gate xn) * up xn), unweighted, where the model has them)
// as Hugging Face's Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock / DeepseekV3MoE define it. The
// routing is decided on the host (fused::moe_route), the tokens are grouped by expert
// (ExpertGrouping) and each of the rank's selected experts runs once over its tokens
// (fused::moe_experts: gather, SwiGLU, down projection, then the weighted sum per token: backend
// combine_rows); the shared experts are one dense SwiGLU over all rows, added after. Every step
// is per token, in an order fixed by the token's own experts, so a token's output does not
// depend on the other tokens of the pass (batch invariance, on the CPU bitwise).
//
// Expert parallelism (weight_schema.h): a rank holds `experts` experts from `expert_begin`
// (ep = tp: its share; ep = 1: all of them, each cut to its intermediate slice); its output is
// the partial sum of its experts' (or slices') contributions, completed by the stream's
// all-reduce (ResidualStream::add_delta). Shared experts are cut by tp like a dense MLP (their
// intermediate slice), so each rank adds its slice's partial output before that all-reduce.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <memory>

#include "backend/backend.h"
#include "backend/default_ops.h"
#include "model/expert_routing.h"
#include "model/graph_base.h"
#include "model/weight_schema.h"

namespace specrun {

// The (token, expert) pairs of one layer's routing that go to this rank's experts, grouped for
// fused::moe_experts (backend.h ExpertGroups). Host memory; reused between layers and passes
// (grown, never shrunk).
class ExpertGrouping {
 public:
  // chosen, weights: [n, top_k] (global expert ids, their weights); the rank holds experts
  // [expert_begin, expert_begin + experts).
  void build(const std::int32_t* chosen, const float* weights, int n, int top_k, int expert_begin,
             int experts);
  ExpertGroups groups() const {
    return ExpertGroups{first_, token_, token_first_, by_token_, weight_};
  }

 private:
  std::vector<int> first_, token_, token_first_, by_token_, cursor_, pair_of_;
  std::vector<float> weight_;
};

// The block, for one graph: its scratch and the routing of the layer it last ran.
template <class B>
class MoeBlock {
  using F = typename B::F;
  using Weight = typename B::Weight;

 public:
  // n_experts routed experts, the router's rule (top_k, renormalisation, DeepSeek's groups and
  // scale); the rank's experts [expert_begin, expert_begin + experts). The backend must outlive
  // the block.
  MoeBlock(B& b, int n_experts, const RouterRule& rule, int expert_begin, int experts)
      : b_(b), n_experts_(n_experts), rule_(rule), expert_begin_(expert_begin), experts_(experts) {}

  // The shared experts of a layer (DeepSeek-V3's mlp.shared_experts, all n_shared_experts as one
  // SwiGLU of their summed width): gate/up prepared as a pair, and down.
  struct Shared {
    const Weight* gate_up = nullptr;
    const Weight* down = nullptr;
  };

  // One MoE layer over the stream's first n rows: the norm (`norm`) into xn [n, dim], the
  // router (bias: the layer's e_score_correction_bias, host [n_experts], for the noaux_tc rule;
  // empty otherwise), the rank's experts (gate_up[e], down[e]: local expert e, prepared as the
  // weight schema stacks them), their weighted sum and the shared experts' output (none when
  // shared.gate_up is null) into the stream. chosen: host [n, top_k], gets each row's experts
  // (global ids, by descending selection score).
  void run(ResidualStream<B>& stream, int n, int dim, const Weight& norm, const Weight& router,
           std::span<const float> bias, std::span<const Weight> gate_up,
           std::span<const Weight> down, Shared shared, F xn, std::int32_t* chosen) {
    SPEC_CHECK(static_cast<int>(gate_up.size()) == experts_ &&
                   static_cast<int>(down.size()) == experts_ && router.rows == n_experts_,
               "moe block: " << gate_up.size() << " gate/up and " << down.size()
                             << " down weights for " << experts_ << " local experts, a router of "
                             << router.rows << " rows for " << n_experts_ << " experts");
    SPEC_CHECK(rule_.kind != RouterRule::Kind::kSigmoidNoauxTc ||
                   static_cast<int>(bias.size()) == n_experts_,
               "moe block: a correction bias of " << bias.size() << " values for " << n_experts_
                                                  << " experts");
    stream.norm(n, norm, xn);
    const std::size_t scores = static_cast<std::size_t>(n) * n_experts_;
    host_logits_.resize(scores);
    weights_.resize(static_cast<std::size_t>(n) * rule_.top_k);
    fused::moe_route(b_, xn, n, router, rule_, bias, logits_.grow(scores), host_logits_.data(),
                     chosen, weights_.data());
    grouping_.build(chosen, weights_.data(), n, rule_.top_k, expert_begin_, experts_);
    const ExpertGroups groups = grouping_.groups();
    const std::size_t pairs = static_cast<std::size_t>(groups.pairs());
    const std::size_t width = experts_ > 0 ? static_cast<std::size_t>(gate_up[0].rows) : 0;
    F xg = xg_.grow(pairs * dim), act = act_.grow(pairs * width), ye = ye_.grow(pairs * dim);
    const F out = stream.delta();
    fused::moe_experts(b_, xn, n, dim, gate_up, down, groups, xg, act, ye, out);
    if (shared.gate_up != nullptr) {
      // The shared experts over every row, added to the routed sum (HF: routed + shared).
      const std::size_t rows = static_cast<std::size_t>(n);
      F sh_act = shared_act_.grow(rows * static_cast<std::size_t>(shared.gate_up->rows));
      b_.swiglu(xn, n, *shared.gate_up, sh_act);
      F sh = shared_out_.grow(rows * static_cast<std::size_t>(dim));
      b_.linear(sh_act, n, *shared.down, nullptr, sh);
      b_.add_inplace(out, sh, static_cast<std::size_t>(n) * dim);
    }
    stream.add_delta(n);
  }

 private:
  B& b_;
  int n_experts_;
  RouterRule rule_;
  int expert_begin_, experts_;
  ExpertGrouping grouping_;
  std::vector<float> host_logits_, weights_;
  typename B::Scratch logits_, xg_, act_, ye_, shared_act_, shared_out_;
};

// The router's rule of a config.json (ModelConfig::router: Qwen3-MoE's and Mixtral's softmax
// top-k, DeepSeek-V3's noaux_tc with its groups and routed_scaling_factor).
inline RouterRule router_rule(const ModelConfig& config) {
  RouterRule rule;
  rule.kind = config.router.kind == MoeRouterConfig::kSigmoidNoauxTc
                  ? RouterRule::Kind::kSigmoidNoauxTc
                  : RouterRule::Kind::kSoftmaxTopK;
  rule.top_k = config.num_experts_per_tok;
  rule.renormalise = config.norm_topk_prob;
  rule.n_group = config.router.n_group;
  rule.topk_group = config.router.topk_group;
  rule.scale = static_cast<float>(config.router.routed_scaling_factor);
  return rule;
}

// The MoE block of a model whose MoE layers are routing.layers (none: nullptr), with the
// config's router rule over the rank's experts (host.plan); fills the routing record's
// model-level fields (top_k, n_experts, ep, expert_bytes: one expert's gate, up and down, whole,
// in the checkpoint's dtype).
template <class B>
std::unique_ptr<MoeBlock<B>> make_moe_block(B& b, const ModelConfig& config,
                                            const HostWeights& host, ExpertRouting& routing) {
  if (routing.layers.empty()) return nullptr;
  const ShardPlan& p = host.plan;
  routing.top_k = config.num_experts_per_tok;
  routing.n_experts = config.num_experts;
  routing.ep = p.ep;
  const HostTensor& gate =
      host.experts[routing.layers.front()][static_cast<int>(Role::kExpertGate)].front();
  // Bytes per weight as stored (a quantized expert: its packed codes, scales and zero points
  // over its weights; docs/quantization-design.md 3.6).
  const double per_weight = gate.quantized() ? static_cast<double>(gate.bytes()) /
                                                   (static_cast<double>(gate.rows) * gate.cols)
                                             : static_cast<double>(dtype_size(gate.dtype));
  routing.expert_bytes = static_cast<std::int64_t>(
      3.0 * config.hidden_size * config.moe_intermediate_size * per_weight + 0.5);
  return std::make_unique<MoeBlock<B>>(b, config.num_experts, router_rule(config), p.expert_begin,
                                       p.experts);
}

}  // namespace specrun
