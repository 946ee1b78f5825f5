// Tensor-core GEMV for decode and verify windows (kGemvTensorCores; ops.h): y [n_tokens, out] =
// x W^T (+ bias) for 1 <= n_tokens <= kMaxTensorCoreTokens, W [out, in] BF16 (in a multiple of
// 32), x float32, on BF16 mma.sync.m16n8k16 with float32 accumulation. (SwiGLU: silu(x gate) *
// x up.) A block computes its rows for up to 64 tokens at once, and again for each further 64.
//
// Operands. An mma multiplies A (16 weight rows x 16 inputs) by B (16 inputs x 8 tokens) into D
// (16 rows x 8 tokens). A dot product may take its inputs in any order as long as A and B take
// them in the same one, so each lane reads 16 contiguous bytes (8 inputs) of a row with one load:
// lane (g, c) (g = lane / 4, c = lane % 4) loads rows g and g + 8 of the tile, inputs 8c..8c+7 of
// a chunk of 32 inputs, and its four lanes cover the chunk, which feeds two mmas: the first takes
// inputs 8c+0..3 as the fragment's k = 2c, 2c+1, 2c+8, 2c+9 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"), the second 8c+4..7. The lane's B fragment is then
// token g's inputs 8c..8c+7, in the same places.
//
// Precision. Each float32 activation is split into three BF16 parts, hi = bf16(x), mid =
// bf16(x - hi), lo = bf16(x - hi - mid); both subtractions are exact and hi + mid + lo == x
// (3 x 8 significand bits; for |x| >= 2^-110, below which the last bits fall under BF16's
// range). A product of a BF16 weight and a BF16 part is exact in float32, so the kernel sums the
// same products a float32 GEMV does. Per chunk, the six mmas (the lo parts of both halves, then
// mid, then hi: small first) accumulate from zero on the tensor cores, whose float32 sums are not
// rounded to nearest (published measurements find truncation); the chunk's sum then joins the
// running float32 sum with a plain add, so the tensor cores' rounding stays within a chunk of 32
// inputs instead of building up over `in`. Results agree with a float32 reference to float32
// rounding, but not bitwise with the CUDA-core kernel's (another order of the sums).
//
// Batch invariance. A block owns kM tiles of 16 rows (SwiGLU: gate's 16 rows and up's same 16)
// and its kWarps warps split `in` by chunks: warp w takes chunks w, w + kWarps, ... in
// increasing order; the warps' sums are added in warp order. An element of D is a column of the
// mma, computed alike whatever the other columns and rows hold, so a token's outputs do not
// depend on how many tokens share the launch, on its column, tile or block of 64, or on how many
// tiles of tokens (kTiles) or rows (kM) a block holds: they are bitwise the same alone and in a
// window.
// Dependent and persistent launches (kGemvDependent, kGemvPersistent) work as in matmul.cu and
// change no bit either.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda::detail {
namespace {

constexpr int kWarps = 4;                           // warps splitting `in` of a block's rows
constexpr int kThreads = kWarp * kWarps;            // 128
constexpr int kTileRows = 16;                       // rows of an mma tile
constexpr int kChunk = kTensorCoreInputMultiple;    // inputs of a warp step: two k16 mmas
constexpr int kLoadsPerChunkRow = kChunk * 2 / 16;  // 16-byte loads covering a chunk of a row
static_assert(kMaxNormTokens <= 8, "a fused norm's pass is one tile of 8 tokens");

// The three BF16 parts of (a, b), each packed as mma takes a pair (a in the low half).
struct Parts {
  std::uint32_t hi, mid, lo;
};

__device__ __forceinline__ std::uint32_t packed(__nv_bfloat162 v) {
  std::uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

__device__ __forceinline__ Parts split(float a, float b) {
  const __nv_bfloat162 hi = __floats2bfloat162_rn(a, b);
  const float2 h = __bfloat1622float2(hi);
  // Exact; an infinite part (x infinite, or within a rounding of FLT_MAX) leaves no remainder,
  // so x = inf gives inf as the CUDA-core kernel does, not inf - inf = NaN.
  const float ra = isfinite(h.x) ? a - h.x : 0.0f, rb = isfinite(h.y) ? b - h.y : 0.0f;
  const __nv_bfloat162 mid = __floats2bfloat162_rn(ra, rb);
  const float2 m = __bfloat1622float2(mid);
  const __nv_bfloat162 lo = __floats2bfloat162_rn(ra - m.x, rb - m.y);  // exact, and fits
  return {packed(hi), packed(mid), packed(lo)};
}

// d += A B on the tensor cores: A's registers (a0..a3 as the PTX fragment), B's (b0, b1).
__device__ __forceinline__ void mma(float (&d)[4], std::uint32_t a0, std::uint32_t a1,
                                    std::uint32_t a2, std::uint32_t a3, std::uint32_t b0,
                                    std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // the launcher never picks this kernel below compute capability 8.0
#endif
}

// One chunk of one row tile and one token tile, added to acc: rows g and g + 8 hold the 16-byte
// loads r0 and r1; the token's inputs are split into p[0..3] (pairs 8c+0,1 / 2,3 / 4,5 / 6,7).
// The six mmas sum from zero, small parts first: the first half's lo, the second half's lo,
// then mid, then hi; the chunk's sum joins acc with a float32 add.
__device__ __forceinline__ void chunk_sum(float (&acc)[4], const uint4& r0, const uint4& r1,
                                          const Parts (&p)[4]) {
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma(d, r0.x, r1.x, r0.y, r1.y, p[0].lo, p[1].lo);
  mma(d, r0.z, r1.z, r0.w, r1.w, p[2].lo, p[3].lo);
  mma(d, r0.x, r1.x, r0.y, r1.y, p[0].mid, p[1].mid);
  mma(d, r0.z, r1.z, r0.w, r1.w, p[2].mid, p[3].mid);
  mma(d, r0.x, r1.x, r0.y, r1.y, p[0].hi, p[1].hi);
  mma(d, r0.z, r1.z, r0.w, r1.w, p[2].hi, p[3].hi);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] += d[i];
}

// kM row tiles of 16 (kSwiglu: kM == 2, gate's rows and up's), kTiles tiles of 8 tokens (the
// smallest that holds n_tokens), kU chunks of loads in flight per warp. None changes a result.
template <bool kSwiglu, int kM, int kTiles, int kU, bool kNorm, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    gemv_mma_kernel(const float* __restrict__ x_in, int n_tokens, int in, GemvPlan plan) {
  static_assert(!kSwiglu || kM == 2, "SwiGLU blocks hold gate's tile and up's");
  static_assert(kThreads == kNormThreads, "the fused norm sums as rmsnorm.cu does");
  constexpr int kGroupRows = kSwiglu ? kTileRows : kM * kTileRows;
  constexpr int kTokens = 8 * kTiles;
  __shared__ float partial[kWarps][kM * kTileRows][kTokens];
  // Static and dynamic (a fused norm's rows) shared memory within what a launch gets without
  // opting in (cudaFuncAttributeMaxDynamicSharedMemorySize, never set here).
  static_assert(sizeof(partial) + kWarp * sizeof(float) + (kNorm ? kMaxNormBytes : 0) <= 48 * 1024,
                "shared memory beyond 48 KiB needs an opt-in");
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int g = lane / 4, c = lane % 4;
  allow_dependents();
  if (plan.dependent) {
    prefetch_group<__nv_bfloat16, kSwiglu, kGroupRows, kThreads>(plan, static_cast<int>(blockIdx.x),
                                                                 in);
    wait_for_prior_grids();
  }
  // x_in, or (plan.norm_w) its rows normalised into shared memory.
  const float* x = normed_input<kNorm>(x_in, n_tokens, in, plan);
  const int n_chunks = in / kChunk;
  for (int grp = static_cast<int>(blockIdx.x); grp < plan.n_groups;
       grp += static_cast<int>(gridDim.x)) {
    if (grp + static_cast<int>(gridDim.x) < plan.n_groups)
      prefetch_group<__nv_bfloat16, kSwiglu, kGroupRows, kThreads>(
          plan, grp + static_cast<int>(gridDim.x), in);
    int row0 = 0;
    const GemvSegment seg = group_segment<kGroupRows>(plan, grp, &row0);
    const int out = seg.out;
    const auto* w = static_cast<const __nv_bfloat16*>(seg.w);
    // This lane's rows: g and g + 8 of each tile (a row past `out` reads the last row; its
    // results are dropped), from its 16 bytes of the first chunk on.
    const uint4* wr[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + (kSwiglu ? 0 : m * kTileRows) + g + 8 * h;
        const std::int64_t first = static_cast<std::int64_t>(r < out ? r : out - 1) * in +
                                   (kSwiglu && m == 1 ? static_cast<std::int64_t>(out) * in : 0);
        wr[m][h] = reinterpret_cast<const uint4*>(w + first) + c;
      }
    // Blocks of up to kTokens tokens, each over every chunk again (the weights are read once
    // per block of tokens).
    for (int t0 = 0; t0 < n_tokens; t0 += kTokens) {
      const int nt = min(kTokens, n_tokens - t0);
      float acc[kM][kTiles][4];
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int t = 0; t < kTiles; ++t)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[m][t][i] = 0.0f;
      for (int c0 = warp; c0 < n_chunks; c0 += kWarps * kU) {
        uint4 raw[kU][kM][2];  // every load of the kU chunks first, then their products
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int ch = c0 + u * kWarps;
          if (ch < n_chunks) {
#pragma unroll
            for (int m = 0; m < kM; ++m)
#pragma unroll
              for (int h = 0; h < 2; ++h) raw[u][m][h] = __ldg(wr[m][h] + ch * kLoadsPerChunkRow);
          }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int ch = c0 + u * kWarps;
          if (ch < n_chunks) {
#pragma unroll
            for (int t = 0; t < kTiles; ++t) {
              const int token = t0 + t * 8 + g;
              float4 xa = make_float4(0.0f, 0.0f, 0.0f, 0.0f), xb = xa;
              if (token < n_tokens) {
                const float4* xp = reinterpret_cast<const float4*>(
                    x + static_cast<std::int64_t>(token) * in + ch * kChunk + 8 * c);
                xa = xp[0];
                xb = xp[1];
              }
              const Parts p[4] = {split(xa.x, xa.y), split(xa.z, xa.w), split(xb.x, xb.y),
                                  split(xb.z, xb.w)};
#pragma unroll
              for (int m = 0; m < kM; ++m) chunk_sum(acc[m][t], raw[u][m][0], raw[u][m][1], p);
            }
          }
        }
      }
      // D's layout: lane (g, c) holds rows g, g + 8 and tokens 2c, 2c + 1 of each tile.
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          const int r = m * kTileRows + g, tok = t * 8 + 2 * c;
          partial[warp][r][tok] = acc[m][t][0];
          partial[warp][r][tok + 1] = acc[m][t][1];
          partial[warp][r + 8][tok] = acc[m][t][2];
          partial[warp][r + 8][tok + 1] = acc[m][t][3];
        }
      __syncthreads();
      // Consecutive threads write consecutive rows of a token.
      for (int e = static_cast<int>(threadIdx.x); e < kGroupRows * nt; e += kThreads) {
        const int r = e % kGroupRows, t = e / kGroupRows, row = row0 + r;
        if (row < out) {
          float v = partial[0][r][t];
#pragma unroll
          for (int p = 1; p < kWarps; ++p) v += partial[p][r][t];
          if constexpr (kSwiglu) {
            float u = partial[0][kTileRows + r][t];
#pragma unroll
            for (int p = 1; p < kWarps; ++p) u += partial[p][kTileRows + r][t];
            v = v / (1.0f + expf(-v)) * u;  // silu_mul's formula
          } else {
            if (seg.bias != nullptr) v += seg.bias[row];
          }
          store_output<kAccumulate>(seg, static_cast<std::int64_t>(t0 + t) * out + row, v);
        }
      }
      __syncthreads();
    }
  }
}

