// matmul / matmul_multi over packed weights (ops.h): y[T, out] = x[T, in] * W[out, in]^T (+ bias),
// W in F32/BF16/F16 packed in blocks of kPackRows = 32 rows, float32 accumulation.
//
// A tile multiplies NB consecutive blocks by NT tokens. For each input index k it loads each
// block's k-group (one 64-byte load in BF16 and F16, widened in registers: BF16 by a shift and a
// mask, F16 by vcvtph2ps; two loads in F32), broadcasts x[t, k] for each token and updates
// 2 * NB * NT accumulators of 16 rows each: one fused multiply-add per 16 weights and token, no
// conversions per token and no horizontal sums. Every kChunk inputs the accumulators are added
// to y (stored the first time): that bounds the rounding error of long sums and is the same for
// every tile shape, the whole of ops.h's order contract.
//
// Scheduling: one parallel region per call; the blocks of all its outputs are split over the
// threads in contiguous ranges, which each thread takes a few blocks at a time from the front,
// and a thread done early takes from the back of the others' (matmul_multi).
//   <= kMaxTileTokens tokens (decode, verify, batched decode): one pass with every token in the
//     tile, so that each weight is read from memory once. Decode tiles 4 blocks (4 streams,
//     8 independent FMA chains), 3-6 tokens 2 blocks, more 1 block.
//   more (prefill): super-blocks of kSuperBlocks blocks, whose weights stay in L2 while token
//     tiles of at most kPrefillTile tokens pass over them.
// Each tile software-prefetches its block streams kPrefetchBytes ahead.
//
// Why this layout: the earlier one (row-major weights, one 16-lane accumulator per (row, token)
// over ascending 16-element chunks, reduced at the end) reached ~150 GFLOP/s per core with its
// best tile in L1; this one ~210 (Zen 5, 2 FMA/cycle: ~215 peak), with no horizontal sums and
// half the widening work in BF16.
#include <omp.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

using detail::kChunk;
using detail::max_of;
using detail::min_of;
using detail::silu_rows;

