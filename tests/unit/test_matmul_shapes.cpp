// The performance kernels' exactness contracts (kernels/cpu/ops.h), checked bitwise:
//  - a token's matmul outputs do not depend on how many tokens share the call (tiles of 1..12
//    tokens with 1, 2 or 4 blocks, prefill token tiles past 12), nor on the thread count:
//    greedy speculative decoding relies on it;
//  - a row's output does not depend on where it falls in a 32-row block or which tile holds
//    that block; the packed layout holds every row of the matrix;
//  - matmul_multi equals one matmul per output; the fused SwiGLU output equals two matmuls and
//    silu_mul;
//  - a query's attention output does not depend on the window of queries in the call (blocks
//    of 4 queries share key and value loads) nor on the thread count;
//  - rope_table + rope_apply equals rope; stream_read sums its buffer.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_data.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/ops.h"

using specrun::DType;
namespace cpu = specrun::cpu;

namespace {

using specrun::test::random_vector;

std::vector<std::uint8_t> weights_in(const std::vector<float>& values, DType t) {
  return specrun::test::make_weights(values, t).bytes;
}

// First index where a and b differ bitwise, or -1.
long first_difference(const float* a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return static_cast<long>(i);
  return -1;
}

class MatmulShapes : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulShapes, TokenOutputsIndependentOfBatchShapeAndThreads) {
  const DType t = GetParam();
  std::mt19937 rng(21);
  // Tails everywhere: 200 % 64 inputs, 173 % 32 rows (6 blocks: tiles of 4 + 2 and 2 + 2 + 2
  // blocks), 29 tokens (prefill tiles 8 + 7 + 7 + 7).
  const int in = 200, out = 173, n_tokens = 29;
  const auto x = random_vector(static_cast<std::size_t>(n_tokens) * in, rng);
  const auto w = weights_in(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
  const auto packed = specrun::test::pack(w.data(), t, out, in);
  const auto bias = random_vector(out, rng);
  std::vector<float> all(static_cast<std::size_t>(n_tokens) * out);
  omp_set_num_threads(2);
  cpu::matmul(x.data(), n_tokens, packed.view, bias.data(), all.data());
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    // Every window [start, start + len) of the tokens, as its own call.
    for (int len : {1, 2, 3, 5, 6, 7, 12, 13}) {
      for (int start = 0; start + len <= n_tokens; start += 3) {
        std::vector<float> part(static_cast<std::size_t>(len) * out);
        cpu::matmul(x.data() + static_cast<std::size_t>(start) * in, len, packed.view, bias.data(),
                    part.data());
        const long d = first_difference(
            part.data(), all.data() + static_cast<std::size_t>(start) * out, part.size());
        ASSERT_EQ(d, -1) << specrun::dtype_name(t) << " threads " << threads << " window [" << start
                         << ", " << start + len << "): token " << start + d / out << " row "
                         << d % out << " differs from the 29-token call";
      }
    }
  }
}

TEST_P(MatmulShapes, RowOutputIndependentOfItsBlockPosition) {
  const DType t = GetParam();
  std::mt19937 rng(22);
  const int in = 96, out = 150, n_tokens = 3;
  const auto x = random_vector(static_cast<std::size_t>(n_tokens) * in, rng);
  const auto w = weights_in(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
  const std::size_t row_bytes = specrun::dtype_size(t) * in;
  std::vector<float> full(static_cast<std::size_t>(n_tokens) * out);
  cpu::matmul(x.data(), n_tokens, specrun::test::pack(w.data(), t, out, in).view, nullptr,
              full.data());
  // Dropping the first `skip` rows moves every other row to another slot of its block (in BF16
  // across the two 16-row halves), to another block and tile, and the last rows in and out of
  // the partly filled last block.
  for (int skip : {1, 3, 16, 17, 33, 100}) {
    const int rows = out - skip;
    std::vector<float> shifted(static_cast<std::size_t>(n_tokens) * rows);
    cpu::matmul(x.data(), n_tokens,
                specrun::test::pack(w.data() + row_bytes * skip, t, rows, in).view, nullptr,
                shifted.data());
    for (int tk = 0; tk < n_tokens; ++tk)
      for (int r = 0; r < rows; ++r) {
        const float a = shifted[static_cast<std::size_t>(tk) * rows + r];
        const float b = full[static_cast<std::size_t>(tk) * out + r + skip];
        ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0)
            << specrun::dtype_name(t) << " skip " << skip << " token " << tk << " row " << r + skip
            << ": " << a << " vs " << b;
      }
  }
}

