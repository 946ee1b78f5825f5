// quant_matmul: y[t, o] = sum_i x[t, i] * W'[o, i] for a weight kept packed as its checkpoint
// stores it (issue 44; docs/quantization-design.md 3.8), W' its exact dequantized value:
//  - int4 / int8 (compressed-tensors pack-quantized): codes [out, ceil(in / per_word)] int32
//    words, element (o, per_word * j + i) in bits [i * b, i * b + b) of word (o, j), stored as
//    q + 2^(b-1); W' = float(q - z) * s, s = scales[o / block_rows, i / group] in the scale
//    dtype, z = zeros[o * groups + i / group] (int8, or 0 without zero points);
//  - fp8 e4m3 (DeepSeek-V3): codes [out, in] bytes, W' = e4m3(b) * s with s the F32 block scale;
//    e4m3 decoded exactly through the half whose value is e4m3 * 2^-8 (quant.h's rule), times 256.
// One warp per (row, token): lane l sums inputs l, l + 32, ... with fused multiply-adds, then the
// warp adds its lanes in a fixed tree, so a token's result does not depend on the batch. Decode
// and verify sizes; not tuned (not yet run on a GPU; the backend still refuses quantized weights).
#include <cuda_fp16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float scale_value(const void* scales, DType dtype, std::size_t at) {
  if (dtype == DType::kF32) return static_cast<const float*>(scales)[at];
  const unsigned short bits = static_cast<const unsigned short*>(scales)[at];
  if (dtype == DType::kBF16) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  return __half2float(__ushort_as_half(bits));
}

template <QuantKind QK>
__device__ __forceinline__ float dequant(const QuantWeight& w, int in, int row, int col) {
  const std::size_t groups = static_cast<std::size_t>((in + w.format.group - 1) / w.format.group);
  const float s = scale_value(
      w.scales, w.format.scale_dtype,
      static_cast<std::size_t>(row / w.format.block_rows) * groups + col / w.format.group);
  if constexpr (QK == QuantKind::kFp8E4M3) {
    const unsigned b =
        static_cast<const unsigned char*>(w.codes)[static_cast<std::size_t>(row) * in + col];
    const unsigned short h = static_cast<unsigned short>(((b & 0x80u) << 8) | ((b & 0x7Fu) << 7));
    return __half2float(__ushort_as_half(h)) * 256.0f * s;
  } else {
    constexpr int kBits = QK == QuantKind::kInt4 ? 4 : 8;
    constexpr int kPerWord = 32 / kBits;
    const std::size_t words = static_cast<std::size_t>((in + kPerWord - 1) / kPerWord);
    const unsigned word = static_cast<const unsigned*>(
        w.codes)[static_cast<std::size_t>(row) * words + col / kPerWord];
    const int q = static_cast<int>((word >> ((col % kPerWord) * kBits)) & ((1u << kBits) - 1u)) -
                  (1 << (kBits - 1));
    const int z = w.zeros != nullptr
                      ? w.zeros[static_cast<std::size_t>(row) * groups + col / w.format.group]
                      : 0;
    return static_cast<float>(q - z) * s;
  }
}

template <QuantKind QK>
__global__ void __launch_bounds__(kWarpsPerBlock* detail::kWarp)
    quant_matmul_kernel(const float* __restrict__ x, int in, QuantWeight w, float* __restrict__ y) {
  const int lane = threadIdx.x % detail::kWarp;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / detail::kWarp;
  const int t = blockIdx.y;
  if (row >= w.out) return;
  const float* xt = x + static_cast<std::int64_t>(t) * in;
  float acc = 0.0f;
  for (int col = lane; col < in; col += detail::kWarp)
    acc = fmaf(xt[col], dequant<QK>(w, in, row, col), acc);
  acc = detail::warp_sum(acc);
  if (lane == 0) y[static_cast<std::int64_t>(t) * w.out + row] = acc;
}

}  // namespace

void quant_matmul(cudaStream_t stream, const float* x, int n_tokens, int in, const QuantWeight& w,
                  float* y) {
  CUDA_OP_CHECK("quant_matmul",
                x != nullptr && y != nullptr && w.codes != nullptr && w.scales != nullptr &&
                    n_tokens >= 0 && n_tokens <= 65535 && in > 0 && w.out > 0 &&
                    w.format.group > 0 && w.format.block_rows > 0 &&
                    (w.zeros == nullptr || w.format.kind != QuantKind::kFp8E4M3),
                "needs x, y, codes and scales, 0 <= n_tokens <= 65535, a positive shape and "
                "scale group; zero points for int only");
  if (n_tokens == 0) return;
  const dim3 grid((w.out + kWarpsPerBlock - 1) / kWarpsPerBlock, n_tokens);
  const int threads = kWarpsPerBlock * detail::kWarp;
  switch (w.format.kind) {
    case QuantKind::kInt4:
      quant_matmul_kernel<QuantKind::kInt4><<<grid, threads, 0, stream>>>(x, in, w, y);
      break;
    case QuantKind::kInt8:
      quant_matmul_kernel<QuantKind::kInt8><<<grid, threads, 0, stream>>>(x, in, w, y);
      break;
    case QuantKind::kFp8E4M3:
      quant_matmul_kernel<QuantKind::kFp8E4M3><<<grid, threads, 0, stream>>>(x, in, w, y);
      break;
    case QuantKind::kNone:
      CUDA_OP_CHECK("quant_matmul", false, "the weight is not quantized");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