namespace {

constexpr int kMaxTileTokens = 12;  // up to this many tokens: one tile holds them all
constexpr int kPrefillTile = 6;     // longer inputs: token tiles of at most this many
constexpr int kSuperBlocks = 2;     // prefill: blocks kept in L2 across the token tiles
// Software prefetch distance in each block stream (128 lines; 1 KiB left verify and batched
// decode ~20% slower, 4-8 KiB measured best).
[[maybe_unused]] constexpr std::int64_t kPrefetchBytes = 8192;
// Blocks a thread takes at a time from its range (one decode tile; prefill: one super-block).
constexpr int kStealChunk = 4;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr std::int64_t kParallelMinWork = 1 << 16;

// Bytes of one k-group (kPackRows weights).
template <DType KT>
constexpr std::int64_t group_bytes() {
  return static_cast<std::int64_t>(kPackRows * dtype_size(KT));
}

// Blocks per tile for nt tokens: enough independent FMA chains (>= 8) within the 32 vector
// registers (2 * NB * NT accumulators + 2 * NB weights + 1 broadcast).
constexpr int blocks_for(int nt) {
  return nt <= 2 ? 4 : nt <= 6 ? 2 : 1;
}

// Width of tile i when n tokens are cut into n_tiles tiles of near-equal width.
inline int tile_width(int n, int n_tiles, int i) {
  return n / n_tiles + (i < n % n_tiles ? 1 : 0);
}

// A tile: NB blocks (the first at w, block_bytes apart) x NT tokens (x rows x_stride apart),
// writing rows [0, rows) of y (token t at y + t * y_stride).
#ifdef SPECRUN_CPU_AVX512
template <DType KT>
inline void load_group(const std::uint8_t* p, __m512& lo, __m512& hi) {
  // (maskz forms: GCC 12 warns "may be used uninitialized" in the unmasked ones)
  if constexpr (KT == DType::kF32) {
    lo = _mm512_loadu_ps(p);
    hi = _mm512_loadu_ps(p + 64);
  } else if constexpr (KT == DType::kBF16) {
    const __m512i v = _mm512_loadu_si512(p);
    lo = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, v, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  } else {
    lo = _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi =
        _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }
}

template <DType KT, int NB, int NT>
void tile(const float* x, std::int64_t x_stride, const std::uint8_t* w, std::int64_t block_bytes,
          int in, float* y, std::int64_t y_stride, int rows) {
  static_assert(2 * NB * NT + 2 * NB + 1 <= 32, "tile does not fit the 32 vector registers");
  constexpr std::int64_t G = group_bytes<KT>();
  __mmask16 mask[NB][2];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b)
    for (int h = 0; h < 2; ++h)
      mask[b][h] = detail::tail_mask(max_of(0, rows - (b * kPackRows + 16 * h)));
  for (int k0 = 0; k0 < in; k0 += kChunk) {
    const int k1 = min_of(in, k0 + kChunk);
    // Fully unrolled constant-index loops: GCC keeps acc in registers.
    __m512 acc[NB][2][NT];
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b)
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) acc[b][0][t] = acc[b][1][t] = _mm512_setzero_ps();
    for (int k = k0; k < k1; ++k) {
      __m512 lo[NB], hi[NB];
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) {
        const std::uint8_t* p = w + b * block_bytes + k * G;
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T0);
        if constexpr (G > 64)
          _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64), _MM_HINT_T0);
        load_group<KT>(p, lo[b], hi[b]);
      }
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        const __m512 xb = _mm512_set1_ps(x[t * x_stride + k]);
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b) {
          acc[b][0][t] = _mm512_fmadd_ps(xb, lo[b], acc[b][0][t]);
          acc[b][1][t] = _mm512_fmadd_ps(xb, hi[b], acc[b][1][t]);
        }
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          float* yp = y + t * y_stride + b * kPackRows + 16 * h;
          const __m512 prev = k0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[b][h], yp);
          _mm512_mask_storeu_ps(yp, mask[b][h],
                                k0 == 0 ? acc[b][h][t] : _mm512_add_ps(prev, acc[b][h][t]));
        }
  }
}
#elif defined(SPECRUN_CPU_AVX2)
// AVX2 has 16 vector registers of 8 floats: a k-group of a block is four 8-row vectors, and a
// tile holds NB blocks x NV of those vectors x NT tokens of accumulators, plus the broadcast
// x and the weights, which are used as they are widened (at most two live at a time). Vector v of a
// group holds rows vector_row(v)..+7: F32 and F16 in row order; BF16 words interleave rows j and j
// + 16, so the first 32 bytes widen to rows 0-7 (low halves) and 16-23 (high halves), the next 32
// to rows 8-15 and 24-31. Every (row, token) sum is the one the AVX-512 tiles form (FMA in
// ascending k, partial sums every kChunk added in order), so the two variants' matmuls agree
// bitwise.
template <DType KT>
constexpr int vector_row(int v) {
  return KT == DType::kBF16 ? (v == 0 ? 0 : v == 1 ? 16 : v == 2 ? 8 : 24) : 8 * v;
}

// Vectors V0 .. V0 + NV - 1 of the k-group at p, widened (V0 and NV even for BF16: a 32-byte
// load gives two vectors).
template <DType KT, int V0, int NV>
inline void load_vectors(const std::uint8_t* p, __m256* w) {
#pragma GCC unroll 4
  for (int i = 0; i < NV; ++i) {
    const int v = V0 + i;
    if constexpr (KT == DType::kF32) {
      w[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * v);
    } else if constexpr (KT == DType::kF16) {
      w[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * v)));
    } else if (v % 2 == 0) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * v));
      w[i] = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
      if (i + 1 < NV)
        w[i + 1] = _mm256_castsi256_ps(
            _mm256_and_si256(a, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
    }
  }
}

