// kv_append: writes the new tokens' keys and values of one layer into their sequences' KV
// caches. Layout: k_new, v_new [n_tokens, n_kv_heads * head_dim] float32; slots [n_tokens]
// (device) give each token's cache, capacity and slot; a cache is float32
// [n_layers][2 (K, V)][capacity][n_kv_heads][head_dim] (src/model/kv_cache.h). One thread per
// element of one row of K and V.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace specrun::cuda {
namespace {

__global__ void kv_append_kernel(const float* __restrict__ k_new, const float* __restrict__ v_new,
                                 int row, const KvSlot* __restrict__ slots, int layer,
                                 std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t t = i / row, c = i % row;
    const KvSlot s = slots[t];
    const std::size_t plane = static_cast<std::size_t>(s.capacity) * row;
    float* k = s.cache + static_cast<std::size_t>(layer) * 2 * plane;
    const std::size_t at = static_cast<std::size_t>(s.slot) * row + c;
    k[at] = k_new[i];
    k[plane + at] = v_new[i];
  }
}

}  // namespace

void kv_append(cudaStream_t stream, const float* k_new, const float* v_new, int n_tokens,
               int n_kv_heads, int head_dim, const KvSlot* slots, int layer) {
  CUDA_OP_CHECK("kv_append", k_new != nullptr && v_new != nullptr && slots != nullptr,
                "needs keys, values and slots");
  CUDA_OP_CHECK("kv_append", n_tokens >= 1 && n_kv_heads >= 1 && head_dim >= 1 && layer >= 0,
                "bad sizes: tokens " << n_tokens << ", kv heads " << n_kv_heads << ", head_dim "
                                     << head_dim << ", layer " << layer);
  const int row = n_kv_heads * head_dim;
  const std::size_t n = static_cast<std::size_t>(n_tokens) * row;
  kv_append_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(k_new, v_new, row, slots, layer,
                                                                 n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
