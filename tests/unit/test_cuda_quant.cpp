// The CUDA kernel of quantized weights kept packed (kernels/cuda/matmul_quant.cu; issue 44):
// int4 (symmetric with BF16 group scales; with zero points and F32 scales, a partial group),
// int8 per channel (F16 scales) and fp8 e4m3 with 128 x 128 F32 block scales (partial blocks,
// every byte but the NaN codes), against a float64 reference that dequantizes the same codes by
// the formats' rules written out here ((q - z) * s; (-1)^s 2^(e-7) (1 + m/8), subnormals
// 2^-6 m/8, times s): relative L2 error below 1e-5 for decode and verify sizes, outputs poisoned
// with NaN first; a token's outputs bitwise the same alone and in a batch. Skips visibly without
// a CUDA build or a device (not yet run on a GPU: the backend still refuses quantized weights).
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaQuant, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no CUDA kernels to test";
}

#else

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_kernel_checks.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"

using namespace specrun;
using namespace specrun::test;

namespace {

// e4m3fn by its definition (OCP FP8): no NaN code is ever drawn.
double e4m3(std::uint8_t b) {
  const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -v : v;
}

struct Packed {
  QuantFormat format;
  std::vector<std::uint8_t> codes, scales;
  std::vector<std::int8_t> zeros;
  std::vector<double> w;  // the float64 reference W' [out, in]
};

// Random codes, scales (and zero points) of one format, and their dequantized values.
Packed make(QuantKind kind, int out, int in, int group, int block_rows, DType scale_dtype,
            bool zero_points, std::uint32_t salt) {
  std::mt19937 rng(run_seed() * 2654435761u + salt);
  Packed p;
  p.format = QuantFormat{kind, group, block_rows, scale_dtype, zero_points};
  const int groups = (in + group - 1) / group, scale_rows = (out + block_rows - 1) / block_rows;
  std::vector<float> s(static_cast<std::size_t>(scale_rows) * groups);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (float& v : s) {
    v = scale(rng);
    if (scale_dtype == DType::kBF16) v = bf16_to_f32(f32_to_bf16(v));
    if (scale_dtype == DType::kF16) v = f16_to_f32(f32_to_f16(v));
  }
  const std::size_t ss = dtype_size(scale_dtype);
  p.scales.resize(s.size() * ss);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (scale_dtype == DType::kF32) {
      std::memcpy(&p.scales[i * 4], &s[i], 4);
    } else {
      const std::uint16_t h = scale_dtype == DType::kBF16 ? f32_to_bf16(s[i]) : f32_to_f16(s[i]);
      std::memcpy(&p.scales[i * 2], &h, 2);
    }
  }
  const int bits = kind == QuantKind::kInt4 ? 4 : 8;
  const int per_word = kind == QuantKind::kFp8E4M3 ? 1 : 32 / bits;
  const std::size_t row_bytes = kind == QuantKind::kFp8E4M3
                                    ? in
                                    : static_cast<std::size_t>((in + per_word - 1) / per_word) * 4;
  p.codes.assign(row_bytes * out, 0);
  if (zero_points) {
    std::uniform_int_distribution<int> z(-(1 << (bits - 1)), (1 << (bits - 1)) - 1);
    p.zeros.resize(static_cast<std::size_t>(out) * groups);
    for (std::int8_t& v : p.zeros) v = static_cast<std::int8_t>(z(rng));
  }
  p.w.resize(static_cast<std::size_t>(out) * in);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int r = 0; r < out; ++r)
    for (int c = 0; c < in; ++c) {
      const double sv = s[static_cast<std::size_t>(r / block_rows) * groups + c / group];
      double value;
      if (kind == QuantKind::kFp8E4M3) {
        std::uint8_t b;
        do b = static_cast<std::uint8_t>(byte(rng));
        while ((b & 0x7F) == 0x7F);  // NaN codes are refused at load
        p.codes[static_cast<std::size_t>(r) * in + c] = b;
        value = e4m3(b) * sv;
      } else {
        const int stored = byte(rng) & ((1 << bits) - 1);
        const int q = stored - (1 << (bits - 1));
        const int z = zero_points ? p.zeros[static_cast<std::size_t>(r) * groups + c / group] : 0;
        std::uint8_t* word = &p.codes[r * row_bytes + static_cast<std::size_t>(c / per_word) * 4];
        std::uint32_t w32;
        std::memcpy(&w32, word, 4);
        w32 |= static_cast<std::uint32_t>(stored) << ((c % per_word) * bits);
        std::memcpy(word, &w32, 4);
        value = static_cast<double>(q - z) * sv;
      }
      p.w[static_cast<std::size_t>(r) * in + c] = value;
    }
  return p;
}

