// Quantized weights' element codes (kernels/cpu/quant.h): every 4-bit and 8-bit value at every
// position of a packed word against compressed-tensors' packing rule written out in the test;
// all 256 float8_e4m3fn codes against the OCP FP8 definition computed in double (and a table of
// known values: 448, 2^-9, 2^-6, 1, -1, NaN); the half-precision trick exact for every finite
// code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant.h"

using namespace specrun;

namespace {

// compressed-tensors' pack_to_int32, written from its definition: value i of a word in bits
// [i * b, i * b + b), stored as q + 2^(b-1).
std::vector<std::int32_t> pack(const std::vector<int>& q, int bits) {
  const int per = 32 / bits;
  std::vector<std::int32_t> words((q.size() + per - 1) / per, 0);
  for (std::size_t c = 0; c < q.size(); ++c) {
    const std::uint32_t stored = static_cast<std::uint32_t>(q[c] + (1 << (bits - 1)));
    words[c / per] = static_cast<std::int32_t>(static_cast<std::uint32_t>(words[c / per]) |
                                               (stored << ((c % per) * bits)));
  }
  return words;
}

// The OCP OFP8 E4M3 value of `code`, in double: (-1)^s 2^(e-7) (1 + m/8), subnormals
// (-1)^s 2^-6 m/8, NaN for S.1111.111.
double e4m3_reference(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

}  // namespace

TEST(QuantCodes, Int4AndInt8ValuesUnpackAtEveryPositionOfAWord) {
  for (int bits : {4, 8}) {
    const int lo = -(1 << (bits - 1)), hi = (1 << (bits - 1)) - 1;
    std::vector<int> q;
    for (int v = lo; v <= hi; ++v) q.push_back(v);
    // Every value at every position of a word: shift the sequence by one each round.
    for (int shift = 0; shift < 32 / bits; ++shift) {
      std::vector<int> row(shift, 0);
      row.insert(row.end(), q.begin(), q.end());
      const std::vector<std::int32_t> words = pack(row, bits);
      for (std::size_t c = 0; c < row.size(); ++c) {
        const int got = bits == 4 ? unpack_signed<4>(words.data(), static_cast<int>(c))
                                  : unpack_signed<8>(words.data(), static_cast<int>(c));
        ASSERT_EQ(got, row[c]) << bits << "-bit, column " << c << ", shift " << shift;
      }
    }
  }
}

TEST(QuantCodes, EveryE4m3CodeDecodesExactly) {
  struct Known {
    std::uint8_t code;
    double value;
  };
  for (const Known k : {Known{0x7E, 448.0}, Known{0xFE, -448.0}, Known{0x01, std::ldexp(1.0, -9)},
                        Known{0x08, std::ldexp(1.0, -6)}, Known{0x38, 1.0}, Known{0xB8, -1.0},
                        Known{0x00, 0.0}, Known{0x07, 7 * std::ldexp(1.0, -9)}})
    EXPECT_EQ(static_cast<double>(e4m3_to_f32(k.code)), k.value) << int(k.code);
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
  EXPECT_EQ(e4m3_to_f32(0x80), 0.0f);
  for (int code = 0; code < 256; ++code) {
    const double want = e4m3_reference(code);
    const float got = e4m3_to_f32(static_cast<std::uint8_t>(code));
    EXPECT_EQ(e4m3_is_nan(static_cast<std::uint8_t>(code)), std::isnan(want)) << code;
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << code;
    else
      EXPECT_EQ(static_cast<double>(got), want) << code;
  }
}

TEST(QuantCodes, HalfPrecisionBitsAreTheValueTimesTwoToTheMinusEight) {
  for (int code = 0; code < 256; ++code) {
    if (std::isnan(e4m3_reference(code))) continue;
    const float half = f16_to_f32(e4m3_to_f16_bits_scaled(static_cast<std::uint8_t>(code)));
    EXPECT_EQ(static_cast<double>(half) * 256.0, e4m3_reference(code)) << code;
    EXPECT_EQ(std::signbit(half), (code & 0x80) != 0) << code;
  }
}
