// matmul: linear layer y[t, o] = sum_i x[t, i] * W[o, i] (+ bias[o]), float32 accumulation.
// Layout: x [n_tokens, in] float32, W [out, in] row-major in F32/BF16/F16 (nn.Linear weight as
// stored), y [n_tokens, out] float32.
//
// Small batches (n_tokens <= gemv_tokens(), ops.h: decode and verify windows) run a batch-invariant
// GEMV-style kernel. A block of kWarpsPerRow warps owns kRowsPerWarp output rows; the warps
// split `in` by a fixed interleave; each lane walks its elements in increasing order with fmaf
// into one accumulator per (row, token), warps reduce with a butterfly and the partial sums are
// added in warp order. None of this depends on n_tokens or on the token's index in the batch,
// so a token's outputs are bit-identical whether it is scored alone or in a window. Weight rows
// are read with 16-byte loads (when `in` and the pointers allow) once per tile of up to 8
// tokens; each activation load serves kRowsPerWarp rows.
//
// Launched as a programmatic dependent launch (device_util.cuh; the backend does so in step
// graphs on sm_90), a block fetches its weight rows into L2 and only then waits for the kernel
// before it (the norm or the attention that writes x), so weight streaming overlaps that kernel's
// end and the launch gap; nothing in the arithmetic changes. Launched persistent, as many blocks
// as fit on the device walk the groups of rows with a grid stride (the next group's rows asked
// of L2 first) instead of one block per group in waves; again the same arithmetic.
//
// With kGemvTensorCores, BF16 projections go to the tensor-core kernel instead (gemv_mma.cu;
// gemv.cuh holds what the two share: the launch plan, row groups, prefetch, resident blocks).
//
// Larger batches (prefill) go to cublasGemmEx: W^T (op T on the column-major view of the
// row-major W) times x, with x first rounded to W's dtype, C in float32 and CUBLAS_COMPUTE_32F.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

using detail::GemvPlan;
using detail::GemvSegment;
using detail::kMaxSegments;
using detail::kWarp;
constexpr int kWarpsPerRow = 4;  // warps splitting one row's `in` (fixed interleave)
constexpr int kRowsPerWarp = 4;  // rows sharing each activation load (register reuse of x)
constexpr int kThreads = kWarp * kWarpsPerRow;  // 128: a block owns kRowsPerWarp rows
constexpr int kMaxTokenTile = 8;                // tokens sharing each weight load
static_assert(kMaxNormTokens <= kMaxTokenTile, "a fused norm's pass is one token tile");

// For every row r of the block's kRowsPerWarp rows and token t of a tile, lane l of warp p
// accumulates W[r, i] * x[t, i] over its elements i in increasing order with fmaf (one weight
// element per scalar step, or 16 bytes = kV elements per vector step), then the warp sums
// (butterfly) and the kWarpsPerRow partial sums are added in warp order. kSwiglu: the segment's
// W is a gate/up pair ([2 * out, in], up's rows after gate's); the block also computes the same
// rows of up, in the same order, and writes silu(gate) * up (silu_mul's formula) instead of the
// products, bitwise what two GEMVs and silu_mul give.
// kTokenTile (1, 4 or 8, the smallest >= n_tokens up to 8) sizes the accumulators: a decode
// step of one token keeps few registers. It changes no result: every (row, token) is reduced in
// the same order whatever the tile.
// The rows [row0, row0 + kRowsPerWarp) of one segment (and, kSwiglu, up's same rows), every token:
// the loop over token tiles described above. partial: the block's shared reduction buffer.
template <typename W, bool kVectorized, bool kSwiglu, int kTokenTile, bool kAccumulate,
          int kR = kSwiglu ? 2 * kRowsPerWarp : kRowsPerWarp>