template <DType KT, int NB, int V0, int NV, int NT>
void tile(const float* x, std::int64_t x_stride, const std::uint8_t* w, std::int64_t block_bytes,
          int in, float* y, std::int64_t y_stride, int rows) {
  static_assert(NB * NV * NT + 2 + 1 <= 16, "tile does not fit the 16 vector registers");
  static_assert(KT != DType::kBF16 || (V0 % 2 == 0 && NV % 2 == 0), "BF16 vectors come in pairs");
  constexpr std::int64_t G = group_bytes<KT>();
  // The first cache line of a group that these vectors read (F32 groups are two lines).
  constexpr std::int64_t kLine = G > 64 ? 64 * (V0 / 2) : 0;
  __m256i mask[NB][NV];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      mask[b][v] = detail::tail_mask8(rows - (b * kPackRows + vector_row<KT>(V0 + v)));
  for (int k0 = 0; k0 < in; k0 += kChunk) {
    const int k1 = min_of(in, k0 + kChunk);
    __m256 acc[NB][NV][NT];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) acc[b][v][t] = _mm256_setzero_ps();
    for (int k = k0; k < k1; ++k) {
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const std::uint8_t* p = w + b * block_bytes + k * G;
        _mm_prefetch(reinterpret_cast<const char*>(p + kLine + kPrefetchBytes), _MM_HINT_T0);
        if constexpr (G > 64 && NV == 4)
          _mm_prefetch(reinterpret_cast<const char*>(p + 64 + kPrefetchBytes), _MM_HINT_T0);
        __m256 wv[NV];
        load_vectors<KT, V0, NV>(p, wv);
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          const __m256 xb = _mm256_broadcast_ss(x + t * x_stride + k);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[b][v][t] = _mm256_fmadd_ps(xb, wv[v], acc[b][v][t]);
        }
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          float* yp = y + t * y_stride + b * kPackRows + vector_row<KT>(V0 + v);
          const __m256 sum = k0 == 0
                                 ? acc[b][v][t]
                                 : _mm256_add_ps(_mm256_maskload_ps(yp, mask[b][v]), acc[b][v][t]);
          _mm256_maskstore_ps(yp, mask[b][v], sum);
        }
  }
}

// NB blocks x nt (<= kMaxTileTokens) tokens in tiles that fit the registers: one token three
// blocks at a time (three streams, 12 FMA chains: 4% faster decode than two blocks, while four
// blocks in two half passes were 27% slower), two tokens one block, 3-6 tokens one block's half
// (vectors 0-1, then 2-3: F32's two cache lines one after the other), more in token halves.
template <DType KT, int NB>
inline void tile_nt(int nt, const float* x, std::int64_t x_stride, const std::uint8_t* w,
                    std::int64_t block_bytes, int in, float* y, std::int64_t y_stride, int rows) {
  if (nt > kPrefillTile) {
    tile_nt<KT, NB>(kPrefillTile, x, x_stride, w, block_bytes, in, y, y_stride, rows);
    tile_nt<KT, NB>(nt - kPrefillTile, x + kPrefillTile * x_stride, x_stride, w, block_bytes, in,
                    y + kPrefillTile * y_stride, y_stride, rows);
    return;
  }
  for (int b = 0; b < NB;) {
    const std::uint8_t* wb = w + b * block_bytes;
    float* yb = y + b * kPackRows;
    const int rb = rows - b * kPackRows;
    if (nt == 1 && NB - b >= 3) {
      tile<KT, 3, 0, 4, 1>(x, x_stride, wb, block_bytes, in, yb, y_stride, rb);
      b += 3;
      continue;
    }
    if (nt == 1 && NB - b == 2) {
      tile<KT, 2, 0, 4, 1>(x, x_stride, wb, block_bytes, in, yb, y_stride, rb);
      b += 2;
      continue;
    }
    switch (nt) {
      case 1:
        tile<KT, 1, 0, 4, 1>(x, x_stride, wb, block_bytes, in, yb, y_stride, rb);
        break;
      case 2:
        tile<KT, 1, 0, 4, 2>(x, x_stride, wb, block_bytes, in, yb, y_stride, rb);
        break;
#define SPECRUN_HALF_TILES(N)                                                 \
  case N:                                                                     \
    tile<KT, 1, 0, 2, N>(x, x_stride, wb, block_bytes, in, yb, y_stride, rb); \
    tile<KT, 1, 2, 2, N>(x, x_stride, wb, block_bytes, in, yb, y_stride, rb); \
    break;
        SPECRUN_HALF_TILES(3)
        SPECRUN_HALF_TILES(4)
        SPECRUN_HALF_TILES(5)
        SPECRUN_HALF_TILES(6)
#undef SPECRUN_HALF_TILES
    }
    b += 1;
  }
}
#else
// Row r of a block in a k-group, widened.
template <DType KT>
inline float group_value(const std::uint8_t* g, int r) {
  const int s = packed_slot(KT, r);
  if constexpr (KT == DType::kF32) {
    float v;
    std::memcpy(&v, g + 4 * s, 4);
    return v;
  } else {
    std::uint16_t h;
    std::memcpy(&h, g + 2 * s, 2);
    return KT == DType::kBF16 ? bf16_to_f32(h) : detail::f16_bits_to_f32(h);
  }
}

