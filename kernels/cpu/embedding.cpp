// gather_rows: embedding lookup from a (possibly row-sharded) table in F32/BF16/F16, row-major
// or packed (gather_rows_packed).
// Layout: table [n_rows, dim] row-major; out [n_tokens, dim] float32. Rows not in this shard
// are zero-filled so that a sum over shards reconstructs the full lookup exactly.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

void gather_rows(const void* table, DType dtype, std::int64_t row_begin, std::int64_t n_rows,
                 int dim, const std::int32_t* ids, int n_tokens, float* out) {
  const auto* base = static_cast<const std::uint8_t*>(table);
  const std::size_t row_bytes = dtype_size(dtype) * static_cast<std::size_t>(dim);
  for (int t = 0; t < n_tokens; ++t) {
    float* dst = out + static_cast<std::size_t>(t) * dim;
    const std::int64_t row = static_cast<std::int64_t>(ids[t]) - row_begin;
    if (row < 0 || row >= n_rows) {
      for (int i = 0; i < dim; ++i) dst[i] = 0.f;
      continue;
    }
    detail::widen_row(base + row_bytes * static_cast<std::size_t>(row), dtype, dim, dst);
  }
}

void gather_rows_packed(const PackedWeights& table, std::int64_t row_begin, const std::int32_t* ids,
                        int n_tokens, float* out) {
  const auto* base = static_cast<const std::uint8_t*>(table.data);
  const std::size_t es = dtype_size(table.dtype);
  const std::size_t group = es * kPackRows;  // bytes per input index within a block
  const int dim = table.in;
  for (int t = 0; t < n_tokens; ++t) {
    float* dst = out + static_cast<std::size_t>(t) * dim;
    const std::int64_t row = static_cast<std::int64_t>(ids[t]) - row_begin;
    if (row < 0 || row >= table.out) {
      for (int i = 0; i < dim; ++i) dst[i] = 0.f;
      continue;
    }
    // Row `row` is slot packed_slot(row % 32) of every k-group of block row / 32.
    const std::uint8_t* p = base + group * static_cast<std::size_t>(dim) * (row / kPackRows) +
                            es * packed_slot(table.dtype, static_cast<int>(row % kPackRows));
    for (int k = 0; k < dim; ++k, p += group) {
      if (table.dtype == DType::kF32) {
        std::memcpy(dst + k, p, 4);
      } else {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        dst[k] = table.dtype == DType::kBF16 ? bf16_to_f32(h) : detail::f16_bits_to_f32(h);
      }
    }
  }
}

}  // namespace specrun::cpu::SPECRUN_ISA
