// Element types of weights as stored in checkpoints, and conversions. Kernels know nothing of
// models; this is the one vocabulary they share with src/model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/variant.h"

namespace specrun {

enum class DType : std::uint8_t { kF32, kF16, kBF16 };

// Quantized weights (issue 44; docs/quantization-design.md 3.1), kept packed as the checkpoint
// stores them: kInt4 / kInt8 are compressed-tensors pack-quantized values (int32 words, 8 or 4
// values each, row-major, ceil(cols / per word) words per row), kFp8E4M3 one float8_e4m3fn byte
// per value (row-major).
enum class QuantKind : std::uint8_t { kNone, kInt4, kInt8, kFp8E4M3 };

// How a quantized matrix [rows, cols] is stored: one scale per block of `block_rows` rows and
// `group` inputs (int: block_rows 1 and group = group_size, or cols for one scale per row; fp8:
// weight_block_size), row-major [ceil(rows / block_rows), ceil(cols / group)] in scale_dtype;
// zero_points: a signed int8 zero point per scale (asymmetric int).
// Value (design 3.5): (q - z) * s (int), e4m3(b) * s (fp8), in float32.
struct QuantFormat {
  QuantKind kind = QuantKind::kNone;
  int group = 0;
  int block_rows = 1;
  DType scale_dtype = DType::kF32;
  bool zero_points = false;
};

const char* dtype_name(DType t);  // "F32", "F16", "BF16" (safetensors spelling)

float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// Inline helpers: every kernel variant compiles its own copy (kernels/cpu/variant.h).
inline namespace SPECRUN_ISA_NS {

inline constexpr std::size_t dtype_size(DType t) {
  return t == DType::kF32 ? 4 : 2;
}

// Bytes of one packed row of `cols` values (int: whole int32 words; fp8: one byte per value).
inline constexpr std::size_t quant_row_bytes(const QuantFormat& f, std::int64_t cols) {
  if (f.kind == QuantKind::kFp8E4M3) return static_cast<std::size_t>(cols);
  const std::int64_t per_word = f.kind == QuantKind::kInt4 ? 8 : 4;
  return static_cast<std::size_t>((cols + per_word - 1) / per_word) * 4;
}
// The scale matrix's rows and columns for a [rows, cols] matrix.
inline constexpr std::int64_t quant_scale_rows(const QuantFormat& f, std::int64_t rows) {
  return (rows + f.block_rows - 1) / f.block_rows;
}
inline constexpr std::int64_t quant_scale_cols(const QuantFormat& f, std::int64_t cols) {
  return (cols + f.group - 1) / f.group;
}

inline float bf16_to_f32(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaNs stay quiet NaNs.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 64);
  return static_cast<std::uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace SPECRUN_ISA_NS

}  // namespace specrun
