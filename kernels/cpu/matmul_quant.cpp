// matmul over quantized weights (pack_quantized; docs/quantization-design.md 3.4): the part of
// matmul.cpp's run_blocks for a PackedWeights whose quant.kind is not kNone. Every variant's
// result is bitwise its own F32 matmul on W' = dequant(W) ((q - z) * s, fl32(e4m3(b) * s)): per
// (row, token) the products in ascending k, restarted every kChunk inputs, the partial sums added
// to y in order, with the multiply-add of the variant's F32 tiles (fused in AVX2 and AVX-512).
// What differs is only how W' is formed: AVX2 and AVX-512 decode it in registers (below), the
// baseline decodes it with scalar code into a buffer.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA::detail {

namespace {

#if defined(SPECRUN_CPU_AVX512) || defined(SPECRUN_CPU_AVX2)
// ---- The SIMD tiles (AVX-512, AVX2). A k-group of a block's W' is kV vectors of kLanes rows
// in row order (vector v: rows kLanes * v ..), decoded in registers from the codes:
//  - int: the unsigned codes widened to int32; with BF16/F16 scales below 2^100, W' =
//    fmsub(float(code), s, (2^(bits-1) + z) * s), both products exact, so the one rounding of
//    the FMA is none (Group); otherwise (F32 scales) float(code - 2^(bits-1) - z) * s, the
//    scalar rule's one rounding;
//  - fp8: the half whose value is fp8 * 2^-8 (quant.h's e4m3_to_f16_bits_scaled, from the
//    sign-extended byte) widened by vcvtph2ps, times s * 256: fl32(fp8 * s), since the product
//    is the same real number, when s * 256 is exact (|s| < 2^100); else times 256 (exact), then s.
// Each vector then feeds one fused multiply-add per token, the F32 tiles' operation. Up to
// kFusedTokens tokens (decode) the decoded vectors go straight to the multiply-adds; more tokens
// (verify, prefill) decode kChunk inputs into wbuf once and run token tiles of kBufTokens over it.
// Measured on the 2-core AVX2 build machine (docs/quantization-design.md, step 5): decode is
// bound by the decoding's vector operations (~19 per 32 int4 weights against BF16's ~6), not by
// memory.
#ifdef SPECRUN_CPU_AVX512
// (maskz forms: GCC 12 warns "may be used uninitialized" in the unmasked ones)
using VF = __m512;
using VI = __m512i;
constexpr int kLanes = 16;
constexpr int kFusedTokens = 4;  // 2 * 4 accumulators + 2 weights + scales, offsets: 32 registers
constexpr int kBufTokens = 6;
inline VF vzero() {
  return _mm512_setzero_ps();
}
inline VF vset1(float v) {
  return _mm512_set1_ps(v);
}
inline VI vset1i(int v) {
  return _mm512_set1_epi32(v);
}
inline VF vmul(VF a, VF b) {
  return _mm512_mul_ps(a, b);
}
inline VF vfmadd(VF a, VF b, VF c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline VF vfmsub(VF a, VF b, VF c) {
  return _mm512_fmsub_ps(a, b, c);
}
inline VF vcvt(VI q) {
  return _mm512_maskz_cvtepi32_ps(0xffff, q);
}
inline VF vload(const float* p) {
  return _mm512_load_ps(p);
}
inline void vstore(float* p, VF v) {
  _mm512_store_ps(p, v);
}
inline VF vint_to_f(VI q, VI off) {
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_sub_epi32(q, off));
}
#else
using VF = __m256;
using VI = __m256i;
constexpr int kLanes = 8;
constexpr int kFusedTokens = 2;  // 4 * 2 accumulators + 4 weights: scales, offsets spill to L1
constexpr int kBufTokens = 2;
inline VF vzero() {
  return _mm256_setzero_ps();
}
inline VF vset1(float v) {
  return _mm256_set1_ps(v);
}
inline VI vset1i(int v) {
  return _mm256_set1_epi32(v);
}
inline VF vmul(VF a, VF b) {
  return _mm256_mul_ps(a, b);
}
inline VF vfmadd(VF a, VF b, VF c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline VF vfmsub(VF a, VF b, VF c) {
  return _mm256_fmsub_ps(a, b, c);
}
inline VF vcvt(VI q) {
  return _mm256_cvtepi32_ps(q);
}
inline VF vload(const float* p) {
  return _mm256_load_ps(p);
}
inline void vstore(float* p, VF v) {
  _mm256_store_ps(p, v);
}
inline VF vint_to_f(VI q, VI off) {
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, off));
}
#endif
constexpr int kV = kPackRows / kLanes;