// The same sums in the same order, one row lane at a time (portable builds).
template <DType KT, int NB, int NT>
void tile(const float* x, std::int64_t x_stride, const std::uint8_t* w, std::int64_t block_bytes,
          int in, float* y, std::int64_t y_stride, int rows) {
  constexpr std::int64_t G = group_bytes<KT>();
  for (int b = 0; b < NB; ++b)
    for (int t = 0; t < NT; ++t)
      for (int k0 = 0; k0 < in; k0 += kChunk) {
        const int k1 = min_of(in, k0 + kChunk);
        float part[kPackRows] = {};
        for (int k = k0; k < k1; ++k) {
          const float xv = x[t * x_stride + k];
          const std::uint8_t* g = w + b * block_bytes + k * G;
          for (int r = 0; r < kPackRows; ++r) part[r] += xv * group_value<KT>(g, r);
        }
        for (int r = 0; r < kPackRows && b * kPackRows + r < rows; ++r) {
          float& out = y[t * y_stride + b * kPackRows + r];
          out = k0 == 0 ? part[r] : out + part[r];
        }
      }
}
#endif

#ifndef SPECRUN_CPU_AVX2
template <DType KT, int NB>
inline void tile_nt(int nt, const float* x, std::int64_t x_stride, const std::uint8_t* w,
                    std::int64_t block_bytes, int in, float* y, std::int64_t y_stride, int rows) {
#define SPECRUN_TILE_CASE(N)                                                      \
  case N:                                                                         \
    if constexpr (2 * NB * N + 2 * NB + 1 <= 32)                                  \
      return tile<KT, NB, N>(x, x_stride, w, block_bytes, in, y, y_stride, rows); \
    break;
  switch (nt) {
    SPECRUN_TILE_CASE(1)
    SPECRUN_TILE_CASE(2)
    SPECRUN_TILE_CASE(3)
    SPECRUN_TILE_CASE(4)
    SPECRUN_TILE_CASE(5)
    SPECRUN_TILE_CASE(6)
    SPECRUN_TILE_CASE(7)
    SPECRUN_TILE_CASE(8)
    SPECRUN_TILE_CASE(9)
    SPECRUN_TILE_CASE(10)
    SPECRUN_TILE_CASE(11)
    SPECRUN_TILE_CASE(12)
  }
#undef SPECRUN_TILE_CASE
}
#endif