TEST_P(MatmulShapes, MultiEqualsOneMatmulPerOutput) {
  const DType t = GetParam();
  std::mt19937 rng(23);
  const int in = 130, n_tokens = 8;
  const int outs[3] = {100, 18, 5};  // q-, k-, v-like, none a multiple of 32
  const auto x = random_vector(static_cast<std::size_t>(n_tokens) * in, rng);
  std::vector<std::vector<std::uint8_t>> w;
  std::vector<std::vector<float>> bias, fused, separate;
  for (int out : outs) {
    w.push_back(weights_in(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t));
    bias.push_back(random_vector(out, rng));
    fused.emplace_back(static_cast<std::size_t>(n_tokens) * out);
    separate.emplace_back(static_cast<std::size_t>(n_tokens) * out);
  }
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<specrun::test::OwnedPackedWeights> packed;
    std::vector<cpu::MatmulOutput> o;
    for (int j = 0; j < 3; ++j) packed.push_back(specrun::test::pack(w[j].data(), t, outs[j], in));
    for (int j = 0; j < 3; ++j)
      o.push_back({packed[j].view, j == 1 ? nullptr : bias[j].data(), fused[j].data()});
    cpu::matmul_multi(x.data(), n_tokens, o.data(), 3);
    for (int j = 0; j < 3; ++j) {
      cpu::matmul(x.data(), n_tokens, packed[j].view, j == 1 ? nullptr : bias[j].data(),
                  separate[j].data());
      EXPECT_EQ(first_difference(fused[j].data(), separate[j].data(), fused[j].size()), -1)
          << specrun::dtype_name(t) << " threads " << threads << " output " << j;
    }
  }
}

TEST_P(MatmulShapes, FusedSwigluEqualsTwoMatmulsThenSiluMul) {
  const DType t = GetParam();
  std::mt19937 rng(26);
  // 173 rows: 6 pairs, the last partly filled; token counts for every tile and pass shape.
  const int in = 200, out = 173, max_tokens = 29;
  const auto x = random_vector(static_cast<std::size_t>(max_tokens) * in, rng);
  const auto g = weights_in(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
  const auto u = weights_in(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
  const auto pg = specrun::test::pack(g.data(), t, out, in);
  const auto pu = specrun::test::pack(u.data(), t, out, in);
  std::vector<std::uint8_t> pairs(2 * cpu::packed_weight_bytes(t, out, in));
  cpu::pack_weight_pairs(g.data(), u.data(), t, out, in, pairs.data());
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int n : {1, 2, 3, 5, 6, 7, 8, 12, 13, 29}) {
      std::vector<float> gate(static_cast<std::size_t>(n) * out), up(gate.size()),
          fused(gate.size(), -1.f);
      cpu::matmul(x.data(), n, pg.view, nullptr, gate.data());
      cpu::matmul(x.data(), n, pu.view, nullptr, up.data());
      cpu::silu_mul(gate.data(), up.data(), gate.data(), gate.size());
      cpu::MatmulOutput o{{pairs.data(), t, out, in}, nullptr, fused.data()};
      o.swiglu = true;
      cpu::matmul_multi(x.data(), n, &o, 1);
      const long d = first_difference(fused.data(), gate.data(), gate.size());
      ASSERT_EQ(d, -1) << specrun::dtype_name(t) << " threads " << threads << " tokens " << n
                       << ": token " << d / out << " row " << d % out << " differs";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulShapes,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& param_info) {
                           return std::string(specrun::dtype_name(param_info.param));
                         });

TEST(Attention, QueryOutputIndependentOfWindow) {
  std::mt19937 rng(25);
  // head_dim 72: masked tails in the 16-wide chunks and in the 64-wide value passes.
  const int n_heads = 4, n_kv_heads = 2, head_dim = 72, start = 6, n_tokens = 11;
  const std::int64_t q_stride = n_heads * head_dim, kv_stride = n_kv_heads * head_dim;
  const auto k = random_vector(static_cast<std::size_t>(start + n_tokens) * kv_stride, rng);
  const auto v = random_vector(static_cast<std::size_t>(start + n_tokens) * kv_stride, rng);
  const auto q = random_vector(static_cast<std::size_t>(n_tokens) * q_stride, rng);
  std::vector<float> all(q.size());
  omp_set_num_threads(2);
  cpu::attention(q.data(), n_tokens, n_heads, n_kv_heads, head_dim, head_dim, k.data(), v.data(),
                 start, all.data());
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int len : {1, 2, 3, 5, 9}) {
      for (int s0 = 0; s0 + len <= n_tokens; ++s0) {
        std::vector<float> part(static_cast<std::size_t>(len) * q_stride);
        cpu::attention(q.data() + s0 * q_stride, len, n_heads, n_kv_heads, head_dim, head_dim,
                       k.data(), v.data(), start + s0, part.data());
        const long d = first_difference(part.data(), all.data() + s0 * q_stride, part.size());
        ASSERT_EQ(d, -1) << "threads " << threads << " window [" << s0 << ", " << s0 + len
                         << "): query " << s0 + d / q_stride << " differs from the 11-query call";
      }
    }
  }
}

