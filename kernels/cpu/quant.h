// The element codes of quantized weights (issue 44; docs/quantization-design.md 3.4), decoded
// exactly; the kernels dequantize in registers with these rules and the float64 oracle of the
// tests implements them independently:
//  - compressed-tensors pack-quantized: b-bit values (b = 4 or 8) packed into int32 words, value
//    (r, w * (32 / b) + i) in bits [i * b, i * b + b) of word (r, w), stored as q + 2^(b-1)
//    (unsigned), q the signed quantized value;
//  - float8_e4m3fn (safetensors F8_E4M3): sign, 4 exponent bits (bias 7), 3 mantissa bits; no
//    infinities; 0x7F and 0xFF are NaN; largest 448 (0x7E); subnormals m/8 * 2^-6.
// Inline: every kernel variant compiles its own copy (kernels/cpu/variant.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/variant.h"

namespace specrun {
inline namespace SPECRUN_ISA_NS {

// The signed value of element `col` of a packed row (`words`: the row's int32 words).
template <int Bits>
inline int unpack_signed(const std::int32_t* words, int col) {
  static_assert(Bits == 4 || Bits == 8, "4- or 8-bit values");
  constexpr int kPerWord = 32 / Bits;
  const std::uint32_t w = static_cast<std::uint32_t>(words[col / kPerWord]);
  const int shift = (col % kPerWord) * Bits;
  const int stored = static_cast<int>((w >> shift) & ((1u << Bits) - 1u));
  return stored - (1 << (Bits - 1));
}

inline bool e4m3_is_nan(std::uint8_t code) {
  return (code & 0x7Fu) == 0x7Fu;
}

// The value of a finite e4m3fn code (NaN codes give NaN).
inline float e4m3_to_f32(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exp = (code >> 3) & 0xFu, mant = code & 0x7u;
  std::uint32_t bits;
  if (e4m3_is_nan(code)) {
    bits = sign | 0x7FC00000u;
  } else if (exp != 0) {
    bits = sign | ((exp + 120u) << 23) | (mant << 20);  // 2^(exp-7) (1 + mant/8)
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: mant/8 * 2^-6 = mant * 2^-9, exactly representable as a float32.
    float v = static_cast<float>(mant) * 0x1p-9f;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// The IEEE half-precision bits whose value is exactly e4m3_to_f32(code) * 2^-8 (finite codes):
// the e4m3 exponent and mantissa fields placed in the half's low exponent and high mantissa
// bits (bias 15 - 7 = 8, subnormals included), so that hardware half-to-float conversion
// (F16C / AVX-512 vcvtph2ps) decodes fp8 and the scale absorbs the 2^8.
inline std::uint16_t e4m3_to_f16_bits_scaled(std::uint8_t code) {
  return static_cast<std::uint16_t>((static_cast<std::uint16_t>(code & 0x80u) << 8) |
                                    (static_cast<std::uint16_t>(code & 0x7Fu) << 7));
}

}  // namespace SPECRUN_ISA_NS
}  // namespace specrun
