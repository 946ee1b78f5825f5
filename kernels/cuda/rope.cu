// Rotary position embedding, Hugging Face rotate_half convention, in place on float32.
// Layout: token t, head h starts at x + t * row_stride + h * head_dim. For j < half = head_dim/2,
// with a = positions[t] * inv_freq[j] (float32) and c, s = cos(a), sin(a) (full-precision
// sincosf):  x'[j] = x[j] c - x[j + half] s,   x'[j + half] = x[j + half] c + x[j] s
// (rope.cuh: rounded as written, the same bits as the fused ops that rotate on the fly).
//   rope:       c, s computed from inv_freq [half] and positions [n_tokens] (device memory);
//   rope_table: cos_sin[t * head_dim + j] = c, cos_sin[t * head_dim + half + j] = s;
//   rope_apply: the rotation with such a table (the CPU's rope_table / rope_apply).
// One thread per (token, head, j) for the rotations, per (token, j) for the table.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope.cuh"

namespace specrun::cuda {
namespace {

// The angle's cos and sin of token t, pair j: from positions and frequencies...
struct FromPositions {
  const float* __restrict__ inv_freq;
  const std::int32_t* __restrict__ positions;
  __device__ void operator()(std::size_t t, int j, int, float* c, float* s) const {
    sincosf(static_cast<float>(positions[t]) * inv_freq[j], s, c);
  }
};
// ... or read from a table made by rope_table.
struct FromTable {
  const float* __restrict__ cos_sin;
  __device__ void operator()(std::size_t t, int j, int half, float* c, float* s) const {
    *c = cos_sin[t * 2 * half + j];
    *s = cos_sin[t * 2 * half + half + j];
  }
};

template <class Angles>
__global__ void rope_kernel(float* x, int n_heads, int half, std::int64_t row_stride, Angles angles,
                            std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(i % half);
    const std::size_t th = i / half;
    const int h = static_cast<int>(th % n_heads);
    const std::size_t t = th / n_heads;
    float* xh =
        x + static_cast<std::int64_t>(t) * row_stride + static_cast<std::int64_t>(h) * 2 * half;
    float c, s;
    angles(t, j, half, &c, &s);
    const float x0 = xh[j], x1 = xh[j + half];
    xh[j] = detail::rope_first(x0, x1, c, s);
    xh[j + half] = detail::rope_second(x0, x1, c, s);
  }
}

__global__ void rope_table_kernel(const float* __restrict__ inv_freq, int half,
                                  const std::int32_t* __restrict__ positions, std::size_t n,
                                  float* __restrict__ cos_sin) {
  const FromPositions angles{inv_freq, positions};
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(i % half);
    const std::size_t t = i / half;
    angles(t, j, half, &cos_sin[t * 2 * half + j], &cos_sin[t * 2 * half + half + j]);
  }
}

void check_rotation(const char* op, const float* x, int n_tokens, int n_heads, int head_dim,
                    std::int64_t row_stride) {
  SPEC_CHECK(x != nullptr, "cuda::" << op << ": needs x");
  SPEC_CHECK(n_tokens >= 1 && n_heads >= 1 && head_dim >= 2 && head_dim % 2 == 0,
             "cuda::" << op << ": bad sizes: tokens " << n_tokens << ", heads " << n_heads
                      << ", head_dim " << head_dim << " (must be even)");
  SPEC_CHECK(
      row_stride >= static_cast<std::int64_t>(n_heads) * head_dim,
      "cuda::" << op << ": row_stride " << row_stride << " is shorter than heads x head_dim");
}

template <class Angles>
void launch_rotation(cudaStream_t stream, float* x, int n_tokens, int n_heads, int head_dim,
                     std::int64_t row_stride, Angles angles) {
  const std::size_t n = static_cast<std::size_t>(n_tokens) * n_heads * (head_dim / 2);
  rope_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(x, n_heads, head_dim / 2, row_stride,
                                                            angles, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope(cudaStream_t stream, float* x, int n_tokens, int n_heads, int head_dim,
          std::int64_t row_stride, const float* inv_freq, const std::int32_t* positions) {
  check_rotation("rope", x, n_tokens, n_heads, head_dim, row_stride);
  CUDA_OP_CHECK("rope", inv_freq != nullptr && positions != nullptr,
                "needs inv_freq and positions");
  launch_rotation(stream, x, n_tokens, n_heads, head_dim, row_stride,
                  FromPositions{inv_freq, positions});
}

void rope_table(cudaStream_t stream, const float* inv_freq, int head_dim,
                const std::int32_t* positions, int n_tokens, float* cos_sin) {
  CUDA_OP_CHECK("rope_table", inv_freq != nullptr && positions != nullptr && cos_sin != nullptr,
                "needs inv_freq, positions and the table");
  CUDA_OP_CHECK("rope_table", n_tokens >= 1 && head_dim >= 2 && head_dim % 2 == 0,
                "bad sizes: tokens " << n_tokens << ", head_dim " << head_dim << " (must be even)");
  const std::size_t n = static_cast<std::size_t>(n_tokens) * (head_dim / 2);
  rope_table_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(inv_freq, head_dim / 2, positions,
                                                                  n, cos_sin);
  CUDA_CHECK_LAUNCH();
}

void rope_apply(cudaStream_t stream, float* x, int n_tokens, int n_heads, int head_dim,
                std::int64_t row_stride, const float* cos_sin) {
  check_rotation("rope_apply", x, n_tokens, n_heads, head_dim, row_stride);
  CUDA_OP_CHECK("rope_apply", cos_sin != nullptr, "needs the table");
  launch_rotation(stream, x, n_tokens, n_heads, head_dim, row_stride, FromTable{cos_sin});
}

}  // namespace specrun::cuda
