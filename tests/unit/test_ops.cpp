// CPU ops against straightforward reference implementations written here (double precision,
// the formulas as the op header states them), on random inputs.
//
// Tolerances: float32 accumulation over n terms differs from the double reference by at most
// about n * 2^-24 * sum|x_i * w_i|; we allow 1e-5 relative to that sum of magnitudes (plus a
// tiny absolute floor). Low-precision weights are compared with a reference that uses the same
// BF16/F16 values widened to float32, so the tolerance is the same as for F32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu_test_data.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/ops.h"

using specrun::DType;
namespace cpu = specrun::cpu;

namespace {

using specrun::test::make_weights;
using specrun::test::random_vector;
using specrun::test::Weights;

// Asserts |actual - expected| <= rel * magnitude + abs_floor element-wise and reports the worst.
void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                  const std::vector<double>& magnitude, double rel, double abs_floor,
                  const char* what) {
  ASSERT_EQ(actual.size(), expected.size());
  double worst = 0;
  std::size_t worst_i = 0;
  bool ok = true;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    const double allowed = rel * magnitude[i] + abs_floor;
    if (err > allowed) ok = false;
    if (err - allowed > worst - (rel * magnitude[worst_i] + abs_floor)) {
      worst = err;
      worst_i = i;
    }
  }
  EXPECT_TRUE(ok) << what << ": worst element " << worst_i << " expected " << expected[worst_i]
                  << " actual " << actual[worst_i] << " (error " << worst << ", allowed "
                  << rel * magnitude[worst_i] + abs_floor << ")";
}

void check_matmul(int n_tokens, int in, int out, DType t, bool with_bias, unsigned seed) {
  std::mt19937 rng(seed);
  auto x = random_vector(static_cast<std::size_t>(n_tokens) * in, rng);
  Weights w = make_weights(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
  auto bias = random_vector(out, rng);
  std::vector<float> y(static_cast<std::size_t>(n_tokens) * out, std::nanf(""));
  const auto packed = specrun::test::pack(w.bytes.data(), t, out, in);
  cpu::matmul(x.data(), n_tokens, packed.view, with_bias ? bias.data() : nullptr, y.data());

  std::vector<double> expected(y.size()), magnitude(y.size());
  for (int tk = 0; tk < n_tokens; ++tk)
    for (int o = 0; o < out; ++o) {
      double s = with_bias ? bias[o] : 0.0, m = with_bias ? std::fabs(bias[o]) : 0.0;
      for (int i = 0; i < in; ++i) {
        const double p = static_cast<double>(x[tk * in + i]) * w.widened[o * in + i];
        s += p;
        m += std::fabs(p);
      }
      expected[tk * out + o] = s;
      magnitude[tk * out + o] = m;
    }
  expect_close(y, expected, magnitude, 1e-5, 1e-7, specrun::dtype_name(t));
}

}  // namespace

TEST(Matmul, F32MatchesReference) {
  check_matmul(1, 64, 32, DType::kF32, false, 1);
  check_matmul(1, 67, 37, DType::kF32, true, 2);  // tails in both dimensions
  check_matmul(5, 67, 37, DType::kF32, true, 3);
  check_matmul(9, 256, 130, DType::kF32, false, 4);
  check_matmul(20, 130, 70, DType::kF32, true, 41);  // prefill token tiles
}

TEST(Matmul, Bf16WeightsMatchWidenedReference) {
  check_matmul(1, 128, 64, DType::kBF16, false, 5);
  check_matmul(1, 45, 11, DType::kBF16, true, 6);
  check_matmul(7, 45, 11, DType::kBF16, true, 7);
  check_matmul(4, 512, 96, DType::kBF16, false, 8);
  check_matmul(20, 130, 70, DType::kBF16, true, 81);
  check_matmul(3, 2048, 40, DType::kBF16, false, 82);  // 16 partial sums per output
}

TEST(Matmul, F16WeightsMatchWidenedReference) {
  check_matmul(1, 64, 32, DType::kF16, false, 9);
  check_matmul(6, 33, 21, DType::kF16, true, 10);
  check_matmul(20, 130, 70, DType::kF16, true, 101);
}

