// The packed weight layout (ops.h pack_weights): the same for every kernel variant, so compiled
// once, for the baseline. It runs once per matrix at load.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

std::size_t packed_weight_bytes(DType t, int out, int in) {
  return static_cast<std::size_t>(packed_blocks(out)) * kPackRows * static_cast<std::size_t>(in) *
         dtype_size(t);
}

namespace {

// Block b of w ([out, in] row-major in t) in pack_weights' layout at dst.
void pack_block(const std::uint8_t* src, DType t, int out, int in, int b, std::uint8_t* d) {
  const std::size_t es = dtype_size(t);
  for (int r = 0; r < kPackRows; ++r) {
    const int row = b * kPackRows + r;
    const std::size_t slot = static_cast<std::size_t>(packed_slot(t, r));
    const std::uint8_t* s = src + es * static_cast<std::size_t>(in) * row;
    if (es == 4) {
      for (int k = 0; k < in; ++k) {
        std::uint32_t v = 0;
        if (row < out) std::memcpy(&v, s + 4 * static_cast<std::size_t>(k), 4);
        std::memcpy(d + 4 * (static_cast<std::size_t>(k) * kPackRows + slot), &v, 4);
      }
    } else {
      for (int k = 0; k < in; ++k) {
        std::uint16_t v = 0;
        if (row < out) std::memcpy(&v, s + 2 * static_cast<std::size_t>(k), 2);
        std::memcpy(d + 2 * (static_cast<std::size_t>(k) * kPackRows + slot), &v, 2);
      }
    }
  }
}

}  // namespace

void pack_weights(const void* w, DType t, int out, int in, void* dst) {
  const std::size_t block_bytes = dtype_size(t) * kPackRows * static_cast<std::size_t>(in);
#pragma omp parallel for schedule(static)
  for (int b = 0; b < packed_blocks(out); ++b)
    pack_block(static_cast<const std::uint8_t*>(w), t, out, in, b,
               static_cast<std::uint8_t*>(dst) + block_bytes * b);
}

void pack_weight_pairs(const void* a, const void* b, DType t, int out, int in, void* dst) {
  const std::size_t block_bytes = dtype_size(t) * kPackRows * static_cast<std::size_t>(in);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < 2 * packed_blocks(out); ++i)
    pack_block(static_cast<const std::uint8_t*>(i % 2 == 0 ? a : b), t, out, in, i / 2,
               static_cast<std::uint8_t*>(dst) + block_bytes * i);
}

}  // namespace specrun::cpu