template <typename T>
inline const __m128i* m128(const T* p) {
  return reinterpret_cast<const __m128i*>(p);
}

// One scale group of a block, widened: row scales (fp8: times 256 unless `unscaled`); int: the
// offsets 2^(bits-1) + z, and, when `fused` (scales in BF16 or F16, all below 2^100), c = offset *
// s, exact (<= 8 + 11 significant bits), so that fmsub(float(code), s, c) is the exact (q - z) * s
// in one rounding-free operation (a zero there is +0 where (q - z) * s may be -0: the same sums).
struct Group {
  VF s[kV];
  VI off[kV];
  VF c[kV];
  bool unscaled = false;
  bool fused = false;
};

// s[v] = the 32 row scales at p (dtype t, row order), widened exactly.
inline void load_scales(const std::uint8_t* p, DType t, VF* s) {
#pragma GCC unroll 4
  for (int v = 0; v < kV; ++v) {
#ifdef SPECRUN_CPU_AVX512
    if (t == DType::kF32) {
      s[v] = _mm512_loadu_ps(p + 64 * v);
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * v));
      s[v] = t == DType::kF16 ? _mm512_maskz_cvtph_ps(0xffff, h)
                              : _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
                                    0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
    }
#else
    if (t == DType::kF32) {
      s[v] = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * v);
    } else {
      const __m128i h = _mm_loadu_si128(m128(p + 16 * v));
      s[v] = t == DType::kF16
                 ? _mm256_cvtph_ps(h)
                 : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
#endif
  }
}

// Whether every lane of s is below 2^100 in magnitude (then s * 256 is exact).
inline bool scalable(const VF* s) {
  bool ok = true;
#pragma GCC unroll 4
  for (int v = 0; v < kV; ++v) {
#ifdef SPECRUN_CPU_AVX512
    ok = ok && _mm512_cmp_ps_mask(_mm512_abs_ps(s[v]), vset1(0x1p100f), _CMP_LT_OQ) == 0xffff;
#else
    const VF a = _mm256_andnot_ps(vset1(-0.0f), s[v]);
    ok = ok && _mm256_movemask_ps(_mm256_cmp_ps(a, vset1(0x1p100f), _CMP_LT_OQ)) == 0xff;
#endif
  }
  return ok;
}

// Scale group `group` of the block whose scales start at `scales` (zeros: its zero points).
template <QuantKind QK>
inline void load_group(const std::uint8_t* scales, const std::int8_t* zeros, const QuantFormat& f,
                       int group, Group& g) {
  load_scales(scales + static_cast<std::size_t>(group) * kPackRows * dtype_size(f.scale_dtype),
              f.scale_dtype, g.s);
  if constexpr (QK == QuantKind::kFp8E4M3) {
    g.unscaled = !scalable(g.s);
    if (!g.unscaled)
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) g.s[v] = vmul(g.s[v], vset1(256.0f));
  } else {
    g.fused = f.scale_dtype != DType::kF32 && scalable(g.s);
    const int offset = QK == QuantKind::kInt4 ? 8 : 128;
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      if (!f.zero_points) {
        g.off[v] = vset1i(offset);
        continue;
      }
      const std::int8_t* z = zeros + static_cast<std::size_t>(group) * kPackRows + kLanes * v;
#ifdef SPECRUN_CPU_AVX512
      g.off[v] = _mm512_add_epi32(_mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(m128(z))),
                                  vset1i(offset));
#else
      g.off[v] = _mm256_add_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(m128(z))), vset1i(offset));
#endif
    }
    if (g.fused)
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) g.c[v] = vmul(vcvt(g.off[v]), g.s[v]);
  }
}

