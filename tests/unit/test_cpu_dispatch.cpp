// The CPU kernel variants and their run-time choice (kernels/cpu/isa.h, dispatch.h): names, what
// the CPU supports against CPUID and XGETBV read by the test itself (an independent reading,
// cpuid_reading.h), the table in use, and every variant this CPU runs, called through its own
// table in one process: each matches a double-precision reference, and the two FMA variants
// (avx2, avx512) agree bitwise on matmul.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_data.h"
#include "cpuid_reading.h"
#include "kernels/cpu/dispatch.h"

namespace cpu = specrun::cpu;
using specrun::DType;
using specrun::test::make_weights;
using specrun::test::pack;
using specrun::test::random_vector;

namespace {

std::vector<cpu::Isa> runnable() {
  std::vector<cpu::Isa> v;
  for (cpu::Isa isa : cpu::built_isas())
    if (cpu::cpu_supports(isa)) v.push_back(isa);
  return v;
}

}  // namespace

TEST(CpuIsa, NamesRoundTripAndOthersAreRejected) {
  for (cpu::Isa isa : cpu::built_isas()) {
    ASSERT_TRUE(cpu::parse_isa(cpu::isa_name(isa)).has_value()) << cpu::isa_name(isa);
    EXPECT_EQ(*cpu::parse_isa(cpu::isa_name(isa)), isa);
    EXPECT_NE(cpu::kernels_for(isa), nullptr) << cpu::isa_name(isa);
  }
  for (const char* bad : {"", "AVX2", "avx", "avx512bf16", "native", "x86-64-v3", "avx2 "})
    EXPECT_FALSE(cpu::parse_isa(bad).has_value()) << "'" << bad << "'";
  EXPECT_EQ(cpu::built_isas().front(), cpu::Isa::kBaseline);
}

TEST(CpuIsa, SupportAgreesWithCpuid) {
  EXPECT_TRUE(cpu::cpu_supports(cpu::Isa::kBaseline));
  EXPECT_EQ(cpu::missing_features(cpu::Isa::kBaseline), "");
#if defined(__x86_64__)
  const specrun::test::CpuidReading cpuid = specrun::test::read_cpuid();
  const std::string reading = "CPUID says: " + cpuid.describe();
  EXPECT_EQ(cpu::cpu_supports(cpu::Isa::kAvx2), cpuid.avx2()) << reading;
  EXPECT_EQ(cpu::cpu_supports(cpu::Isa::kAvx512), cpuid.avx512()) << reading;
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    EXPECT_EQ(cpu::missing_features(isa).empty(), cpu::cpu_supports(isa))
        << cpu::isa_name(isa) << ": missing '" << cpu::missing_features(isa) << "'";
  }
  // The message names what CPUID lacks (the AVX-512 features are spelled alike in both).
  for (const std::string& f : cpuid.lacking_v4)
    if (f.rfind("avx512", 0) == 0) {
      EXPECT_NE(cpu::missing_features(cpu::Isa::kAvx512).find(f), std::string::npos) << f;
    }
  EXPECT_STREQ(cpu::isa_name(cpu::best_isa()), cpuid.best()) << reading;
#endif
}

TEST(CpuIsa, TheTableInUseIsTheChosenVariant) {
  const cpu::KernelChoice& c = cpu::select_kernels();
  EXPECT_EQ(&cpu::kernels(), cpu::kernels_for(c.isa));
  EXPECT_TRUE(cpu::cpu_supports(c.isa));
  EXPECT_EQ(c.best, cpu::best_isa());
  if (!c.forced) {
    EXPECT_EQ(c.isa, c.best);
  }
  EXPECT_NE(cpu::describe_kernel_choice().find(cpu::isa_name(c.isa)), std::string::npos);
  // The tables of different variants are different code.
  for (cpu::Isa a : cpu::built_isas())
    for (cpu::Isa b : cpu::built_isas()) {
      if (a == b) continue;
      EXPECT_NE(cpu::kernels_for(a)->matmul_multi, cpu::kernels_for(b)->matmul_multi)
          << cpu::isa_name(a) << " and " << cpu::isa_name(b);
    }
}

