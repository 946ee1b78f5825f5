// kv_keep: compaction of one sequence's KV cache after a verified token tree (ops.h): slots
// first + rows[j] move to first + j, keys and values of every layer. Layout: cache float32
// [layers][2][capacity][row_floats]; rows int32 [count] (device); scratch float32
// [layers][2][count][row_floats]. Two launches on the stream: gather into scratch, then scatter
// back, so that a move never reads a row another move already wrote. One thread per element.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

template <bool kGather>
__global__ void kv_keep_kernel(float* cache, int capacity, int row_floats, int first,
                               const std::int32_t* __restrict__ rows, int count, float* scratch,
                               std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t c = i % row_floats;
    const std::size_t j = i / row_floats % count;
    const std::size_t plane = i / row_floats / count;  // layer * 2 + (K or V)
    float* base = cache + plane * static_cast<std::size_t>(capacity) * row_floats;
    if (kGather)
      scratch[i] = base[static_cast<std::size_t>(first + rows[j]) * row_floats + c];
    else
      base[(static_cast<std::size_t>(first) + j) * row_floats + c] = scratch[i];
  }
}

}  // namespace

void kv_keep(cudaStream_t stream, float* cache, int capacity, int layers, int row_floats, int first,
             const std::int32_t* rows, int count, float* scratch) {
  CUDA_OP_CHECK("kv_keep",
                cache != nullptr && scratch != nullptr && (rows != nullptr || count == 0),
                "needs the cache, the rows and scratch");
  CUDA_OP_CHECK(
      "kv_keep",
      layers >= 1 && row_floats >= 1 && first >= 0 && count >= 0 && first + count <= capacity,
      "bad sizes: layers " << layers << ", row " << row_floats << ", first " << first << ", count "
                           << count << ", capacity " << capacity);
  if (count == 0) return;
  const std::size_t n = static_cast<std::size_t>(layers) * 2 * count * row_floats;
  kv_keep_kernel<true><<<detail::grid_for(n, 256), 256, 0, stream>>>(
      cache, capacity, row_floats, first, rows, count, scratch, n);
  CUDA_CHECK_LAUNCH();
  kv_keep_kernel<false><<<detail::grid_for(n, 256), 256, 0, stream>>>(
      cache, capacity, row_floats, first, rows, count, scratch, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