TEST(Matmul, ManyTokensEqualOneAtATime) {
  // The verify path (T > 1) and the decode path (T = 1) use different loops; both must agree.
  std::mt19937 rng(11);
  const int n_tokens = 5, in = 96, out = 50;
  auto x = random_vector(n_tokens * in, rng);
  Weights w = make_weights(random_vector(out * in, rng, 0.1f), DType::kBF16);
  std::vector<float> batched(n_tokens * out), single(out);
  const auto packed = specrun::test::pack(w.bytes.data(), DType::kBF16, out, in);
  cpu::matmul(x.data(), n_tokens, packed.view, nullptr, batched.data());
  for (int t = 0; t < n_tokens; ++t) {
    cpu::matmul(x.data() + t * in, 1, packed.view, nullptr, single.data());
    for (int o = 0; o < out; ++o)
      EXPECT_NEAR(batched[t * out + o], single[o], 1e-5 * (1 + std::fabs(single[o])))
          << "token " << t << " row " << o;
  }
}

TEST(GatherRows, CopiesOwnedRowsAndZerosOthers) {
  std::mt19937 rng(12);
  const int vocab = 10, dim = 19;
  Weights table = make_weights(random_vector(vocab * dim, rng), DType::kBF16);
  const std::vector<std::int32_t> ids = {3, 0, 9, 3, 5};
  std::vector<float> full(ids.size() * dim), sum(ids.size() * dim, 0.f);
  cpu::gather_rows(table.bytes.data(), DType::kBF16, 0, vocab, dim, ids.data(), 5, full.data());
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (int i = 0; i < dim; ++i) EXPECT_EQ(full[t * dim + i], table.widened[ids[t] * dim + i]);
  // Two shards of 5 rows each: each fills its own rows; the sum is the full lookup, exactly.
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<float> part(ids.size() * dim, std::nanf(""));
    cpu::gather_rows(table.bytes.data() + shard * 5 * dim * 2, DType::kBF16, shard * 5, 5, dim,
                     ids.data(), 5, part.data());
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const bool owned = ids[t] / 5 == shard;
      for (int i = 0; i < dim; ++i) {
        if (!owned) {
          EXPECT_EQ(part[t * dim + i], 0.f);
        }
        sum[t * dim + i] += part[t * dim + i];
      }
    }
  }
  EXPECT_EQ(sum, full);
}

TEST(GatherRows, PackedTableGivesTheSameRows) {
  // A tied embedding reads lm_head's packed copy: rows in every slot of a block (BF16 interleaves
  // rows j and j + 16), a partly filled last block, and ids outside the shard.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::mt19937 rng(16);
    const int vocab = 70, dim = 37, row_begin = 100;
    Weights table = make_weights(random_vector(vocab * dim, rng), t);
    const auto packed = specrun::test::pack(table.bytes.data(), t, vocab, dim);
    std::vector<std::int32_t> ids;
    for (int r = 0; r < vocab; ++r) ids.push_back(row_begin + r);
    for (int id : {0, 99, 170, 171}) ids.push_back(id);
    const int n = static_cast<int>(ids.size());
    std::vector<float> plain(static_cast<std::size_t>(n) * dim), from_packed(plain.size(), 1.f);
    cpu::gather_rows(table.bytes.data(), t, row_begin, vocab, dim, ids.data(), n, plain.data());
    cpu::gather_rows_packed(packed.view, row_begin, ids.data(), n, from_packed.data());
    EXPECT_EQ(from_packed, plain) << specrun::dtype_name(t);
    EXPECT_EQ(plain[static_cast<std::size_t>(n - 1) * dim], 0.f);  // id 171: outside the shard
  }
}