// Tiles over blocks [b0, b1) of one output for nt tokens (x, y at the first token), at most
// blocks_for(nt) blocks per tile.
template <DType KT>
inline void tile_blocks(const float* x, int nt, const MatmulOutput& o, int b0, int b1, float* y) {
  const int in = o.w.in;
  const std::int64_t block_bytes = group_bytes<KT>() * in;
  const auto* w = static_cast<const std::uint8_t*>(o.w.data);
  const int most = blocks_for(nt);
  for (int b = b0; b < b1;) {
    const int left = min_of(most, b1 - b);
    const int nb = left >= 4 ? 4 : left >= 2 ? 2 : 1;
    const int rows = min_of(o.w.out - b * kPackRows, nb * kPackRows);
    const std::uint8_t* wb = w + block_bytes * b;
    float* yb = y + static_cast<std::int64_t>(b) * kPackRows;
    if (nb == 4)
      tile_nt<KT, 4>(nt, x, in, wb, block_bytes, in, yb, o.w.out, rows);
    else if (nb == 2)
      tile_nt<KT, 2>(nt, x, in, wb, block_bytes, in, yb, o.w.out, rows);
    else
      tile_nt<KT, 1>(nt, x, in, wb, block_bytes, in, yb, o.w.out, rows);
    b += nb;
  }
}

// Fused SwiGLU over np gate/up pairs (2 * np consecutive blocks: gate, up, ...) x nt tokens: the
// plain tiles compute the blocks into a local buffer (so every sum is the one a plain matmul
// makes), then y = silu(gate) * up for rows [0, rows) (simd.h silu_mul16, silu_mul's formula).
// Up to 2 tokens two pairs in one tile, up to 6 one pair, more (batches of 7-12) gate and up
// each in a one-block tile over all tokens (weights still read from memory once).
template <DType KT>
inline void swiglu_tile(int np, int nt, const float* x, std::int64_t x_stride,
                        const std::uint8_t* w, std::int64_t block_bytes, int in, float* y,
                        std::int64_t y_stride, int rows) {
  alignas(64) float buf[kMaxTileTokens * 2 * kPackRows];  // >= 2 tokens x 2 pairs too
  const int width = 2 * np * kPackRows;
  if (np == 2) {
    tile_nt<KT, 4>(nt, x, x_stride, w, block_bytes, in, buf, width, width);
  } else if (nt <= 6) {
    tile_nt<KT, 2>(nt, x, x_stride, w, block_bytes, in, buf, width, width);
  } else {
    tile_nt<KT, 1>(nt, x, x_stride, w, block_bytes, in, buf, width, kPackRows);
    tile_nt<KT, 1>(nt, x, x_stride, w + block_bytes, block_bytes, in, buf + kPackRows, width,
                   kPackRows);
  }
  for (int t = 0; t < nt; ++t)
    for (int p = 0; p < np; ++p) {
      const float* g = buf + t * width + 2 * p * kPackRows;
      silu_rows(g, g + kPackRows, y + t * y_stride + p * kPackRows,
                min_of(kPackRows, rows - p * kPackRows));
    }
}

// Fused SwiGLU pairs [p0, p1) of one output for nt <= kMaxTileTokens tokens (x, y at the first
// token): two pairs per tile for up to 2 tokens, one for more.
template <DType KT>
inline void swiglu_blocks(const float* x, int nt, const MatmulOutput& o, int p0, int p1, float* y) {
  const int in = o.w.in;
  const std::int64_t block_bytes = group_bytes<KT>() * in;
  const auto* w = static_cast<const std::uint8_t*>(o.w.data);
  for (int p = p0; p < p1;) {
    const int np = nt <= 2 && p1 - p >= 2 ? 2 : 1;
    swiglu_tile<KT>(np, nt, x, in, w + block_bytes * 2 * p, block_bytes, in,
                    y + static_cast<std::int64_t>(p) * kPackRows, o.w.out,
                    min_of(o.w.out - p * kPackRows, np * kPackRows));
    p += np;
  }
}

