// matmul: linear layer y[t, o] = sum_i x[t, i] * W[o, i] (+ bias[o]), float32 accumulation.
// Layout: x [n_tokens, in] float32, W [out, in] row-major in F32/BF16/F16 (nn.Linear weight as
// stored), y [n_tokens, out] float32.
//
// Small batches (n_tokens <= kMaxGemvTokens: decode and verify windows) run a batch-invariant
// GEMV-style kernel. A block of kWarpsPerRow warps owns kRowsPerWarp output rows; the warps
// split `in` by a fixed interleave; each lane walks its elements in increasing order with fmaf
// into one accumulator per (row, token), warps reduce with a butterfly and the partial sums are
// added in warp order. None of this depends on n_tokens or on the token's index in the batch,
// so a token's outputs are bit-identical whether it is scored alone or in a window. Weight rows
// are read with 16-byte loads (when `in` and the pointers allow) once per tile of kTokenTile
// tokens; each activation load serves kRowsPerWarp rows.
//
// Larger batches (prefill) go to cublasGemmEx: W^T (op T on the column-major view of the
// row-major W) times x, with x first rounded to W's dtype, C in float32 and CUBLAS_COMPUTE_32F.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

using detail::kWarp;
constexpr int kWarpsPerRow = 4;  // warps splitting one row's `in` (fixed interleave)
constexpr int kRowsPerWarp = 4;  // rows sharing each activation load (register reuse of x)
constexpr int kThreads = kWarp * kWarpsPerRow;  // 128: a block owns kRowsPerWarp rows
constexpr int kTokenTile = 8;

// For every row r of the block's kRowsPerWarp rows and token t of a tile, lane l of warp p
// accumulates W[r, i] * x[t, i] over its elements i in increasing order with fmaf (one weight
// element per scalar step, or 16 bytes = kV elements per vector step), then the warp sums
// (butterfly) and the kWarpsPerRow partial sums are added in warp order.
template <typename W, bool kVectorized>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const float* __restrict__ x, int n_tokens, int in, const W* __restrict__ w, int out,
                const float* __restrict__ bias, float* __restrict__ y) {
  __shared__ float partial[kRowsPerWarp][kWarpsPerRow][kTokenTile];
  const int lane = threadIdx.x % kWarp;
  const int part = threadIdx.x / kWarp;
  const int row0 = blockIdx.x * kRowsPerWarp;
  const W* wr[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    wr[r] = w + static_cast<std::int64_t>(row0 + r < out ? row0 + r : row0) * in;

  for (int t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
    const int nt = min(kTokenTile, n_tokens - t0);
    const float* xt = x + static_cast<std::int64_t>(t0) * in;
    float acc[kRowsPerWarp][kTokenTile];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) acc[r][t] = 0.0f;
    if constexpr (kVectorized) {
      constexpr int kV = 16 / sizeof(W);
      for (int i = (part * kWarp + lane) * kV; i < in; i += kWarpsPerRow * kWarp * kV) {
        float wf[kRowsPerWarp][kV];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const uint4 raw = __ldg(reinterpret_cast<const uint4*>(wr[r] + i));
          W we[kV];
          memcpy(we, &raw, sizeof(raw));
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
              for (int r = 0; r < kRowsPerWarp; ++r) {
                acc[r][t] = fmaf(wf[r][4 * q + 0], xx.x, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 1], xx.y, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 2], xx.z, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 3], xx.w, acc[r][t]);
              }
            }
          }
        }
      }
    } else {
      for (int i = part * kWarp + lane; i < in; i += kWarpsPerRow * kWarp) {
        float wf[kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) wf[r] = detail::widen(wr[r][i]);
#pragma unroll
        for (int t = 0; t < kTokenTile; ++t) {
          if (t < nt) {
            const float xx = xt[static_cast<std::int64_t>(t) * in + i];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) acc[r][t] = fmaf(wf[r], xx, acc[r][t]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) {
        if (t < nt) {
          const float s = detail::warp_sum(acc[r][t]);
          if (lane == 0) partial[r][part][t] = s;
        }
      }
    __syncthreads();
    if (threadIdx.x < kRowsPerWarp * kTokenTile) {
      const int r = threadIdx.x / kTokenTile, t = threadIdx.x % kTokenTile;
      const int row = row0 + r;
      if (t < nt && row < out) {
        float s = partial[r][0][t];
#pragma unroll
        for (int p = 1; p < kWarpsPerRow; ++p) s += partial[r][p][t];
        if (bias != nullptr) s += bias[row];
        y[static_cast<std::int64_t>(t0 + t) * out + row] = s;
      }
    }
    __syncthreads();
  }
}

template <typename W>
void launch_gemv(cudaStream_t stream, const float* x, int n_tokens, int in, const void* w, int out,
                 const float* bias, float* y) {
  constexpr int kV = 16 / sizeof(W);
  const bool aligned = in % kV == 0 && reinterpret_cast<std::uintptr_t>(w) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>((out + kRowsPerWarp - 1) / kRowsPerWarp);
  const W* wt = static_cast<const W*>(w);
  if (aligned)
    gemv_kernel<W, true><<<blocks, kThreads, 0, stream>>>(x, n_tokens, in, wt, out, bias, y);
  else
    gemv_kernel<W, false><<<blocks, kThreads, 0, stream>>>(x, n_tokens, in, wt, out, bias, y);
  CUDA_CHECK_LAUNCH();
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
            std::size_t scratch_bytes) {
  CUDA_OP_CHECK(
      "matmul", n_tokens >= 1 && in >= 1 && out >= 1,
      "needs positive sizes, got n_tokens " << n_tokens << ", in " << in << ", out " << out);
  CUDA_OP_CHECK("matmul", x != nullptr && w != nullptr && y != nullptr && x != y,
                "needs x, w and y (y must not alias x)");
  if (n_tokens <= kMaxGemvTokens) {
    switch (w_dtype) {
      case DType::kBF16:
        launch_gemv<__nv_bfloat16>(stream, x, n_tokens, in, w, out, bias, y);
        break;
      case DType::kF16:
        launch_gemv<__half>(stream, x, n_tokens, in, w, out, bias, y);
        break;
      case DType::kF32:
        launch_gemv<float>(stream, x, n_tokens, in, w, out, bias, y);
        break;
    }
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
