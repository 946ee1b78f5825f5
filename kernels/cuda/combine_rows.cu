// combine_rows: y[t, :] = sum over i in [first[t], first[t + 1]) of scale[i] * x[src[i], :], in
// ascending i from zero, each term a rounded product then a rounded add (__fmul_rn / __fadd_rn:
// no contraction into a fused multiply-add, the CPU's cpu::combine_rows numerics); a row without
// terms is zeros. A mixture-of-experts layer's weighted sum of its experts' outputs. Layout: x
// [*, width] and y [rows, width] float32 row-major (y must not alias x); first [rows + 1], src
// and scale [first[rows]] in device memory. One thread per output element: a row's sum depends
// on its own terms only.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

__global__ void combine_rows_kernel(float* __restrict__ y, std::size_t n, std::size_t width,
                                    const float* __restrict__ x,
                                    const std::int32_t* __restrict__ first,
                                    const std::int32_t* __restrict__ src,
                                    const float* __restrict__ scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t t = i / width, c = i % width;
    float acc = 0.0f;
    for (int j = first[t]; j < first[t + 1]; ++j)
      acc = __fadd_rn(acc, __fmul_rn(scale[j], x[static_cast<std::size_t>(src[j]) * width + c]));
    y[i] = acc;
  }
}

}  // namespace

void combine_rows(cudaStream_t stream, float* y, int rows, std::size_t width, const float* x,
                  const std::int32_t* first, const std::int32_t* src, const float* scale) {
  CUDA_OP_CHECK("combine_rows", y != nullptr && x != nullptr && first != nullptr && y != x,
                "needs y, x, the row offsets and an output that is not x");
  CUDA_OP_CHECK("combine_rows", rows >= 1 && width >= 1,
                "bad sizes: rows " << rows << ", width " << width);
  const std::size_t n = static_cast<std::size_t>(rows) * width;
  combine_rows_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(y, n, width, x, first, src,
                                                                    scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