TEST(RopeTable, TableThenApplyEqualsRope) {
  std::mt19937 rng(24);
  const int n_tokens = 5, n_heads = 3, head_dim = 16;
  const std::int64_t stride = n_heads * head_dim + 8;
  std::vector<float> inv_freq(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j) inv_freq[j] = std::pow(10000.f, -2.f * j / head_dim);
  const std::vector<std::int32_t> positions = {0, 7, 8, 300, 4095};
  auto a = random_vector(n_tokens * stride, rng);
  auto b = a;
  cpu::rope(a.data(), n_tokens, n_heads, head_dim, stride, inv_freq.data(), positions.data());
  std::vector<float> table(n_tokens * head_dim);
  cpu::rope_table(inv_freq.data(), head_dim, positions.data(), n_tokens, table.data());
  cpu::rope_apply(b.data(), n_tokens, n_heads, head_dim, stride, table.data());
  EXPECT_EQ(first_difference(a.data(), b.data(), a.size()), -1);
  // The table holds cos then sin of position * inv_freq.
  EXPECT_FLOAT_EQ(table[3 * head_dim + 1], std::cos(300.f * inv_freq[1]));
  EXPECT_FLOAT_EQ(table[3 * head_dim + head_dim / 2 + 1], std::sin(300.f * inv_freq[1]));
}

TEST(StreamRead, EveryKernelSumsTheBuffer) {
  // Ones and a few twos: every partial sum is an exact integer in float32. Lengths: short of one
  // 256-byte block, not a multiple of four blocks per thread, and a remainder after the
  // four-stream kernel's equal quarters.
  std::vector<float> v(100003, 1.0f);
  v[0] = v[50000] = v[100002] = 2.0f;
  for (int kernel = 0; kernel < cpu::kReadKernels; ++kernel)
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      SCOPED_TRACE(testing::Message() << cpu::read_kernel_name(kernel) << ", threads " << threads);
      EXPECT_EQ(cpu::stream_read(v.data(), v.size(), kernel), 100006.0f);
      EXPECT_EQ(cpu::stream_read(v.data(), 7, kernel), 8.0f);
      EXPECT_EQ(cpu::stream_read(v.data(), 64 * 5 + 16 * 3 + 1, kernel), 370.0f);
      EXPECT_EQ(cpu::stream_read(v.data(), 50001, kernel), 50003.0f);
      EXPECT_EQ(cpu::stream_read(v.data(), 0, kernel), 0.0f);
    }
  omp_set_num_threads(2);
}

}  // namespace

TEST(SiluMul, AccurateOverTheWholeRangeAndShapeIndependent) {
  // The AVX-512 path has its own exp (simd.h exp16): check it far into both tails (below -88
  // expf overflows: silu is 0 within 1e-30, as with expf), on a length
  // with a masked tail, and that an element's result does not depend on where the call starts.
  const int n = 2000 + 7;
  std::vector<float> gate(n), up(n, 1.5f), out(n), part(n);
  for (int i = 0; i < n; ++i) gate[i] = -120.f + 240.f * static_cast<float>(i) / (n - 1);
  gate[3] = 0.f;
  gate[4] = -0.f;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    cpu::silu_mul(gate.data(), up.data(), out.data(), n);
    for (int i = 0; i < n; ++i) {
      const double g = gate[i];
      const double expected = g / (1.0 + std::exp(-g)) * 1.5;
      ASSERT_NEAR(out[i], expected, 4e-7 * std::fabs(expected) + 1e-30)
          << "gate " << gate[i] << " threads " << threads;
    }
    for (int start : {1, 5, 17}) {
      cpu::silu_mul(gate.data() + start, up.data() + start, part.data(), n - start);
      EXPECT_EQ(first_difference(part.data(), out.data() + start, n - start), -1)
          << "start " << start;
    }
  }
}
