#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "common/error.h"
#include "spec/rng.h"

using specrun::philox4x32_10;
using specrun::RandPurpose;
using specrun::uniform;

namespace {

using Words = std::array<std::uint32_t, 4>;

constexpr RandPurpose kAllPurposes[] = {RandPurpose::kDraftSample, RandPurpose::kAccept,
                                        RandPurpose::kResidual, RandPurpose::kBonus,
                                        RandPurpose::kTargetSample};

}  // namespace

// Random123's published known-answer vectors for Philox4x32-10 (tests/kat_vectors in its
// distribution): counter words, key words, expected output.
TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                          {0xffffffffu, 0xffffffffu}),
            (Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  // The "pi digits" vector.
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          {0xa4093822u, 0x299f31d0u}),
            (Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(CounterRng, SameKeySameNumber) {
  for (RandPurpose purpose : kAllPurposes) {
    const double a = uniform(1234, 77, 501, purpose, 3);
    const double b = uniform(1234, 77, 501, purpose, 3);
    EXPECT_EQ(a, b);
    const specrun::SeqRandKey key{1234, 77};
    EXPECT_EQ(key.uniform(501, purpose, 3), a);
  }
}

TEST(CounterRng, EveryCounterFieldAndTheSeedChangeTheNumber) {
  // A grid over all fields (and a few seeds, prompt ids past 2^32): with 53-bit values, any
  // repeat means two fields alias onto the same counter.
  std::set<double> seen;
  std::size_t draws = 0;
  const std::uint64_t seeds[] = {0, 1, 0x100000000ull};
  const std::uint64_t prompts[] = {0, 1, 2, 0x100000000ull, 0x100000001ull};
  for (std::uint64_t seed : seeds) {
    for (std::uint64_t prompt : prompts) {
      for (std::int64_t position = 0; position < 64; ++position) {
        for (RandPurpose purpose : kAllPurposes) {
          for (std::uint32_t draw = 0; draw < 3; ++draw) {
            seen.insert(uniform(seed, prompt, position, purpose, draw));
            ++draws;
          }
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), draws);
}

TEST(CounterRng, RangeMeanVarianceAndBins) {
  const int n = 1'000'000;
  double sum = 0.0, sum_sq = 0.0;
  std::vector<int> bins(16, 0);
  int below_2_32_grid = 0;  // values that are multiples of 2^-32 (would mean only 32 bits)
  for (int i = 0; i < n; ++i) {
    const double u =
        uniform(42, static_cast<std::uint64_t>(i % 100), i / 100, RandPurpose::kAccept);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum_sq += u * u;
    ++bins[static_cast<int>(u * 16)];
    const double scaled = u * 4294967296.0;
    if (scaled == std::floor(scaled)) ++below_2_32_grid;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // Standard error of the mean: sqrt(1/12/n) = 2.9e-4; of the variance: sqrt(1/180/n) = 7.5e-5.
  EXPECT_NEAR(mean, 0.5, 5 * 2.9e-4);
  EXPECT_NEAR(var, 1.0 / 12.0, 5 * 7.5e-5);
  // Chi-square with 15 degrees of freedom; 37.70 is the 0.001 upper critical value.
  double chi2 = 0.0;
  const double expected = n / 16.0;
  for (int c : bins) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 37.70);
  // With 53 bits, about 2^-21 of the values land on the 2^-32 grid.
  EXPECT_LT(below_2_32_grid, 10);
}

TEST(CounterRng, NeighbouringPositionsAndPurposesAreUncorrelated) {
  const int n = 200'000;
  // Pearson correlation between (position, position+1) and between kAccept and kResidual at the
  // same position; |r| should be about 1/sqrt(n) = 2.2e-3.
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  double tx = 0, ty = 0, txx = 0, tyy = 0, txy = 0;
  for (int i = 0; i < n; ++i) {
    const double a = uniform(7, 3, i, RandPurpose::kAccept);
    const double b = uniform(7, 3, i + 1, RandPurpose::kAccept);
    const double c = uniform(7, 3, i, RandPurpose::kResidual);
    sx += a, sy += b, sxx += a * a, syy += b * b, sxy += a * b;
    tx += a, ty += c, txx += a * a, tyy += c * c, txy += a * c;
  }
  auto corr = [=](double x, double y, double xx, double yy, double xy) {
    const double cov = xy / n - (x / n) * (y / n);
    return cov / std::sqrt((xx / n - (x / n) * (x / n)) * (yy / n - (y / n) * (y / n)));
  };
  EXPECT_LT(std::fabs(corr(sx, sy, sxx, syy, sxy)), 5.0 / std::sqrt(n));
  EXPECT_LT(std::fabs(corr(tx, ty, txx, tyy, txy)), 5.0 / std::sqrt(n));
}

TEST(CounterRng, WordsToUniformBoundaries) {
  EXPECT_EQ(specrun::words_to_uniform(0, 0), 0.0);
  const double top = specrun::words_to_uniform(0xffffffffu, 0xffffffffu);
  EXPECT_LT(top, 1.0);
  EXPECT_EQ(top, 1.0 - 0x1.0p-53);
  EXPECT_EQ(specrun::words_to_uniform(0x80000000u, 0), 0.5);
}

TEST(CounterRng, RejectsOutOfRangeCounters) {
  EXPECT_THROW(uniform(1, 1, -1, RandPurpose::kAccept), specrun::Error);
  EXPECT_THROW(uniform(1, 1, std::int64_t{1} << 32, RandPurpose::kAccept), specrun::Error);
  EXPECT_THROW(uniform(1, 1, 0, RandPurpose::kAccept, specrun::kMaxDrawIndex + 1), specrun::Error);
  EXPECT_NO_THROW(uniform(1, 1, 0xffffffffll, RandPurpose::kAccept, specrun::kMaxDrawIndex));
}
