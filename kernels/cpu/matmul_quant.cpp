// matmul over quantized weights (pack_quantized; docs/quantization-design.md 3.4): the part of
// matmul.cpp's run_blocks for a PackedWeights whose quant.kind is not kNone.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA::detail {

namespace {

// The scalar tile: every variant compiles it with its own multiply-add (fused where the F32 tiles fuse), so a
// quantized matmul is bitwise the variant's F32 matmul on W' = dequant(W): per (row, token) the
// products in ascending k, restarted every kChunk inputs, the partial sums added to y in order.
// W' of a block is decoded once per kChunk inputs into a buffer shared by all tokens.
// (SIMD dequantizing tiles: step 5.)

// acc + x * w as this variant's F32 tiles form it.
inline float madd(float x, float w, float acc) {
#if defined(SPECRUN_CPU_AVX512) || defined(SPECRUN_CPU_AVX2)
  return __builtin_fmaf(x, w, acc);
#else
  acc += x * w;  // the portable tile's expression (same contraction rules)
  return acc;
#endif
}

inline float scale_at(const std::uint8_t* p, DType t) {
  if (t == DType::kF32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// W'[k][r] for inputs [k0, k1) of the packed block at blk (wbuf: (k1 - k0) x kPackRows).
template <QuantKind QK>
void dequant_chunk(const std::uint8_t* blk, const QuantFormat& f, int in, int k0, int k1,
                   float* wbuf) {
  const std::uint8_t* scales = blk + quant_block_values(f, in);
  const auto* zeros = reinterpret_cast<const std::int8_t*>(scales + quant_block_scales(f, in));
  const std::size_t ss = dtype_size(f.scale_dtype);
  float s[kPackRows];
  int z[kPackRows] = {};
  int group = -1;
  for (int k = k0; k < k1; ++k) {
    if (k / f.group != group) {
      group = k / f.group;
      for (int r = 0; r < kPackRows; ++r) {
        s[r] = scale_at(scales + (static_cast<std::size_t>(group) * kPackRows + r) * ss,
                        f.scale_dtype);
        if (f.zero_points) z[r] = zeros[group * kPackRows + r];
      }
    }
    float* wk = wbuf + static_cast<std::size_t>(k - k0) * kPackRows;
    if constexpr (QK == QuantKind::kInt4) {
      const std::uint8_t* c = blk + static_cast<std::size_t>(k) * 16;
      for (int r = 0; r < 16; ++r) {
        wk[r] = static_cast<float>((c[r] & 15) - 8 - z[r]) * s[r];
        wk[r + 16] = static_cast<float>((c[r] >> 4) - 8 - z[r + 16]) * s[r + 16];
      }
    } else if constexpr (QK == QuantKind::kInt8) {
      const std::uint8_t* c = blk + static_cast<std::size_t>(k) * 32;
      for (int r = 0; r < kPackRows; ++r) wk[r] = static_cast<float>(c[r] - 128 - z[r]) * s[r];
    } else {
      const std::uint8_t* c = blk + static_cast<std::size_t>(k) * 32;
      for (int r = 0; r < kPackRows; ++r) wk[r] = e4m3_to_f32(c[r]) * s[r];
    }
  }
}

// The rows [0, rows) of the packed block at blk for n_tokens tokens: y[t * y_stride + r].
template <QuantKind QK>
void quant_block(const float* x, int n_tokens, const std::uint8_t* blk, const QuantFormat& f,
                 int in, float* wbuf, float* y, std::int64_t y_stride, int rows) {
  for (int k0 = 0; k0 < in; k0 += kChunk) {
    const int k1 = min_of(in, k0 + kChunk);
    dequant_chunk<QK>(blk, f, in, k0, k1, wbuf);
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = x + static_cast<std::int64_t>(t) * in;
      float part[kPackRows] = {};
      for (int k = k0; k < k1; ++k) {
        const float xv = xt[k];
        const float* wk = wbuf + static_cast<std::size_t>(k - k0) * kPackRows;
        for (int r = 0; r < kPackRows; ++r) part[r] = madd(xv, wk[r], part[r]);
      }
      float* yt = y + t * y_stride;
      for (int r = 0; r < rows; ++r) yt[r] = k0 == 0 ? part[r] : yt[r] + part[r];
    }
  }
}

// Units [u0, u1) (blocks, or gate/up pairs for swiglu) of a quantized output for all tokens,
// then its bias.
template <QuantKind QK>
void quant_blocks_kernel(const float* x, int n_tokens, const MatmulOutput& o, int u0, int u1) {
  const QuantFormat& f = o.w.quant;
  const int in = o.w.in, out = o.w.out;
  const std::size_t block_bytes = quant_block_bytes(f, in);
  const auto* w = static_cast<const std::uint8_t*>(o.w.data);
  static thread_local Scratch<float> scratch;
  float* wbuf = scratch.get(static_cast<std::size_t>(kChunk) * kPackRows +
                            (o.swiglu ? 2 * static_cast<std::size_t>(n_tokens) * kPackRows : 0));
  for (int u = u0; u < u1; ++u) {
    const int rows = min_of(kPackRows, out - u * kPackRows);
    float* yu = o.y + static_cast<std::int64_t>(u) * kPackRows;
    if (!o.swiglu) {
      quant_block<QK>(x, n_tokens, w + block_bytes * u, f, in, wbuf, yu, out, rows);
      continue;
    }
    float* g = wbuf + kChunk * kPackRows;
    float* up = g + static_cast<std::size_t>(n_tokens) * kPackRows;
    quant_block<QK>(x, n_tokens, w + block_bytes * 2 * u, f, in, wbuf, g, kPackRows, kPackRows);
    quant_block<QK>(x, n_tokens, w + block_bytes * (2 * u + 1), f, in, wbuf, up, kPackRows,
                    kPackRows);
    for (int t = 0; t < n_tokens; ++t)
      silu_rows(g + t * kPackRows, up + t * kPackRows, yu + static_cast<std::int64_t>(t) * out,
                rows);
  }
  if (o.bias) {
    const int r1 = min_of(out, u1 * kPackRows);
    for (int t = 0; t < n_tokens; ++t)
      for (int r = u0 * kPackRows; r < r1; ++r)
        o.y[static_cast<std::int64_t>(t) * out + r] += o.bias[r];
  }
}

}  // namespace

void quant_blocks(const float* x, int n_tokens, const MatmulOutput& o, int u0, int u1) {
  switch (o.w.quant.kind) {
    case QuantKind::kNone:
      break;
    case QuantKind::kInt4:
      return quant_blocks_kernel<QuantKind::kInt4>(x, n_tokens, o, u0, u1);
    case QuantKind::kInt8:
      return quant_blocks_kernel<QuantKind::kInt8>(x, n_tokens, o, u0, u1);
    case QuantKind::kFp8E4M3:
      return quant_blocks_kernel<QuantKind::kFp8E4M3>(x, n_tokens, o, u0, u1);
  }
}

}  // namespace specrun::cpu::SPECRUN_ISA::detail