// W' of one k-group (codes at c) into w[kV].
template <QuantKind QK>
inline void dequant_k(const std::uint8_t* c, const Group& g, VF* w) {
  if constexpr (QK == QuantKind::kFp8E4M3) {
    // The half fp8 * 2^-8 (quant.h's ((b & 0x80) << 8) | ((b & 0x7F) << 7)) from b sign-extended
    // to 16 bits, shifted left by 7 (sign in bit 15, b's bits 6-0 in 13-7) and bit 14 cleared.
    constexpr short kHalfMask = static_cast<short>(0xBF80);
#ifdef SPECRUN_CPU_AVX512
#pragma GCC unroll 2
    for (int v = 0; v < kV; ++v) {
      const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(m128(c + 16 * v)));
      w[v] = _mm512_maskz_cvtph_ps(
          0xffff, _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(kHalfMask)));
    }
#else
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(m128(c + 8 * v)));
      w[v] = _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(kHalfMask)));
    }
#endif
    if (g.unscaled)
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) w[v] = vmul(w[v], vset1(256.0f));  // exact: fp8's value
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) w[v] = vmul(w[v], g.s[v]);
  } else {
    VI q[kV];
#ifdef SPECRUN_CPU_AVX512
    if constexpr (QK == QuantKind::kInt4) {
      // Byte j: row j in the low nibble, row j + 16 in the high one.
      const __m512i a = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(m128(c)));
      q[0] = _mm512_and_si512(a, vset1i(15));
      q[1] = _mm512_maskz_srli_epi32(0xffff, a, 4);
    } else {
      q[0] = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(m128(c)));
      q[1] = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(m128(c + 16)));
    }
#else
    if constexpr (QK == QuantKind::kInt4) {
      const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(m128(c)));
      const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(m128(c + 8)));
      q[0] = _mm256_and_si256(a, vset1i(15));
      q[1] = _mm256_and_si256(b, vset1i(15));
      q[2] = _mm256_srli_epi32(a, 4);
      q[3] = _mm256_srli_epi32(b, 4);
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) q[v] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(m128(c + 8 * v)));
    }
#endif
    if (g.fused) {
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) w[v] = vfmsub(vcvt(q[v]), g.s[v], g.c[v]);
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) w[v] = vmul(vint_to_f(q[v], g.off[v]), g.s[v]);
    }
  }
}

// Bytes of codes per k-group.
template <QuantKind QK>
constexpr std::size_t code_bytes() {
  return QK == QuantKind::kInt4 ? 16 : 32;
}

// Calls fn(k, w) with W' of inputs [k0, k1) of the block at blk, in ascending k.
template <QuantKind QK, class Fn>
inline void for_each_k(const std::uint8_t* blk, const QuantFormat& f, int in, int k0, int k1,
                       const Fn& fn) {
  const std::uint8_t* scales = blk + quant_block_values(f, in);
  const auto* zeros = reinterpret_cast<const std::int8_t*>(scales + quant_block_scales(f, in));
  for (int k = k0; k < k1;) {
    const int group = k / f.group;
    const int end = min_of(k1, (group + 1) * f.group);
    Group g;
    load_group<QK>(scales, zeros, f, group, g);
    for (; k < end; ++k) {
      VF w[kV];
      dequant_k<QK>(blk + static_cast<std::size_t>(k) * code_bytes<QK>(), g, w);
      fn(k, w);
    }
  }
}

// y[t * y_stride + r] (r < rows) = the chunk's partial sums acc (first chunk: stored, else added).
template <int NT>
inline void flush(const VF (&acc)[NT][kV], bool first, float* y, std::int64_t y_stride, int rows) {
  for (int t = 0; t < NT; ++t) {
    alignas(64) float part[kPackRows];
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) vstore(part + kLanes * v, acc[t][v]);
    float* yt = y + t * y_stride;
    for (int r = 0; r < rows; ++r) yt[r] = first ? part[r] : yt[r] + part[r];
  }
}