// Blocks [b0, b1) of one output for all n_tokens tokens, then its bias.
template <DType KT>
void blocks_kernel(const float* x, int n_tokens, const MatmulOutput& o, int b0, int b1) {
  const int in = o.w.in, out = o.w.out;
  // Units of a swiglu output are gate/up pairs.
  auto run = [&](const float* xt, int nt, int u0, int u1, float* yt) {
    if (o.swiglu)
      swiglu_blocks<KT>(xt, nt, o, u0, u1, yt);
    else
      tile_blocks<KT>(xt, nt, o, u0, u1, yt);
  };
  if (n_tokens <= kMaxTileTokens) {
    run(x, n_tokens, b0, b1, o.y);
  } else {
    const int n_tiles = (n_tokens + kPrefillTile - 1) / kPrefillTile;
    for (int s0 = b0; s0 < b1; s0 += kSuperBlocks) {
      const int s1 = min_of(b1, s0 + kSuperBlocks);
      for (int i = 0, t = 0; i < n_tiles; ++i) {
        const int nt = tile_width(n_tokens, n_tiles, i);
        run(x + static_cast<std::int64_t>(t) * in, nt, s0, s1,
            o.y + static_cast<std::int64_t>(t) * out);
        t += nt;
      }
    }
  }
  if (o.bias) {
    const int r1 = min_of(out, b1 * kPackRows);
    for (int t = 0; t < n_tokens; ++t)
      for (int r = b0 * kPackRows; r < r1; ++r)
        o.y[static_cast<std::int64_t>(t) * out + r] += o.bias[r];
  }
}

void run_blocks(const float* x, int n_tokens, const MatmulOutput& o, int b0, int b1) {
  switch (o.w.quant.kind) {
    case QuantKind::kNone:
      break;
    case QuantKind::kInt4:
    case QuantKind::kInt8:
    case QuantKind::kFp8E4M3:
      return detail::quant_blocks(x, n_tokens, o, b0, b1);  // matmul_quant.cpp
  }
  switch (o.w.dtype) {
    case DType::kF32:
      return blocks_kernel<DType::kF32>(x, n_tokens, o, b0, b1);
    case DType::kBF16:
      return blocks_kernel<DType::kBF16>(x, n_tokens, o, b0, b1);
    case DType::kF16:
      return blocks_kernel<DType::kF16>(x, n_tokens, o, b0, b1);
  }
}

// A thread's share of the blocks, [front, back), in one 64-bit word so that its owner (from the
// front) and other threads (from the back) can take chunks without a lock (compiler atomics:
// std::atomic's inline members would be compiled outside the variant's namespace, simd.h).
struct alignas(64) WorkRange {
  std::uint64_t bounds;

  static std::uint64_t join(std::uint32_t front, std::uint32_t back) {
    return static_cast<std::uint64_t>(back) << 32 | front;
  }
  void set(int front, int back) {
    __atomic_store_n(&bounds,
                     join(static_cast<std::uint32_t>(front), static_cast<std::uint32_t>(back)),
                     __ATOMIC_RELAXED);
  }
  // Takes up to `chunk` units from the front (from_back false) or the back; false when empty.
  bool take(int chunk, bool from_back, int& u0, int& u1) {
    std::uint64_t cur = __atomic_load_n(&bounds, __ATOMIC_RELAXED);
    for (;;) {
      const auto front = static_cast<std::uint32_t>(cur),
                 back = static_cast<std::uint32_t>(cur >> 32);
      if (front >= back) return false;
      const std::uint32_t n =
          min_of<std::uint32_t>(static_cast<std::uint32_t>(chunk), back - front);
      const std::uint64_t next = from_back ? join(front, back - n) : join(front + n, back);
      if (__atomic_compare_exchange_n(&bounds, &cur, next, /*weak=*/true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
        u0 = static_cast<int>(from_back ? back - n : front);
        u1 = u0 + static_cast<int>(n);
        return true;
      }
    }
  }
  bool take_front(int chunk, int& u0, int& u1) { return take(chunk, false, u0, u1); }
  bool take_back(int chunk, int& u0, int& u1) { return take(chunk, true, u0, u1); }
};

}  // namespace

