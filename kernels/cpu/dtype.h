// Element types of weights as stored in checkpoints, and conversions. Kernels know nothing of
// models; this is the one vocabulary they share with src/model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/variant.h"

namespace specrun {

enum class DType : std::uint8_t { kF32, kF16, kBF16 };

const char* dtype_name(DType t);  // "F32", "F16", "BF16" (safetensors spelling)

float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// Inline helpers: every kernel variant compiles its own copy (kernels/cpu/variant.h).
inline namespace SPECRUN_ISA_NS {

inline constexpr std::size_t dtype_size(DType t) {
  return t == DType::kF32 ? 4 : 2;
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
