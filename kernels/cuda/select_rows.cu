// select_rows: out[r, :] = x[rows[r], :]. Layout: x and out [*, dim] float32 row-major; rows
// [n_rows] int32 in device memory. Used to pick each sequence's last token before the final
// norm and lm_head. One thread per output element.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

__global__ void select_rows_kernel(const float* __restrict__ x, int dim,
                                   const std::int32_t* __restrict__ rows, std::size_t n,
                                   float* __restrict__ out) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / dim, c = i % dim;
    out[i] = x[static_cast<std::size_t>(rows[r]) * dim + c];
  }
}

}  // namespace

void select_rows(cudaStream_t stream, const float* x, int dim, const std::int32_t* rows, int n_rows,
                 float* out) {
  CUDA_OP_CHECK("select_rows", x != nullptr && rows != nullptr && out != nullptr && x != out,
                "needs x, rows and a separate output");
  CUDA_OP_CHECK("select_rows", dim >= 1 && n_rows >= 1,
                "bad sizes: dim " << dim << ", rows " << n_rows);
  const std::size_t n = static_cast<std::size_t>(n_rows) * dim;
  select_rows_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(x, dim, rows, n, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