TEST(RmsNorm, MatchesReference) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(13);
    const int n_tokens = 3, dim = 75;
    const float eps = 1e-5f;
    auto x = random_vector(n_tokens * dim, rng, 2.0f);
    Weights w = make_weights(random_vector(dim, rng), t);
    std::vector<float> y(x.size());
    cpu::rmsnorm(x.data(), n_tokens, dim, w.bytes.data(), t, eps, y.data());
    std::vector<double> expected(y.size()), magnitude(y.size());
    for (int tk = 0; tk < n_tokens; ++tk) {
      double ms = 0;
      for (int i = 0; i < dim; ++i) ms += static_cast<double>(x[tk * dim + i]) * x[tk * dim + i];
      const double r = 1.0 / std::sqrt(ms / dim + eps);
      for (int i = 0; i < dim; ++i) {
        expected[tk * dim + i] = x[tk * dim + i] * r * w.widened[i];
        magnitude[tk * dim + i] = std::fabs(expected[tk * dim + i]);
      }
    }
    expect_close(y, expected, magnitude, 1e-5, 1e-7, "rmsnorm");
    // In place gives the same result.
    cpu::rmsnorm(x.data(), n_tokens, dim, w.bytes.data(), t, eps, x.data());
    EXPECT_EQ(x, y);
  }
}

TEST(RmsNorm, FusedAddEqualsAddThenNorm) {
  // Prefill-sized (threaded) and decode-sized calls, each dtype: bitwise add_inplace + rmsnorm.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int n_tokens : {1, 60}) {
      std::mt19937 rng(15);
      const int dim = 600;
      const auto x0 = random_vector(static_cast<std::size_t>(n_tokens) * dim, rng, 2.0f);
      const auto delta = random_vector(x0.size(), rng);
      Weights w = make_weights(random_vector(dim, rng), t);
      auto x_fused = x0, x_apart = x0;
      std::vector<float> y_fused(x0.size()), y_apart(x0.size());
      cpu::add_rmsnorm(x_fused.data(), delta.data(), n_tokens, dim, w.bytes.data(), t, 1e-6f,
                       y_fused.data());
      cpu::add_inplace(x_apart.data(), delta.data(), x_apart.size());
      cpu::rmsnorm(x_apart.data(), n_tokens, dim, w.bytes.data(), t, 1e-6f, y_apart.data());
      EXPECT_EQ(x_fused, x_apart) << specrun::dtype_name(t) << " tokens " << n_tokens;
      EXPECT_EQ(y_fused, y_apart) << specrun::dtype_name(t) << " tokens " << n_tokens;
    }
  }
}

TEST(Rope, MatchesRotateHalfReference) {
  std::mt19937 rng(14);
  const int n_tokens = 4, n_heads = 3, head_dim = 16, stride = n_heads * head_dim + 5;
  std::vector<float> inv_freq(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j)
    inv_freq[j] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * j / head_dim));
  const std::vector<std::int32_t> positions = {0, 7, 8, 1000};
  auto x = random_vector(n_tokens * stride, rng);
  auto y = x;
  cpu::rope(y.data(), n_tokens, n_heads, head_dim, stride, inv_freq.data(), positions.data());

  // Reference: q*cos + rotate_half(q)*sin, cos/sin = cat(freqs, freqs), rotate_half(q) =
  // cat(-q[d/2:], q[:d/2]). Padding columns past n_heads*head_dim are untouched.
  std::vector<double> expected(x.size()), magnitude(x.size());
  for (int t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < stride; ++i) {
      expected[t * stride + i] = x[t * stride + i];
      magnitude[t * stride + i] = 1.0;
    }
    for (int h = 0; h < n_heads; ++h) {
      const float* q = &x[t * stride + h * head_dim];
      for (int i = 0; i < head_dim; ++i) {
        const double angle = static_cast<float>(positions[t]) * inv_freq[i % (head_dim / 2)];
        const double rotated = i < head_dim / 2 ? -q[i + head_dim / 2] : q[i - head_dim / 2];
        expected[t * stride + h * head_dim + i] =
            q[i] * std::cos(angle) + rotated * std::sin(angle);
      }
    }
  }
  expect_close(y, expected, magnitude, 2e-6, 0, "rope");
}

