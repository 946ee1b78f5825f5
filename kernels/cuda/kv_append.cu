// kv_append: writes the new tokens' keys and values of one layer into their sequences' KV
// caches. Layout: k_new, v_new [n_tokens, n_kv_heads * head_dim] float32; slots [n_tokens]
// (device) give each token's cache, capacity and slot; a cache is float32
// [n_layers][2 (K, V)][capacity][n_kv_heads][head_dim] (src/model/kv_cache.h). One thread per
// element of one row of K and V.
// rope_kv_append rotates the keys on the way (RoPE with a rope_table table, rope.cuh): the cache
// then holds bitwise what rope_apply followed by kv_append writes, in one launch instead of two;
// k_new itself is left as it was.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope.cuh"

namespace specrun::cuda {
namespace {

// cos_sin == nullptr: the keys as they are.
__global__ void kv_append_kernel(const float* __restrict__ k_new, const float* __restrict__ v_new,
                                 int row, int head_dim, const float* __restrict__ cos_sin,
                                 const KvSlot* __restrict__ slots, int layer, std::size_t n) {
  detail::wait_for_prior_grids();  // a dependent launch: the keys' projection has finished
  detail::allow_dependents();      // attention may be placed on the device meanwhile
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t t = i / row, c = i % row;
    const KvSlot s = slots[t];
    const std::size_t plane = static_cast<std::size_t>(s.capacity) * row;
    float* k = s.cache + static_cast<std::size_t>(layer) * 2 * plane;
    const std::size_t at = static_cast<std::size_t>(s.slot) * row + c;
    if (cos_sin != nullptr) {
      const int d = static_cast<int>(c % head_dim);
      k[at] = detail::rope_element(k_new + (i - d), d, head_dim / 2, cos_sin + t * head_dim);
    } else {
      k[at] = k_new[i];
    }
    k[plane + at] = v_new[i];
  }
}

void launch_append(const char* op, cudaStream_t stream, const float* k_new, const float* v_new,
                   int n_tokens, int n_kv_heads, int head_dim, const float* cos_sin,
                   const KvSlot* slots, int layer, bool dependent) {
  SPEC_CHECK(k_new != nullptr && v_new != nullptr && slots != nullptr,
             "cuda::" << op << ": needs keys, values and slots");
  SPEC_CHECK(n_tokens >= 1 && n_kv_heads >= 1 && head_dim >= 1 && layer >= 0,
             "cuda::" << op << ": bad sizes: tokens " << n_tokens << ", kv heads " << n_kv_heads
                      << ", head_dim " << head_dim << ", layer " << layer);
  const int row = n_kv_heads * head_dim;
  const std::size_t n = static_cast<std::size_t>(n_tokens) * row;
  detail::launch_dependent(dependent, kv_append_kernel, dim3(detail::grid_for(n, 256)), dim3(256),
                           0, stream, k_new, v_new, row, head_dim, cos_sin, slots, layer, n);
}

}  // namespace

void kv_append(cudaStream_t stream, const float* k_new, const float* v_new, int n_tokens,
               int n_kv_heads, int head_dim, const KvSlot* slots, int layer) {
  launch_append("kv_append", stream, k_new, v_new, n_tokens, n_kv_heads, head_dim, nullptr, slots,
                layer, false);
}

void rope_kv_append(cudaStream_t stream, const float* k_new, const float* v_new, int n_tokens,
                    int n_kv_heads, int head_dim, const float* cos_sin, const KvSlot* slots,
                    int layer, bool dependent) {
  CUDA_OP_CHECK("rope_kv_append", cos_sin != nullptr && head_dim % 2 == 0,
                "needs the RoPE table and an even head_dim (" << head_dim << ")");
  launch_append("rope_kv_append", stream, k_new, v_new, n_tokens, n_kv_heads, head_dim, cos_sin,
                slots, layer, dependent);
}

}  // namespace specrun::cuda
