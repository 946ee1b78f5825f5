// gather_rows: embedding lookup in a vocab-sharded table. Layout: table [n_rows, dim] row-major
// in F32/BF16/F16 holding vocabulary rows row_begin..row_begin+n_rows-1; ids [n_tokens] int32;
// out [n_tokens, dim] float32. Ids outside this shard give zero rows, so that summing the
// outputs of all shards (all_reduce_sum) gives the full lookup. One thread per output element.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

__global__ void gather_rows_kernel(const void* __restrict__ table, DType dtype,
                                   std::int64_t row_begin, std::int64_t n_rows, int dim,
                                   const std::int32_t* __restrict__ ids, std::size_t n,
                                   float* __restrict__ out) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t t = i / dim, c = i % dim;
    const std::int64_t r = static_cast<std::int64_t>(ids[t]) - row_begin;
    out[i] = (r >= 0 && r < n_rows) ? detail::load_widen(table, dtype, r * dim + c) : 0.0f;
  }
}

}  // namespace

void gather_rows(cudaStream_t stream, const void* table, DType dtype, std::int64_t row_begin,
                 std::int64_t n_rows, int dim, const std::int32_t* ids, int n_tokens, float* out) {
  CUDA_OP_CHECK("gather_rows", table != nullptr && ids != nullptr && out != nullptr,
                "needs a table, ids and an output");
  CUDA_OP_CHECK("gather_rows", n_rows >= 1 && dim >= 1 && n_tokens >= 1 && row_begin >= 0,
                "bad sizes: rows " << n_rows << " from " << row_begin << ", dim " << dim
                                   << ", tokens " << n_tokens);
  const std::size_t n = static_cast<std::size_t>(n_tokens) * dim;
  gather_rows_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(table, dtype, row_begin, n_rows,
                                                                   dim, ids, n, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
