// rope: rotary position embedding, Hugging Face rotate_half convention, in place on float32.
// Layout: token t, head h starts at x + t * row_stride + h * head_dim; inv_freq [head_dim/2]
// float32 and positions [n_tokens] int32 in device memory. For j < head_dim/2, with
// a = positions[t] * inv_freq[j] (float32) and c, s = cos(a), sin(a) (full-precision sincosf):
//   x'[j] = x[j] c - x[j + half] s,   x'[j + half] = x[j + half] c + x[j] s.
// One thread per (token, head, j) pair.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

__global__ void rope_kernel(float* x, int n_heads, int half, std::int64_t row_stride,
                            const float* __restrict__ inv_freq,
                            const std::int32_t* __restrict__ positions, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(i % half);
    const std::size_t th = i / half;
    const int h = static_cast<int>(th % n_heads);
    const std::size_t t = th / n_heads;
    float* xh =
        x + static_cast<std::int64_t>(t) * row_stride + static_cast<std::int64_t>(h) * 2 * half;
    const float a = static_cast<float>(positions[t]) * inv_freq[j];
    float s, c;
    sincosf(a, &s, &c);
    const float x0 = xh[j], x1 = xh[j + half];
    xh[j] = x0 * c - x1 * s;
    xh[j + half] = x1 * c + x0 * s;
  }
}

}  // namespace

void rope(cudaStream_t stream, float* x, int n_tokens, int n_heads, int head_dim,
          std::int64_t row_stride, const float* inv_freq, const std::int32_t* positions) {
  CUDA_OP_CHECK("rope", x != nullptr && inv_freq != nullptr && positions != nullptr,
                "needs x, inv_freq and positions");
  CUDA_OP_CHECK("rope", n_tokens >= 1 && n_heads >= 1 && head_dim >= 2 && head_dim % 2 == 0,
                "bad sizes: tokens " << n_tokens << ", heads " << n_heads << ", head_dim "
                                     << head_dim << " (must be even)");
  CUDA_OP_CHECK("rope", row_stride >= static_cast<std::int64_t>(n_heads) * head_dim,
                "row_stride " << row_stride << " is shorter than heads x head_dim");
  const std::size_t n = static_cast<std::size_t>(n_tokens) * n_heads * (head_dim / 2);
  rope_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(x, n_heads, head_dim / 2, row_stride,
                                                            inv_freq, positions, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