namespace {

// The parallel schedule of matmul_multi and matmul_grouped over n_blocks units (the blocks of
// all their outputs, concatenated): run_units(u0, u1) computes units [u0, u1). `work` (multiply-
// adds) decides whether to fork at all; chunk: units a thread takes at a time.
template <class RunUnits>
void schedule(int n_blocks, std::int64_t work, int chunk, const RunUnits& run_units) {
  if (work < kParallelMinWork || omp_get_max_threads() == 1) {
    run_units(0, n_blocks);
    return;
  }
  // Each thread a contiguous range of blocks, taken `chunk` blocks at a time from its front
  // (one stream through memory: a dynamic schedule interleaving the threads' blocks streamed a
  // third slower); a thread done early takes chunks from the back of the others' ranges, so a
  // core slowed by other load does not hold up the call.
  static thread_local detail::Scratch<WorkRange> ranges;
  WorkRange* r = ranges.get(static_cast<std::size_t>(omp_get_max_threads()));
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    r[tid].set(static_cast<int>(static_cast<std::int64_t>(n_blocks) * tid / nt),
               static_cast<int>(static_cast<std::int64_t>(n_blocks) * (tid + 1) / nt));
#pragma omp barrier
    int u0, u1;
    while (r[tid].take_front(chunk, u0, u1)) run_units(u0, u1);
    for (int v = 1; v < nt; ++v)
      while (r[(tid + v) % nt].take_back(chunk, u0, u1)) run_units(u0, u1);
  }
}

// Calls fn(j, b0, b1) for the blocks [b0, b1) of output j that units [u0, u1) cover, units
// being the outputs' blocks concatenated (blocks(j): output j's).
template <class Blocks, class Fn>
void for_units(int u0, int u1, int n_outputs, const Blocks& blocks, const Fn& fn) {
  for (int j = 0, first = 0; j < n_outputs && first < u1; first += blocks(j++)) {
    const int b0 = max_of(u0 - first, 0), b1 = min_of(u1 - first, blocks(j));
    if (b0 < b1) fn(j, b0, b1);
  }
}

}  // namespace

void matmul_multi(const float* x, int n_tokens, const MatmulOutput* outputs, int n_outputs) {
  int n_blocks = 0;
  std::int64_t rows = 0;
  for (int j = 0; j < n_outputs; ++j) {
    n_blocks += packed_blocks(outputs[j].w.out);
    rows += outputs[j].w.out * (outputs[j].swiglu ? 2 : 1);
  }
  const std::int64_t work = static_cast<std::int64_t>(n_tokens) * outputs[0].w.in * rows;
  const auto blocks = [&](int j) { return packed_blocks(outputs[j].w.out); };
  schedule(n_blocks, work, n_tokens > kMaxTileTokens ? kSuperBlocks : kStealChunk,
           [&](int u0, int u1) {
             for_units(u0, u1, n_outputs, blocks,
                       [&](int j, int b0, int b1) { run_blocks(x, n_tokens, outputs[j], b0, b1); });
           });
}

void matmul_grouped(const MatmulGroup* groups, int n_groups) {
  int n_blocks = 0, most_tokens = 0;
  std::int64_t work = 0;
  for (int j = 0; j < n_groups; ++j) {
    const MatmulOutput& o = groups[j].out;
    n_blocks += packed_blocks(o.w.out);
    work += static_cast<std::int64_t>(groups[j].n_tokens) * o.w.in * o.w.out * (o.swiglu ? 2 : 1);
    most_tokens = max_of(most_tokens, groups[j].n_tokens);
  }
  const auto blocks = [&](int j) { return packed_blocks(groups[j].out.w.out); };
  schedule(n_blocks, work, most_tokens > kMaxTileTokens ? kSuperBlocks : kStealChunk,
           [&](int u0, int u1) {
             for_units(u0, u1, n_groups, blocks, [&](int j, int b0, int b1) {
               run_blocks(groups[j].x, groups[j].n_tokens, groups[j].out, b0, b1);
             });
           });
}

void matmul(const float* x, int n_tokens, const PackedWeights& w, const float* bias, float* y) {
  const MatmulOutput o{w, bias, y};
  SPECRUN_ISA::matmul_multi(x, n_tokens, &o, 1);  // (qualified: ADL also finds cpu::)
}

}  // namespace specrun::cpu::SPECRUN_ISA