// Whether the current device has BF16 mma.sync (compute capability 8.0 on), asked once per
// device.
bool has_bf16_mma() {
  static std::unordered_map<int, bool> known;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return known[device] = major >= 8;
}

template <bool kSwiglu, int kTiles, bool kNorm, bool kAccumulate>
void launch(cudaStream_t stream, const float* x, int n_tokens, int in, GemvPlan plan, int flags) {
  // Two row tiles per block once there are several token tiles (each split of x then serves
  // 32 rows); SwiGLU blocks always hold two (gate's and up's). kU keeps 32 registers of loads.
  constexpr int kM = kSwiglu || kTiles > 1 ? 2 : 1;
  constexpr int kU = 4 / kM;
  const auto kernel = gemv_mma_kernel<kSwiglu, kM, kTiles, kU, kNorm, kAccumulate>;
  const int groups = number_groups(plan, kSwiglu ? kTileRows : kM * kTileRows);
  plan.dependent = (flags & kGemvDependent) != 0;
  const std::size_t smem = norm_smem_bytes(plan, n_tokens, in);
  const int grid = (flags & kGemvPersistent) != 0
                       ? std::min(groups, resident_blocks(kernel, kThreads, smem))
                       : groups;
  launch_dependent(plan.dependent, kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem,
                   stream, x, n_tokens, in, plan);
}