namespace {

// Naive causal GQA for one query window in float64: query i at position start + i; queries and
// keys kd wide per head, values and outputs vd.
std::vector<double> reference_attention(const std::vector<float>& q, int n_tokens, int n_heads,
                                        int n_kv, int kd, int vd, const std::vector<float>& k,
                                        const std::vector<float>& v, int start) {
  std::vector<double> out(static_cast<std::size_t>(n_tokens) * n_heads * vd, 0.0);
  for (int t = 0; t < n_tokens; ++t)
    for (int h = 0; h < n_heads; ++h) {
      const int g = h / (n_heads / n_kv);
      const int n_keys = start + t + 1;
      std::vector<double> s(n_keys);
      double mx = -1e300, sum = 0;
      for (int p = 0; p < n_keys; ++p) {
        double d = 0;
        for (int i = 0; i < kd; ++i)
          d += static_cast<double>(q[(static_cast<std::size_t>(t) * n_heads + h) * kd + i]) *
               k[(static_cast<std::size_t>(p) * n_kv + g) * kd + i];
        s[p] = d / std::sqrt(static_cast<double>(kd));
        mx = std::max(mx, s[p]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int p = 0; p < n_keys; ++p)
        for (int i = 0; i < vd; ++i)
          out[(static_cast<std::size_t>(t) * n_heads + h) * vd + i] +=
              s[p] / sum * v[(static_cast<std::size_t>(p) * n_kv + g) * vd + i];
    }
  return out;
}

}  // namespace

TEST(Attention, CausalGqaMatchesReference) {
  std::mt19937 rng(15);
  const int n_heads = 8, n_kv = 2, hd = 32, start = 6, n_tokens = 5, len = start + n_tokens;
  auto q = random_vector(n_tokens * n_heads * hd, rng);
  auto k = random_vector(len * n_kv * hd, rng);
  auto v = random_vector(len * n_kv * hd, rng);
  std::vector<float> out(q.size());
  cpu::attention(q.data(), n_tokens, n_heads, n_kv, hd, hd, k.data(), v.data(), start, out.data());
  auto expected = reference_attention(q, n_tokens, n_heads, n_kv, hd, hd, k, v, start);
  // Outputs are convex combinations of v rows: magnitude max|v| bounds each.
  std::vector<double> magnitude(out.size(), 4.0);
  expect_close(out, expected, magnitude, 1e-5, 0, "attention");
}

// Keys (and queries) of one width, values (and outputs) of another, as MLA has (192 and 128):
// each stride and the 1/sqrt(key width) scale must follow its own width. Far from position 0
// (over a thousand keys per query: the scores and the weighted sum run in several chunks), with
// key width above and below the value width, both off the 16-lane grid, and windows that fill
// and do not fill a block of 4 queries.
TEST(Attention, KeyAndValueWidthsMayDifferFarFromPositionZero) {
  std::mt19937 rng(19);
  struct Shape {
    int kd, vd, start, n_tokens;
  };
  for (const Shape& sh : {Shape{48, 24, 1500, 6}, Shape{24, 40, 1203, 3}, Shape{40, 8, 999, 1}}) {
    const int n_heads = 6, n_kv = 2, len = sh.start + sh.n_tokens;
    auto q = random_vector(static_cast<std::size_t>(sh.n_tokens) * n_heads * sh.kd, rng);
    auto k = random_vector(static_cast<std::size_t>(len) * n_kv * sh.kd, rng);
    auto v = random_vector(static_cast<std::size_t>(len) * n_kv * sh.vd, rng);
    // Canaries past the output rows: a wrong output stride writes into them.
    std::vector<float> out(static_cast<std::size_t>(sh.n_tokens) * n_heads * sh.vd + 64, 7.0f);
    cpu::attention(q.data(), sh.n_tokens, n_heads, n_kv, sh.kd, sh.vd, k.data(), v.data(), sh.start,
                   out.data());
    for (std::size_t i = out.size() - 64; i < out.size(); ++i)
      ASSERT_EQ(out[i], 7.0f) << "kd " << sh.kd << " vd " << sh.vd << ": wrote past the output";
    out.resize(out.size() - 64);
    const auto expected =
        reference_attention(q, sh.n_tokens, n_heads, n_kv, sh.kd, sh.vd, k, v, sh.start);
    std::vector<double> magnitude(out.size(), 4.0);
    const std::string what =
        "attention kd " + std::to_string(sh.kd) + " vd " + std::to_string(sh.vd);
    expect_close(out, expected, magnitude, 1e-5, 0, what.c_str());
  }
}

TEST(Attention, FutureKeysAreIgnored) {
  // Garbage past position start + i must not change query i's output.
  std::mt19937 rng(16);
  const int n_heads = 4, n_kv = 4, hd = 8, start = 3, n_tokens = 2, cap = 10;
  auto q = random_vector(n_tokens * n_heads * hd, rng);
  auto k = random_vector(cap * n_kv * hd, rng);
  auto v = random_vector(cap * n_kv * hd, rng);
  std::vector<float> a(q.size()), b(q.size());
  cpu::attention(q.data(), n_tokens, n_heads, n_kv, hd, hd, k.data(), v.data(), start, a.data());
  for (std::size_t i = (start + n_tokens) * n_kv * hd; i < k.size(); ++i) k[i] = v[i] = 1e6f;
  cpu::attention(q.data(), n_tokens, n_heads, n_kv, hd, hd, k.data(), v.data(), start, b.data());
  EXPECT_EQ(a, b);
}

TEST(Attention, VerifyWindowEqualsTokenByToken) {
  std::mt19937 rng(17);
  const int n_heads = 6, n_kv = 3, hd = 16, start = 9, window = 4, len = start + window;
  auto q = random_vector(window * n_heads * hd, rng);
  auto k = random_vector(len * n_kv * hd, rng);
  auto v = random_vector(len * n_kv * hd, rng);
  std::vector<float> together(q.size()), one(n_heads * hd);
  cpu::attention(q.data(), window, n_heads, n_kv, hd, hd, k.data(), v.data(), start,
                 together.data());
  for (int i = 0; i < window; ++i) {
    cpu::attention(q.data() + i * n_heads * hd, 1, n_heads, n_kv, hd, hd, k.data(), v.data(),
                   start + i, one.data());
    for (int j = 0; j < n_heads * hd; ++j)
      EXPECT_NEAR(together[i * n_heads * hd + j], one[j], 1e-6) << "token " << i << " elem " << j;
  }
}

TEST(Activation, SiluMulAndAdd) {
  std::mt19937 rng(18);
  const int n = 100;
  auto gate = random_vector(n, rng, 3.0f), up = random_vector(n, rng);
  std::vector<float> out(n);
  cpu::silu_mul(gate.data(), up.data(), out.data(), n);
  std::vector<double> expected(n), magnitude(n);
  for (int i = 0; i < n; ++i) {
    expected[i] = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i];
    magnitude[i] = std::fabs(expected[i]);
  }
  expect_close(out, expected, magnitude, 1e-5, 1e-7, "silu_mul");