__device__ __forceinline__ void gemv_rows(const float* __restrict__ x, int n_tokens, int in,
                                          const GemvSegment& seg, int row0,
                                          const W* const (&wr)[kR], int lane, int part,
                                          float (&partial)[kR][kWarpsPerRow][kTokenTile]) {
  const int out = seg.out;
  for (int t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
    const int nt = min(kTokenTile, n_tokens - t0);
    const float* xt = x + static_cast<std::int64_t>(t0) * in;
    float acc[kR][kTokenTile];
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) acc[r][t] = 0.0f;
    if constexpr (kVectorized) {
      constexpr int kV = 16 / sizeof(W);
      constexpr int kStep = kWarpsPerRow * kWarp * kV;
      // Software pipelined: the next step's weights are loaded before this step's products, so
      // a thread keeps two steps of loads in flight (the order of the products is unchanged).
      int i = (part * kWarp + lane) * kV;
      uint4 raw[kR];
      if (i < in) {
#pragma unroll
        for (int r = 0; r < kR; ++r) raw[r] = __ldg(reinterpret_cast<const uint4*>(wr[r] + i));
      }
      for (; i < in; i += kStep) {
        const bool more = i + kStep < in;
        uint4 next[kR];
        if (more) {
#pragma unroll
          for (int r = 0; r < kR; ++r)
            next[r] = __ldg(reinterpret_cast<const uint4*>(wr[r] + i + kStep));
        }
        float wf[kR][kV];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          W we[kV];
          memcpy(we, &raw[r], sizeof(uint4));
#pragma unroll
          for (int e = 0; e < kV; ++e) wf[r][e] = detail::widen(we[e]);
        }
#pragma unroll
        for (int t = 0; t < kTokenTile; ++t) {
          if (t < nt) {
            const float4* xv =
                reinterpret_cast<const float4*>(xt + static_cast<std::int64_t>(t) * in + i);
#pragma unroll
            for (int q = 0; q < kV / 4; ++q) {
              const float4 xx = xv[q];
#pragma unroll
              for (int r = 0; r < kR; ++r) {
                acc[r][t] = fmaf(wf[r][4 * q + 0], xx.x, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 1], xx.y, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 2], xx.z, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 3], xx.w, acc[r][t]);
              }
            }
          }
        }
        if (more) {
#pragma unroll
          for (int r = 0; r < kR; ++r) raw[r] = next[r];
        }
      }
    } else {
      for (int i = part * kWarp + lane; i < in; i += kWarpsPerRow * kWarp) {
        float wf[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) wf[r] = detail::widen(wr[r][i]);
#pragma unroll
        for (int t = 0; t < kTokenTile; ++t) {
          if (t < nt) {
            const float xx = xt[static_cast<std::int64_t>(t) * in + i];
#pragma unroll
            for (int r = 0; r < kR; ++r) acc[r][t] = fmaf(wf[r], xx, acc[r][t]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) {
        if (t < nt) {
          const float sum = detail::warp_sum(acc[r][t]);
          if (lane == 0) partial[r][part][t] = sum;
        }
      }
    __syncthreads();
    if (threadIdx.x < kRowsPerWarp * kTokenTile) {
      const int r = threadIdx.x / kTokenTile, t = threadIdx.x % kTokenTile;
      const int row = row0 + r;
      if (t < nt && row < out) {
        float v = partial[r][0][t];
#pragma unroll
        for (int p = 1; p < kWarpsPerRow; ++p) v += partial[r][p][t];
        if constexpr (kSwiglu) {
          float u = partial[kRowsPerWarp + r][0][t];
#pragma unroll
          for (int p = 1; p < kWarpsPerRow; ++p) u += partial[kRowsPerWarp + r][p][t];
          v = v / (1.0f + expf(-v)) * u;
        } else {
          if (seg.bias != nullptr) v += seg.bias[row];
        }
        detail::store_output<kAccumulate>(seg, static_cast<std::int64_t>(t0 + t) * out + row, v);
      }
    }
    __syncthreads();
  }
}

template <typename W, bool kVectorized, bool kSwiglu, int kTokenTile, bool kNorm, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const float* __restrict__ x, int n_tokens, int in, GemvPlan plan) {
  constexpr int kR = kSwiglu ? 2 * kRowsPerWarp : kRowsPerWarp;
  static_assert(kThreads == detail::kNormThreads, "the fused norm sums as rmsnorm.cu does");
  __shared__ float partial[kR][kWarpsPerRow][kTokenTile];
  // Within the 48 KiB a launch gets without opting in (as gemv_mma.cu).
  static_assert(sizeof(partial) + kWarp * sizeof(float) + (kNorm ? kMaxNormBytes : 0) <= 48 * 1024,
                "shared memory beyond 48 KiB needs an opt-in");
  const int lane = threadIdx.x % kWarp;
  const int part = threadIdx.x / kWarp;
  // The next dependent launch may start once every block of this one has (device_util.cuh).
  detail::allow_dependents();
  if (plan.dependent) {
    detail::prefetch_group<W, kSwiglu, kRowsPerWarp, kThreads>(plan, static_cast<int>(blockIdx.x),
                                                               in);
    detail::wait_for_prior_grids();
  }
  const float* xin = detail::normed_input<kNorm>(x, n_tokens, in, plan);
  // Row group g: a plain launch has one block per group; a persistent one (gridDim.x < the
  // groups: as many blocks as fit on the device at once) walks them with a grid stride, asking
  // L2 for its next group's rows before it computes this one, so that no block waits for DRAM
  // at its start and no wave of blocks is left half-full. Each row is computed the same way.
  for (int g = static_cast<int>(blockIdx.x); g < plan.n_groups; g += static_cast<int>(gridDim.x)) {
    if (g + static_cast<int>(gridDim.x) < plan.n_groups)
      detail::prefetch_group<W, kSwiglu, kRowsPerWarp, kThreads>(
          plan, g + static_cast<int>(gridDim.x), in);
    int row0 = 0;
    const GemvSegment seg = detail::group_segment<kRowsPerWarp>(plan, g, &row0);
    const W* w = static_cast<const W*>(seg.w);
    const int out = seg.out;
    const W* wr[kR];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      wr[r] = w + static_cast<std::int64_t>(row0 + r < out ? row0 + r : row0) * in;
      if constexpr (kSwiglu) wr[kRowsPerWarp + r] = wr[r] + static_cast<std::int64_t>(out) * in;
    }
    gemv_rows<W, kVectorized, kSwiglu, kTokenTile, kAccumulate>(xin, n_tokens, in, seg, row0, wr,
                                                                lane, part, partial);
  }
}

