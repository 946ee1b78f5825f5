// Default compositions of the backend interface's fused ops (backend/backend.h). A backend
// without a fused kernel implements the op by calling these; a backend with one must produce
// bitwise what the composition produces on it (the CPU backend's tests check that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace specrun {

// x += delta, then y = rmsnorm(x) with w.
template <class B>
void compose_add_rmsnorm(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                         const typename B::Weight& w, float eps, typename B::F y) {
  b.add_inplace(x, delta, static_cast<std::size_t>(n) * dim);
  b.rmsnorm(x, n, dim, w, eps, y);
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

// x += delta (delta may be a null pointer: nothing to add), xn = rmsnorm(x) with `norm` (x [n,
// dim]), then linear_multi(xn, outs): q, k and v of a layer's input. Afterwards xn holds
// unspecified values (a fused kernel normalises on the way).
template <class B>
void compose_add_rmsnorm_linear_multi(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                                      const typename B::Weight& norm, float eps, typename B::F xn,
                                      std::span<const typename B::LinearOut> outs) {
  if (delta.get() != nullptr)
    b.add_rmsnorm(x, delta, n, dim, norm, eps, xn);
  else
    b.rmsnorm(x, n, dim, norm, eps, xn);
  b.linear_multi(xn, n, outs);
}

// The same with swiglu(xn) after the norm: the MLP's input. xn as above.
template <class B>
void compose_add_rmsnorm_swiglu(B& b, typename B::F x, typename B::CF delta, int n, int dim,
                                const typename B::Weight& norm, float eps, typename B::F xn,
                                const typename B::Weight& gate_up, typename B::F y) {
  if (delta.get() != nullptr)
    b.add_rmsnorm(x, delta, n, dim, norm, eps, xn);
  else
    b.rmsnorm(x, n, dim, norm, eps, xn);
  b.swiglu(xn, n, gate_up, y);
}

// Each output on its own.
template <class B>
void compose_linear_multi(B& b, typename B::CF x, int n,
                          std::span<const typename B::LinearOut> outs) {
  for (const typename B::LinearOut& o : outs) b.linear(x, n, *o.w, o.bias, o.y);
}

// y = silu(x gate^T) * (x up^T) through two linears and silu_mul, gate and up products in the
// scratch g and u ([n, rows] each).
template <class B>
void compose_swiglu(B& b, typename B::CF x, int n, const typename B::Weight& gate,
                    const typename B::Weight& up, typename B::F g, typename B::F u,
                    typename B::F y) {
  b.linear(x, n, gate, nullptr, g);
  b.linear(x, n, up, nullptr, u);
  b.silu_mul(g, u, y, static_cast<std::size_t>(n) * gate.rows);
}

// RoPE of the staged keys kv.k and of q (all n rows of the pass, table rows 0..n-1), then the
// append and attention (attend, not last_only). Afterwards q and kv.k hold unspecified values:
// a fused kernel may rotate them on the way instead.
template <class B>
void compose_rope_attend(B& b, int layer, const typename B::KvRows& kv, typename B::F q, int n,
                         typename B::CF table, typename B::F out, int heads, int kv_heads,
                         int head_dim) {
  b.rope_apply(kv.k, n, kv_heads, head_dim, static_cast<std::int64_t>(kv_heads) * head_dim, table);
  b.rope_apply(q, n, heads, head_dim, static_cast<std::int64_t>(heads) * head_dim, table);
  b.attend(layer, q, n, false, out, heads, kv_heads, head_dim);
}

}  // namespace specrun