  auto y = up;
  cpu::add_inplace(y.data(), gate.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], up[i] + gate[i]);
}

TEST(Argmax, LowestIndexWinsTies) {
  std::vector<float> x = {1.f, 3.f, -2.f, 3.f, 0.f};
  EXPECT_EQ(cpu::argmax(x.data(), 5), 1);
  x[4] = 3.5f;
  EXPECT_EQ(cpu::argmax(x.data(), 5), 4);
  std::vector<float> with_nan = {std::nanf(""), -1.f, 2.f, std::nanf(""), 2.f};
  EXPECT_EQ(cpu::argmax(with_nan.data(), 5), 2);
  std::vector<float> all_equal(7, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::argmax(all_equal.data(), 7), 0);
}

TEST(Softmax, MatchesReferenceAndIsStable) {
  std::mt19937 rng(19);
  auto x = random_vector(300, rng, 5.0f);
  x[7] = 1000.f;  // would overflow without the max shift
  auto y = x;
  cpu::softmax(y.data(), 300);
  double mx = 1000.0, sum = 0;
  for (float e : x) sum += std::exp(e - mx);
  std::vector<double> expected(300), magnitude(300);
  for (int i = 0; i < 300; ++i) {
    expected[i] = std::exp(x[i] - mx) / sum;
    magnitude[i] = expected[i];
  }
  expect_close(y, expected, magnitude, 1e-5, 1e-12, "softmax");
}