template <typename W, bool kSwiglu>
void launch_gemv(cudaStream_t stream, const float* x, int n_tokens, int in, GemvPlan plan,
                 int flags) {
  constexpr int kV = 16 / sizeof(W);
  bool aligned = in % kV == 0 && detail::input_aligned(plan, x);
  for (int s = 0; s < plan.n_seg; ++s)
    aligned = aligned && reinterpret_cast<std::uintptr_t>(plan.seg[s].w) % 16 == 0;
  const int blocks = detail::number_groups(plan, kRowsPerWarp);
  plan.dependent = (flags & kGemvDependent) != 0;
  const std::size_t smem = detail::norm_smem_bytes(plan, n_tokens, in);
  auto go = [&](auto kernel) {
    const int grid = (flags & kGemvPersistent) != 0
                         ? std::min(blocks, detail::resident_blocks(kernel, kThreads, smem))
                         : blocks;
    detail::launch_dependent(plan.dependent, kernel, dim3(static_cast<unsigned>(grid)),
                             dim3(kThreads), smem, stream, x, n_tokens, in, plan);
  };
  // The kernel for the tile size and the fused norm or residual add: unaligned rows take
  // scalar loads and one tile size.
  auto pick = [&](auto norm, auto accumulate) {
    constexpr bool kN = decltype(norm)::value, kA = decltype(accumulate)::value;
    if (!aligned)
      go(gemv_kernel<W, false, kSwiglu, kMaxTokenTile, kN, kA>);
    else if (n_tokens == 1)
      go(gemv_kernel<W, true, kSwiglu, 1, kN, kA>);
    else if (n_tokens <= 4)
      go(gemv_kernel<W, true, kSwiglu, 4, kN, kA>);
    else
      go(gemv_kernel<W, true, kSwiglu, kMaxTokenTile, kN, kA>);
  };
  if (plan.norm_w != nullptr) {  // at most kMaxNormTokens (8) tokens
    pick(std::true_type{}, std::false_type{});
    return;
  }
  if constexpr (!kSwiglu) {
    if (plan.accumulate) {
      pick(std::false_type{}, std::true_type{});
      return;
    }
  }
  pick(std::false_type{}, std::false_type{});
}

template <bool kSwiglu>
void launch_gemv_dtype(cudaStream_t stream, const float* x, int n_tokens, int in, DType w_dtype,
                       const GemvPlan& plan, int flags) {
  if (w_dtype == DType::kBF16 && (flags & kGemvTensorCores) != 0 &&
      detail::launch_gemv_mma(stream, x, n_tokens, in, plan, kSwiglu, flags))
    return;
  switch (w_dtype) {
    case DType::kBF16:
      launch_gemv<__nv_bfloat16, kSwiglu>(stream, x, n_tokens, in, plan, flags);
      break;
    case DType::kF16:
      launch_gemv<__half, kSwiglu>(stream, x, n_tokens, in, plan, flags);
      break;
    case DType::kF32:
      launch_gemv<float, kSwiglu>(stream, x, n_tokens, in, plan, flags);
      break;
  }
}

