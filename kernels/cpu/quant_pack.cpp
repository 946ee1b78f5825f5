// The packed layout of quantized weights (ops.h pack_quantized): the same for every kernel
// variant, so compiled once, for the baseline. It runs once per matrix at load: a repack of the
// checkpoint's codes into the kernels' 32-row k-major blocks, never a widening.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

std::size_t packed_quant_bytes(const QuantFormat& f, int out, int in) {
  return static_cast<std::size_t>(packed_blocks(out)) * quant_block_bytes(f, in);
}

namespace {

// Block b of `w` (rows b * kPackRows ..) in pack_quantized's layout at d.
void pack_quant_block(const QuantMatrix& w, int b, std::uint8_t* d) {
  const QuantFormat& f = w.quant;
  const int in = w.in;
  const std::size_t values = quant_block_values(f, in);
  const std::size_t ss = dtype_size(f.scale_dtype);
  const std::int64_t groups = quant_scale_cols(f, in);
  const std::size_t row_bytes = quant_row_bytes(f, in);
  const auto* src = static_cast<const std::uint8_t*>(w.data);
  const auto* scales = static_cast<const std::uint8_t*>(w.scales);
  std::uint8_t* s_out = d + values;
  std::int8_t* z_out = reinterpret_cast<std::int8_t*>(s_out + quant_block_scales(f, in));
  const int per_word = f.kind == QuantKind::kInt4 ? 8 : 4;
  for (int r = 0; r < kPackRows; ++r) {
    const int row = b * kPackRows + r;
    const bool real = row < w.out;
    for (int k = 0; k < in; ++k) {
      // The stored code: int: unsigned q + 2^(bits-1) (a padding row: q = 0); fp8: the byte.
      std::uint32_t code = f.kind == QuantKind::kInt4 ? 8u : f.kind == QuantKind::kInt8 ? 128u : 0u;
      if (real) {
        const std::uint8_t* rp = src + static_cast<std::size_t>(row) * row_bytes;
        if (f.kind == QuantKind::kFp8E4M3) {
          code = rp[k];
        } else {
          std::uint32_t word;
          std::memcpy(&word, rp + static_cast<std::size_t>(k / per_word) * 4, 4);
          const int bits = 32 / per_word;
          code = (word >> ((k % per_word) * bits)) & ((1u << bits) - 1u);
        }
      }
      if (f.kind == QuantKind::kInt4) {
        std::uint8_t& byte = d[static_cast<std::size_t>(k) * 16 + (r & 15)];
        byte = static_cast<std::uint8_t>(r < 16 ? (byte & 0xF0u) | code
                                                : (byte & 0x0Fu) | (code << 4));
      } else {
        d[static_cast<std::size_t>(k) * 32 + r] = static_cast<std::uint8_t>(code);
      }
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      std::uint8_t* so = s_out + (static_cast<std::size_t>(g) * kPackRows + r) * ss;
      if (real)
        std::memcpy(so, scales + (static_cast<std::size_t>(row / f.block_rows) * groups + g) * ss,
                    ss);
      else
        std::memset(so, 0, ss);
      if (f.zero_points)
        z_out[g * kPackRows + r] =
            real ? w.zeros[static_cast<std::size_t>(row) * groups + g] : std::int8_t{0};
    }
  }
}

}  // namespace

void pack_quantized(const QuantMatrix& w, void* dst) {
  const std::size_t block_bytes = quant_block_bytes(w.quant, w.in);
#pragma omp parallel for schedule(static)
  for (int b = 0; b < packed_blocks(w.out); ++b)
    pack_quant_block(w, b, static_cast<std::uint8_t*>(dst) + block_bytes * b);
}

void pack_quantized_pairs(const QuantMatrix& a, const QuantMatrix& b, void* dst) {
  const std::size_t block_bytes = quant_block_bytes(a.quant, a.in);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < 2 * packed_blocks(a.out); ++i)
    pack_quant_block(i % 2 == 0 ? a : b, i / 2, static_cast<std::uint8_t*>(dst) + block_bytes * i);
}

}  // namespace specrun::cpu