// Every runnable variant, through its own table: matmul in each dtype and token count against a
// double reference (tolerance from the inputs' magnitudes: |x| |w| sqrt(in) * 2^-20), softmax
// and silu against double formulas.
TEST(KernelVariants, EveryRunnableVariantMatchesTheReference) {
  std::mt19937 rng(7);
  const int in = 300, out = 77;
  omp_set_num_threads(2);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto w = make_weights(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
    const auto packed = pack(w.bytes.data(), t, out, in);
    for (int n : {1, 2, 4, 7, 13}) {
      const auto x = random_vector(static_cast<std::size_t>(n) * in, rng);
      for (cpu::Isa isa : runnable()) {
        std::vector<float> y(static_cast<std::size_t>(n) * out);
        cpu::kernels_for(isa)->matmul(x.data(), n, packed.view, nullptr, y.data());
        for (int i = 0; i < n; ++i)
          for (int o = 0; o < out; ++o) {
            double ref = 0;
            for (int k = 0; k < in; ++k) ref += double{x[i * in + k]} * w.widened[o * in + k];
            ASSERT_NEAR(y[i * out + o], ref, 1.0 * 0.1 * std::sqrt(in) * 1e-5)
                << cpu::isa_name(isa) << " " << specrun::dtype_name(t) << " tokens " << n
                << " token " << i << " row " << o;
          }
      }
    }
  }
  for (cpu::Isa isa : runnable()) {
    std::vector<float> s = random_vector(37, rng, 3.0f), ref(s.size());
    double max = -1e30, sum = 0;
    for (float v : s) max = std::max(max, double{v});
    for (std::size_t i = 0; i < s.size(); ++i) sum += ref[i] = std::exp(s[i] - max);
    cpu::kernels_for(isa)->softmax(s.data(), static_cast<int>(s.size()));
    for (std::size_t i = 0; i < s.size(); ++i)
      ASSERT_NEAR(s[i], ref[i] / sum, 1e-6) << cpu::isa_name(isa) << " softmax element " << i;
    std::vector<float> g = random_vector(21, rng, 4.0f), u = random_vector(21, rng), o(21);
    cpu::kernels_for(isa)->silu_mul(g.data(), u.data(), o.data(), g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double e = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
      ASSERT_NEAR(o[i], e, 4e-7 * std::fabs(e) + 1e-30) << cpu::isa_name(isa) << " silu " << i;
    }
  }
}

// avx2 and avx512 form every (row, token) sum the same way (kernels/cpu/matmul.cpp): their
// matmuls, fused SwiGLU included, agree bitwise. Needs a CPU with AVX-512.
TEST(KernelVariants, Avx2AndAvx512MatmulsAgreeBitwise) {
  if (!cpu::cpu_supports(cpu::Isa::kAvx512))
    GTEST_SKIP() << "this CPU has no AVX-512 (lacks " << cpu::missing_features(cpu::Isa::kAvx512)
                 << ")";
  std::mt19937 rng(11);
  const int in = 333, out = 205;  // tails in the last block and in the last 128-input chunk
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto g = make_weights(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
    const auto u = make_weights(random_vector(static_cast<std::size_t>(out) * in, rng, 0.1f), t);
    const auto pg = pack(g.bytes.data(), t, out, in);
    std::vector<std::uint8_t> pairs(2 * cpu::packed_weight_bytes(t, out, in));
    cpu::pack_weight_pairs(g.bytes.data(), u.bytes.data(), t, out, in, pairs.data());
    for (int n : {1, 2, 3, 5, 6, 7, 12, 13, 40}) {
      const auto x = random_vector(static_cast<std::size_t>(n) * in, rng);
      for (bool swiglu : {false, true}) {
        std::vector<float> a(static_cast<std::size_t>(n) * out), b(a.size(), -1.f);
        cpu::MatmulOutput o{swiglu ? cpu::PackedWeights{pairs.data(), t, out, in} : pg.view,
                            nullptr, a.data()};
        o.swiglu = swiglu;
        cpu::kernels_for(cpu::Isa::kAvx2)->matmul_multi(x.data(), n, &o, 1);
        o.y = b.data();
        cpu::kernels_for(cpu::Isa::kAvx512)->matmul_multi(x.data(), n, &o, 1);
        for (std::size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(a[i], b[i]) << specrun::dtype_name(t) << " tokens " << n
                                << (swiglu ? " swiglu" : "") << ": token " << i / out << " row "
                                << i % out;
      }
    }
  }
}
