// The fused ops of the backend interface (backend/backend.h): each an optional member of a
// backend, with a default composition of the plain ops here.
//
// A graph calls a fused op through `fused::` (below): the backend's member when it has one
// (detected by the Fuses* concept), else the composition `compose_*`. A backend's member must
// give bitwise what the composition gives on that backend (the CPU backend's tests check its
// kernels against the compositions; docs/gpu.md the CUDA ones), and may call the composition
// itself for the cases its kernel does not cover. Each backend's .cpp states which members it has
// (static_assert on the Fuses* concepts), so that a member whose signature drifts is an error,
// not a silent fall-back to the composition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "kernels/cpu/ops.h"  // cpu::route_top_k: the router's top-k, decided on the host

namespace specrun {

// ---- which fused ops a backend has (the member's signature, as the graphs call it).

template <class B>
concept FusesAddRmsnorm = requires(B b, typename B::F f, typename B::CF cf,
                                   const typename B::Weight& w, int i, float eps) {
  b.add_rmsnorm(f, cf, i, i, w, eps, f);
};
template <class B>
concept FusesLinearMulti = requires(B b, typename B::CF cf, int i,
                                    std::span<const typename B::LinearOut> outs) {
  b.linear_multi(cf, i, outs);
};
template <class B>
concept FusesLinearResidual = requires(B b, typename B::F f, typename B::CF cf,
                                       const typename B::Weight& w, int i) {
  { b.linear_residual(cf, i, w, &w, f, f) } -> std::same_as<typename B::CF>;
};
template <class B>
concept FusesAddRmsnormLinearMulti = requires(B b, typename B::F f, typename B::CF cf,
                                              const typename B::Weight& w, int i, float eps,
                                              std::span<const typename B::LinearOut> outs) {
  b.add_rmsnorm_linear_multi(f, cf, i, i, w, eps, f, outs);
};
template <class B>
concept FusesAddRmsnormSwiglu = requires(B b, typename B::F f, typename B::CF cf,
                                         const typename B::Weight& w, int i, float eps) {
  b.add_rmsnorm_swiglu(f, cf, i, i, w, eps, f, w, f);
};
template <class B>
concept FusesRopeAttend = requires(B b, typename B::F f, typename B::CF cf,
                                   const typename B::KvRows& kv, const AttentionHeads& heads,
                                   int i) {
  b.rope_attend(i, kv, f, i, cf, f, heads);
};

template <class B>
concept FusesMoeRoute = requires(B b, typename B::F f, typename B::CF cf,
                                 const typename B::Weight& w, int i, const RouterRule& rule,
                                 std::span<const float> bias, float* host, std::int32_t* ids) {
  b.moe_route(cf, i, w, rule, bias, f, host, ids, host);
};
template <class B>
concept FusesMoeExperts = requires(B b, typename B::F f, typename B::CF cf, int i,
                                   std::span<const typename B::Weight> ws,
                                   const ExpertGroups& groups) {
  b.moe_experts(cf, i, i, ws, ws, groups, f, f, f, f);
};

// ---- the default compositions.

// x += delta, then y = rmsnorm(x) with w.
template <class B>
void compose_add_rmsnorm(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                         const typename B::Weight& w, float eps, typename B::F y) {
  b.add_inplace(x, delta, static_cast<std::size_t>(n) * dim);
  b.rmsnorm(x, n, dim, w, eps, y);
}

// Each output on its own.
template <class B>
void compose_linear_multi(B& b, typename B::CF x, int n,
                          std::span<const typename B::LinearOut> outs) {
  for (const typename B::LinearOut& o : outs) b.linear(x, n, *o.w, o.bias, o.y);
}

// A row-parallel projection added to the residual stream x (o_proj, down_proj with one rank):
// y = in W^T (+ bias), [n, w.rows]. Returns what is left to add to x: the composition writes y
// to the scratch tmp and returns tmp, so that the next op on x (add_rmsnorm_linear_multi,
// add_rmsnorm_swiglu, add_rmsnorm) adds it in the norm's pass; a backend that adds in the
// projection's epilogue returns a null pointer (x += y done).
template <class B>
typename B::CF compose_linear_residual(B& b, typename B::CF in, int n, const typename B::Weight& w,
                                       const typename B::Weight* bias, typename B::F tmp) {
  b.linear(in, n, w, bias, tmp);
  return tmp;
}

namespace fused {
template <class B>
void add_rmsnorm(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                 const typename B::Weight& w, float eps, typename B::F y);
template <class B>
void linear_multi(B& b, typename B::CF x, int n, std::span<const typename B::LinearOut> outs);
}  // namespace fused

// x += delta (delta may be a null pointer: nothing to add), xn = rmsnorm(x) with `norm` (x [n,
// dim]), then linear_multi(xn, outs): q, k and v of a layer's input. Afterwards xn holds
// unspecified values (a fused kernel normalises on the way).
template <class B>
void compose_add_rmsnorm_linear_multi(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                                      const typename B::Weight& norm, float eps, typename B::F xn,
                                      std::span<const typename B::LinearOut> outs) {
  if (delta.get() != nullptr)
    fused::add_rmsnorm(b, x, delta, n, dim, norm, eps, xn);
  else
    b.rmsnorm(x, n, dim, norm, eps, xn);
  fused::linear_multi(b, xn, n, outs);
}

// The same with swiglu(xn) after the norm: the MLP's input. xn as above.
template <class B>
void compose_add_rmsnorm_swiglu(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                                const typename B::Weight& norm, float eps, typename B::F xn,
                                const typename B::Weight& gate_up, typename B::F y) {
  if (delta.get() != nullptr)
    fused::add_rmsnorm(b, x, delta, n, dim, norm, eps, xn);
  else
    b.rmsnorm(x, n, dim, norm, eps, xn);
  b.swiglu(xn, n, gate_up, y);
}

// RoPE of the staged keys kv.k and of q (all n rows of the pass, table rows 0..n-1; key_dim
// wide heads), then the append and attention (attend, not last_only). Afterwards q and kv.k hold
// unspecified values: a fused kernel may rotate them on the way instead.
template <class B>
void compose_rope_attend(B& b, int layer, const typename B::KvRows& kv, typename B::F q, int n,
                         typename B::CF table, typename B::F out, const AttentionHeads& heads) {
  b.rope_apply(kv.k, n, heads.kv_heads, heads.key_dim, heads.key_floats(), table);
  b.rope_apply(q, n, heads.heads, heads.key_dim, heads.q_width(), table);
  b.attend(layer, q, n, false, out, heads);
}

// A composition a backend may use inside its own swiglu (the plain op over a gate/up pair, whose
// layout is the backend's): y = silu(x gate^T) * (x up^T) through two linears and the backend's
// silu_mul, gate and up products in the scratch g and u ([n, rows] each). The CUDA backend's
// prefill takes it.
template <class B>
void compose_swiglu(B& b, typename B::CF x, int n, const typename B::Weight& gate,
                    const typename B::Weight& up, typename B::F g, typename B::F u,
                    typename B::F y) {
  b.linear(x, n, gate, nullptr, g);
  b.linear(x, n, up, nullptr, u);
  b.silu_mul(g, u, y, static_cast<std::size_t>(n) * gate.rows);
}

// The router's logits [n, experts] (router: [experts, dim]) by `linear`, read to host_logits,
// and each token's experts and weights decided there by the rule (RouterRule; ties: the lower
// expert index first). bias: the layer's e_score_correction_bias [experts] (kSigmoidNoauxTc;
// empty otherwise). experts, weights: host [n, top_k]. The routing is needed on the host (the
// grouping of tokens by expert, the expert accounting), so the composition decides it there.
template <class B>
void compose_moe_route(B& b, typename B::CF xn, int n, const typename B::Weight& router,
                       const RouterRule& rule, std::span<const float> bias, typename B::F logits,
                       float* host_logits, std::int32_t* experts, float* weights) {
  b.linear(xn, n, router, nullptr, logits);
  b.read(logits, static_cast<std::size_t>(n) * router.rows, host_logits);
  if (rule.kind == RouterRule::Kind::kSigmoidNoauxTc)
    cpu::route_noaux_tc(host_logits, n, router.rows, bias.data(), rule.n_group, rule.topk_group,
                        rule.top_k, rule.renormalise, rule.scale, experts, weights);
  else
    cpu::route_top_k(host_logits, n, router.rows, rule.top_k, rule.renormalise, experts, weights);
}

// A mixture-of-experts layer's routed experts over its normalised input xn [n, dim]: the pairs'
// rows gathered by expert into xg [pairs, dim], each local expert's SwiGLU (gate_up[e], into
// act [pairs, gate_up[e].rows]) and down projection (down[e], into ye [pairs, dim]) run once
// over its own rows, then out [n, dim] = each row's weighted sum of its pairs' outputs
// (combine_rows; rows without a pair on this rank are zeros). With tp > 1 out is this rank's
// partial sum.
template <class B>
void compose_moe_experts(B& b, typename B::CF xn, int n, int dim,
                         std::span<const typename B::Weight> gate_up,
                         std::span<const typename B::Weight> down, const ExpertGroups& g,
                         typename B::F xg, typename B::F act, typename B::F ye, typename B::F out) {
  if (g.pairs() > 0) b.gather_rows(xn, static_cast<std::size_t>(dim), g.token, xg);
  for (int e = 0; e < g.local_experts(); ++e) {
    const int first = g.first[e], m = g.first[e + 1] - first;
    if (m == 0) continue;
    const std::ptrdiff_t rows = first;
    const int width = gate_up[e].rows;
    b.swiglu(xg + rows * dim, m, gate_up[e], act + rows * width);
    b.linear(act + rows * width, m, down[e], nullptr, ye + rows * dim);
  }
  b.combine_rows(out, n, static_cast<std::size_t>(dim), ye, g.token_first, g.by_token, g.weight);
}

// ---- the fused ops as a graph calls them: the member, or the composition.
namespace fused {

template <class B>
void add_rmsnorm(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                 const typename B::Weight& w, float eps, typename B::F y) {
  if constexpr (FusesAddRmsnorm<B>)
    b.add_rmsnorm(x, delta, n, dim, w, eps, y);
  else
    compose_add_rmsnorm(b, x, delta, n, dim, w, eps, y);
}

template <class B>
void linear_multi(B& b, typename B::CF x, int n, std::span<const typename B::LinearOut> outs) {
  if constexpr (FusesLinearMulti<B>)
    b.linear_multi(x, n, outs);
  else
    compose_linear_multi(b, x, n, outs);
}

// x: the residual stream the projection goes into (a backend that adds in the epilogue).
template <class B>
typename B::CF linear_residual(B& b, typename B::CF in, int n, const typename B::Weight& w,
                               const typename B::Weight* bias, typename B::F tmp, typename B::F x) {
  if constexpr (FusesLinearResidual<B>)
    return b.linear_residual(in, n, w, bias, tmp, x);
  else
    return compose_linear_residual(b, in, n, w, bias, tmp);
}

template <class B>
void add_rmsnorm_linear_multi(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                              const typename B::Weight& norm, float eps, typename B::F xn,
                              std::span<const typename B::LinearOut> outs) {
  if constexpr (FusesAddRmsnormLinearMulti<B>)
    b.add_rmsnorm_linear_multi(x, delta, n, dim, norm, eps, xn, outs);
  else
    compose_add_rmsnorm_linear_multi(b, x, delta, n, dim, norm, eps, xn, outs);
}

template <class B>
void add_rmsnorm_swiglu(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                        const typename B::Weight& norm, float eps, typename B::F xn,
                        const typename B::Weight& gate_up, typename B::F y) {
  if constexpr (FusesAddRmsnormSwiglu<B>)
    b.add_rmsnorm_swiglu(x, delta, n, dim, norm, eps, xn, gate_up, y);
  else
    compose_add_rmsnorm_swiglu(b, x, delta, n, dim, norm, eps, xn, gate_up, y);
}

template <class B>
void rope_attend(B& b, int layer, const typename B::KvRows& kv, typename B::F q, int n,
                 typename B::CF table, typename B::F out, const AttentionHeads& heads) {
  if constexpr (FusesRopeAttend<B>)
    b.rope_attend(layer, kv, q, n, table, out, heads);
  else
    compose_rope_attend(b, layer, kv, q, n, table, out, heads);
}

template <class B>
void moe_route(B& b, typename B::CF xn, int n, const typename B::Weight& router,
               const RouterRule& rule, std::span<const float> bias, typename B::F logits,
               float* host_logits, std::int32_t* experts, float* weights) {
  if constexpr (FusesMoeRoute<B>)
    b.moe_route(xn, n, router, rule, bias, logits, host_logits, experts, weights);
  else
    compose_moe_route(b, xn, n, router, rule, bias, logits, host_logits, experts, weights);
}

template <class B>
void moe_experts(B& b, typename B::CF xn, int n, int dim,
                 std::span<const typename B::Weight> gate_up,
                 std::span<const typename B::Weight> down, const ExpertGroups& groups,
                 typename B::F xg, typename B::F act, typename B::F ye, typename B::F out) {
  if constexpr (FusesMoeExperts<B>)
    b.moe_experts(xn, n, dim, gate_up, down, groups, xg, act, ye, out);
  else
    compose_moe_experts(b, xn, n, dim, gate_up, down, groups, xg, act, ye, out);
}

}  // namespace fused

}  // namespace specrun