template <typename T>
__global__ void round_kernel(const float* __restrict__ x, std::size_t n, T* __restrict__ out) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
      out[i] = __float2bfloat16_rn(x[i]);
    else
      out[i] = __float2half_rn(x[i]);
  }
}

__global__ void bias_rows_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                 std::size_t n, int dim) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % dim];
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace

std::size_t matmul_scratch_bytes(int n_tokens, int in, DType w_dtype) {
  if (n_tokens <= kMaxGemvTokens || w_dtype == DType::kF32) return 0;
  return static_cast<std::size_t>(n_tokens) * static_cast<std::size_t>(in) * dtype_size(w_dtype);
}

void matmul(cublasHandle_t cublas, cudaStream_t stream, const float* x, int n_tokens, int in,
            const void* w, DType w_dtype, int out, const float* bias, float* y, void* scratch,
            std::size_t scratch_bytes, int flags) {
  CUDA_OP_CHECK(
      "matmul", n_tokens >= 1 && in >= 1 && out >= 1,
      "needs positive sizes, got n_tokens " << n_tokens << ", in " << in << ", out " << out);
  CUDA_OP_CHECK("matmul", x != nullptr && w != nullptr && y != nullptr && x != y,
                "needs x, w and y (y must not alias x)");
  if (n_tokens <= gemv_tokens(flags, w_dtype, in)) {
    GemvPlan plan{};
    plan.seg[0] = GemvSegment{w, bias, y, out, 0};
    plan.n_seg = 1;
    launch_gemv_dtype<false>(stream, x, n_tokens, in, w_dtype, plan, flags);
    return;
  }

  CUDA_OP_CHECK("matmul", cublas != nullptr, "the prefill path needs a cuBLAS handle");
  cudaStream_t bound = nullptr;
  CUBLAS_CHECK(cublasGetStream(cublas, &bound));
  CUDA_OP_CHECK("matmul", bound == stream,
                "the cuBLAS handle is bound to another stream than the one given");
  const std::size_t need = matmul_scratch_bytes(n_tokens, in, w_dtype);
  CUDA_OP_CHECK("matmul", scratch_bytes >= need && (need == 0 || scratch != nullptr),
                "scratch of " << scratch_bytes << " bytes, " << need << " needed for " << n_tokens
                              << " tokens x " << in << " inputs");
  const void* b = x;
  if (w_dtype != DType::kF32) {
    const std::size_t n = static_cast<std::size_t>(n_tokens) * in;
    if (w_dtype == DType::kBF16)
      round_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(
          x, n, static_cast<__nv_bfloat16*>(scratch));
    else
      round_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(x, n,
                                                                 static_cast<__half*>(scratch));
    CUDA_CHECK_LAUNCH();
    b = scratch;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = cuda_type(w_dtype);
  // Column-major view: C[out, n] = op_T(A[in, out]) * B[in, n], lda = ldb = in, ldc = out.
  CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n_tokens, in, &alpha, w, t, in,
                            b, t, in, &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
  if (bias != nullptr) {
    const std::size_t n = static_cast<std::size_t>(n_tokens) * out;
    bias_rows_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(y, bias, n, out);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace specrun::cuda

namespace specrun::cuda {

namespace {

// The input's norm of a GEMV launch (norm_w == nullptr: none), checked against what the fused
// norm supports.
void set_norm(const char* op, detail::GemvPlan& plan, int n_tokens, int in, int flags,
              const void* norm_w, DType norm_dtype, float norm_eps) {
  if (norm_w == nullptr) return;
  SPEC_CHECK(gemv_norm_fits(n_tokens, in, flags),
             "cuda::" << op << ": the input's RMSNorm cannot be fused for " << n_tokens
                      << " tokens x " << in << " inputs with flags " << flags
                      << " (gemv_norm_fits)");
  plan.norm_w = norm_w;
  plan.norm_dtype = norm_dtype;
  plan.norm_eps = norm_eps;
}

}  // namespace

bool gemv_norm_fits(int n_tokens, int in, int flags) {
  return (flags & kGemvPersistent) != 0 && n_tokens >= 1 && n_tokens <= kMaxNormTokens && in >= 1 &&
         static_cast<std::size_t>(n_tokens) * static_cast<std::size_t>(in) * sizeof(float) <=
             kMaxNormBytes;
}

void matmul_multi(cudaStream_t stream, const float* x, int n_tokens, int in, DType w_dtype,
                  int n_outs, const void* w0, int out0, const float* bias0, float* y0,
                  const void* w1, int out1, const float* bias1, float* y1, const void* w2, int out2,
                  const float* bias2, float* y2, int flags, const void* norm_w, DType norm_dtype,
                  float norm_eps) {
  const int most = gemv_tokens(flags, w_dtype, in);
  CUDA_OP_CHECK("matmul_multi", n_tokens >= 1 && n_tokens <= most && in >= 1,
                "needs 1.." << most << " tokens (got " << n_tokens << ") and in >= 1");
  CUDA_OP_CHECK("matmul_multi", n_outs >= 1 && n_outs <= kMaxSegments,
                "1.." << kMaxSegments << " outputs, got " << n_outs);
  const void* ws[kMaxSegments] = {w0, w1, w2};
  const int outs[kMaxSegments] = {out0, out1, out2};
  const float* biases[kMaxSegments] = {bias0, bias1, bias2};
  float* ys[kMaxSegments] = {y0, y1, y2};
  GemvPlan plan{};
  plan.n_seg = n_outs;
  for (int s = 0; s < n_outs; ++s) {
    CUDA_OP_CHECK(
        "matmul_multi",
        x != nullptr && ws[s] != nullptr && ys[s] != nullptr && ys[s] != x && outs[s] >= 1,
        "output " << s << " needs a weight, an output not aliasing x and out >= 1");
    plan.seg[s] = GemvSegment{ws[s], biases[s], ys[s], outs[s], 0};
  }
  set_norm("matmul_multi", plan, n_tokens, in, flags, norm_w, norm_dtype, norm_eps);
  launch_gemv_dtype<false>(stream, x, n_tokens, in, w_dtype, plan, flags);
}

void matmul_accumulate(cudaStream_t stream, const float* x, int n_tokens, int in, const void* w,
                       DType w_dtype, int out, const float* bias, float* y, int flags) {
  const int most = gemv_tokens(flags, w_dtype, in);
  CUDA_OP_CHECK("matmul_accumulate", n_tokens >= 1 && n_tokens <= most && in >= 1 && out >= 1,
                "needs 1.." << most << " tokens (got " << n_tokens << "), in >= 1 and out >= 1");
  CUDA_OP_CHECK("matmul_accumulate", x != nullptr && w != nullptr && y != nullptr && y != x,
                "needs x, w and an output y not aliasing x");
  GemvPlan plan{};
  plan.seg[0] = GemvSegment{w, bias, y, out, 0};
  plan.n_seg = 1;
  plan.accumulate = true;
  launch_gemv_dtype<false>(stream, x, n_tokens, in, w_dtype, plan, flags);
}

void swiglu_gemv(cudaStream_t stream, const float* x, int n_tokens, int in, const void* gate_up,
                 DType w_dtype, int rows, float* y, int flags, const void* norm_w, DType norm_dtype,
                 float norm_eps) {
  CUDA_OP_CHECK(
      "swiglu_gemv",
      n_tokens >= 1 && n_tokens <= gemv_tokens(flags, w_dtype, in) && in >= 1 && rows >= 1,
      "needs 1.." << gemv_tokens(flags, w_dtype, in) << " tokens (got " << n_tokens
                  << "), in >= 1, rows >= 1");
  CUDA_OP_CHECK("swiglu_gemv", x != nullptr && gate_up != nullptr && y != nullptr && y != x,
                "needs x, the gate/up pair and an output not aliasing x");
  GemvPlan plan{};
  plan.seg[0] = GemvSegment{gate_up, nullptr, y, rows, 0};
  plan.n_seg = 1;
  set_norm("swiglu_gemv", plan, n_tokens, in, flags, norm_w, norm_dtype, norm_eps);
  launch_gemv_dtype<true>(stream, x, n_tokens, in, w_dtype, plan, flags);
}

}  // namespace specrun::cuda