std::vector<double> reference(const std::vector<float>& x, int n, int in, const Packed& p,
                              int out) {
  std::vector<double> y(static_cast<std::size_t>(n) * out);
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < out; ++o) {
      double sum = 0;
      for (int i = 0; i < in; ++i)
        sum += static_cast<double>(x[static_cast<std::size_t>(t) * in + i]) *
               p.w[static_cast<std::size_t>(o) * in + i];
      y[static_cast<std::size_t>(t) * out + o] = sum;
    }
  return y;
}

TEST(CudaQuant, QuantMatmulAgainstFloat64) {
  REQUIRE_DEVICE();
  struct Case {
    const char* name;
    QuantKind kind;
    int out, in, group, block_rows;
    DType scale_dtype;
    bool zeros;
  };
  const Case cases[] = {
      {"int4 g32 BF16", QuantKind::kInt4, 300, 1024, 32, 1, DType::kBF16, false},
      {"int4 g128 zero points F32, partial group", QuantKind::kInt4, 129, 200, 128, 1, DType::kF32,
       true},
      {"int8 channel F16", QuantKind::kInt8, 64, 516, 516, 1, DType::kF16, false},
      {"fp8 128x128, partial blocks", QuantKind::kFp8E4M3, 300, 260, 128, 128, DType::kF32, false},
  };
  std::uint32_t salt = 0;
  for (const Case& c : cases) {
    const Packed p =
        make(c.kind, c.out, c.in, c.group, c.block_rows, c.scale_dtype, c.zeros, ++salt);
    auto dcodes = upload(p.codes), dscales = upload(p.scales), dzeros = upload(p.zeros);
    cuda::QuantWeight w;
    w.codes = dcodes.get();
    w.scales = dscales.get();
    w.zeros = c.zeros ? dzeros.as<std::int8_t>() : nullptr;
    w.format = p.format;
    w.out = c.out;
    std::vector<float> alone;
    for (int n : {1, 5}) {
      const auto x = randn(static_cast<std::size_t>(n) * c.in, ++salt);
      auto dx = upload(x);
      auto dy = poisoned(static_cast<std::size_t>(n) * c.out);
      cuda::quant_matmul(stream(), dx.as<float>(), n, c.in, w, dy.as<float>());
      const std::vector<float> y = download(dy, static_cast<std::size_t>(n) * c.out);
      expect_l2(std::string("quant_matmul ") + c.name + " n=" + std::to_string(n), y,
                reference(x, n, c.in, p, c.out), 1e-5);
      if (n == 1) {
        alone = y;
        // The same token first in a batch of 5: bitwise the same outputs.
        auto batch = randn(static_cast<std::size_t>(5) * c.in, 1000 + salt);
        std::copy(x.begin(), x.end(), batch.begin());
        auto db = upload(batch);
        auto dyb = poisoned(static_cast<std::size_t>(5) * c.out);
        cuda::quant_matmul(stream(), db.as<float>(), 5, c.in, w, dyb.as<float>());
        std::vector<float> first = download(dyb, static_cast<std::size_t>(5) * c.out);
        first.resize(c.out);
        expect_bitwise(std::string("quant_matmul ") + c.name + ": a token alone and in a batch",
                       alone, first);
      }
    }
  }
}

}  // namespace

#endif  // SPECRUN_HAVE_CUDA
