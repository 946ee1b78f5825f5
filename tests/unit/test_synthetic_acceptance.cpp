// decode.acceptance (spec/synthetic_acceptance.h): parsing, fixed lengths capped by the depth,
// and per-position rates whose accepted lengths follow the given conditional probabilities.
#include <gtest/gtest.h>

#include "common/error.h"
#include "spec/synthetic_acceptance.h"

using namespace specrun;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_synthetic_acceptance(text);
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(SyntheticAcceptance, Parsing) {
  EXPECT_FALSE(parse_synthetic_acceptance("real").synthetic());
  const SyntheticAcceptance f = parse_synthetic_acceptance("fixed:3");
  EXPECT_EQ(f.kind, SyntheticAcceptance::Kind::kFixed);
  EXPECT_EQ(f.fixed, 3);
  const SyntheticAcceptance r = parse_synthetic_acceptance("rates:0.9,0.5,0");
  EXPECT_EQ(r.rates, (std::vector<double>{0.9, 0.5, 0.0}));
  EXPECT_NE(error_of("fixed:2.5").find("an integer in [0, 16]"), std::string::npos);
  EXPECT_NE(error_of("fixed:17").find("an integer in [0, 16]"), std::string::npos);
  EXPECT_NE(error_of("rates:0.5,1.5").find("rate 1.5 is not in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of("rates:0.5,,0.1").find("'' is not a number"), std::string::npos);
  EXPECT_NE(error_of("sometimes").find("expected real, fixed:L"), std::string::npos);
}

TEST(SyntheticAcceptance, FixedLengthIsCappedByTheDepth) {
  const SyntheticAcceptance f = parse_synthetic_acceptance("fixed:3");
  const SeqRandKey key{1, 2};
  EXPECT_EQ(synthetic_accepted(f, key, 10, 5), 3);
  EXPECT_EQ(synthetic_accepted(f, key, 10, 2), 2);
  EXPECT_EQ(synthetic_accepted(f, key, 10, 0), 0);
}

TEST(SyntheticAcceptance, RatesAreConditionalProbabilitiesAndSeeded) {
  const SyntheticAcceptance r = parse_synthetic_acceptance("rates:0.8,0.5");
  const int n = 20000, depth = 4;
  std::vector<int> at_least(depth + 1, 0);
  for (int i = 0; i < n; ++i) {
    const SeqRandKey key{7, static_cast<std::uint64_t>(i)};
    const int a = synthetic_accepted(r, key, 100, depth);
    ASSERT_GE(a, 0);
    ASSERT_LE(a, depth);
    for (int j = 0; j <= a; ++j) ++at_least[j];
    EXPECT_EQ(a, synthetic_accepted(r, key, 100, depth));  // the same stream, the same length
  }
  // P(a >= 1) = 0.8, P(a >= 2) = 0.4, then the last rate (0.5) repeats: 0.2, 0.1.
  const double expected[] = {1.0, 0.8, 0.4, 0.2, 0.1};
  for (int j = 0; j <= depth; ++j)
    EXPECT_NEAR(static_cast<double>(at_least[j]) / n, expected[j], 0.015) << "position " << j;
}

}  // namespace