// The smallest number of 8-token tiles that holds the pass (longer passes go in blocks of 64).
template <bool kSwiglu, bool kAccumulate>
void launch_sized(cudaStream_t stream, const float* x, int n_tokens, int in, const GemvPlan& plan,
                  int flags) {
  if (n_tokens <= 8)
    launch<kSwiglu, 1, false, kAccumulate>(stream, x, n_tokens, in, plan, flags);
  else if (n_tokens <= 16)
    launch<kSwiglu, 2, false, kAccumulate>(stream, x, n_tokens, in, plan, flags);
  else if (n_tokens <= 32)
    launch<kSwiglu, 4, false, kAccumulate>(stream, x, n_tokens, in, plan, flags);
  else
    launch<kSwiglu, 8, false, kAccumulate>(stream, x, n_tokens, in, plan, flags);
}

template <bool kSwiglu>
void launch_tiles(cudaStream_t stream, const float* x, int n_tokens, int in, const GemvPlan& plan,
                  int flags) {
  if (plan.norm_w != nullptr) {  // a fused norm: at most kMaxNormTokens (8) tokens, one tile
    launch<kSwiglu, 1, true, false>(stream, x, n_tokens, in, plan, flags);
    return;
  }
  if constexpr (!kSwiglu) {
    if (plan.accumulate) {
      launch_sized<false, true>(stream, x, n_tokens, in, plan, flags);
      return;
    }
  }
  launch_sized<kSwiglu, false>(stream, x, n_tokens, in, plan, flags);
}

}  // namespace

bool launch_gemv_mma(cudaStream_t stream, const float* x, int n_tokens, int in, GemvPlan plan,
                     bool swiglu, int flags) {
  bool fits = in % kChunk == 0 && input_aligned(plan, x);
  for (int s = 0; s < plan.n_seg; ++s)
    fits = fits && reinterpret_cast<std::uintptr_t>(plan.seg[s].w) % 16 == 0;
  if (!fits || !has_bf16_mma()) return false;
  if (swiglu)
    launch_tiles<true>(stream, x, n_tokens, in, plan, flags);
  else
    launch_tiles<false>(stream, x, n_tokens, in, plan, flags);
  return true;
}

}  // namespace specrun::cuda::detail

namespace specrun::cuda {

int gemv_tokens(int flags, DType w_dtype, int in) {
  const bool tensor_cores = (flags & kGemvTensorCores) != 0 && w_dtype == DType::kBF16 &&
                            in % detail::kChunk == 0 && detail::has_bf16_mma();
  return tensor_cores ? kMaxTensorCoreTokens : kMaxGemvTokens;
}

}  // namespace specrun::cuda