// NT tokens (x rows `in` apart) over the block at blk, W' decoded in registers.
template <QuantKind QK, int NT>
void fused_tile(const float* x, const std::uint8_t* blk, const QuantFormat& f, int in, float* y,
                std::int64_t y_stride, int rows) {
  for (int k0 = 0; k0 < in; k0 += kChunk) {
    const int k1 = min_of(in, k0 + kChunk);
    VF acc[NT][kV];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) acc[t][v] = vzero();
    for_each_k<QK>(blk, f, in, k0, k1, [&](int k, const VF* w) {
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const VF xb = vset1(x[static_cast<std::int64_t>(t) * in + k]);
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) acc[t][v] = vfmadd(xb, w[v], acc[t][v]);
      }
    });
    flush<NT>(acc, k0 == 0, y, y_stride, rows);
  }
}

// NT tokens over inputs [k0, k1) of a block whose W' is in wbuf.
template <int NT>
void buffered_tile(const float* x, int in, const float* wbuf, int k0, int k1, float* y,
                   std::int64_t y_stride, int rows) {
  VF acc[NT][kV];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) acc[t][v] = vzero();
  for (int k = k0; k < k1; ++k) {
    const float* wk = wbuf + static_cast<std::size_t>(k - k0) * kPackRows;
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      const VF w = vload(wk + kLanes * v);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        acc[t][v] = vfmadd(vset1(x[static_cast<std::int64_t>(t) * in + k]), w, acc[t][v]);
    }
  }
  flush<NT>(acc, k0 == 0, y, y_stride, rows);
}

// The rows [0, rows) of the packed block at blk for n_tokens tokens: y[t * y_stride + r].
template <QuantKind QK>
void quant_block(const float* x, int n_tokens, const std::uint8_t* blk, const QuantFormat& f,
                 int in, float* wbuf, float* y, std::int64_t y_stride, int rows) {
  static_assert(kFusedTokens <= 4 && kBufTokens <= 6, "the switches below");
  switch (n_tokens) {
    case 1:
      return fused_tile<QK, 1>(x, blk, f, in, y, y_stride, rows);
    case 2:
      return fused_tile<QK, 2>(x, blk, f, in, y, y_stride, rows);
#ifdef SPECRUN_CPU_AVX512
    case 3:
      return fused_tile<QK, 3>(x, blk, f, in, y, y_stride, rows);
    case 4:
      return fused_tile<QK, 4>(x, blk, f, in, y, y_stride, rows);
#endif
    default:
      break;
  }
  for (int k0 = 0; k0 < in; k0 += kChunk) {
    const int k1 = min_of(in, k0 + kChunk);
    for_each_k<QK>(blk, f, in, k0, k1, [&](int k, const VF* w) {
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v)
        vstore(wbuf + static_cast<std::size_t>(k - k0) * kPackRows + kLanes * v, w[v]);
    });
    for (int t = 0; t < n_tokens; t += kBufTokens) {
      const float* xt = x + static_cast<std::int64_t>(t) * in;
      float* yt = y + t * y_stride;
      switch (min_of(kBufTokens, n_tokens - t)) {
#define SPECRUN_BUF_CASE(N)                                                                    \
  case N:                                                                                      \
    if constexpr (N <= kBufTokens) buffered_tile<N>(xt, in, wbuf, k0, k1, yt, y_stride, rows); \
    break;
        SPECRUN_BUF_CASE(1)
        SPECRUN_BUF_CASE(2)
        SPECRUN_BUF_CASE(3)
        SPECRUN_BUF_CASE(4)
        SPECRUN_BUF_CASE(5)
        SPECRUN_BUF_CASE(6)
#undef SPECRUN_BUF_CASE
      }
    }
  }
}
#else
// ---- The scalar tile (the baseline variant, and portable builds): W' of a block decoded once
// per kChunk inputs into wbuf, shared by all tokens, then per (row, token) the portable F32
// tile's expression (part += x * w, the same contraction rules) in ascending k.

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
        for (int r = 0; r < kPackRows; ++r) part[r] += xv * wk[r];
      }
      float* yt = y + t * y_stride;
      for (int r = 0; r < rows; ++r) yt[r] = k0 == 0 ? part[r] : yt[r] + part[r];
    }
  }
}

#endif

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
