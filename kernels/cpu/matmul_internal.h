// What matmul.cpp (the F32/BF16/F16 tiles and the schedule) and matmul_quant.cpp (the quantized
// tiles) share. Internal to the kernel variants' sources: everything is in
// specrun::cpu::<variant>::detail (kernels/cpu/variant.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA::detail {

// Inputs per partial sum (ops.h numerics). 128 rather than 64: the flushes to y cost ~4% of
// prefill's matmul time at 64; reference logits move from 1.6e-5 to 2.1e-5 (test_transformer).
constexpr int kChunk = 128;

// yt[r] = silu(g[r]) * u[r] for r < valid (g, u 64-byte aligned): silu_mul's formula, the fused
// SwiGLU epilogue.
inline void silu_rows(const float* g, const float* u, float* yt, int valid) {
#ifdef SPECRUN_CPU_AVX512
  for (int r = 0; r < valid; r += 16) {
    const __mmask16 m = tail_mask(valid - r);
    _mm512_mask_storeu_ps(yt + r, m, silu_mul16(_mm512_load_ps(g + r), _mm512_load_ps(u + r)));
  }
#elif defined(SPECRUN_CPU_AVX2)
  for (int r = 0; r < valid; r += 8)
    _mm256_maskstore_ps(yt + r, tail_mask8(valid - r),
                        silu_mul8(_mm256_load_ps(g + r), _mm256_load_ps(u + r)));
#else
  for (int r = 0; r < valid; ++r) yt[r] = silu_mul1(g[r], u[r]);
#endif
}

// Units [u0, u1) (blocks, or gate/up pairs for swiglu) of the quantized output o (o.w.quant.kind
// != kNone) for n_tokens tokens (x: [n_tokens, o.w.in]), then its bias (matmul_quant.cpp).
void quant_blocks(const float* x, int n_tokens, const MatmulOutput& o, int u0, int u1);

}  // namespace specrun::cpu::SPECRUN_ISA::detail
