#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "spec/rng.h"
#include "spec/sampling.h"

using specrun::argmax;
using specrun::sample_from;
using specrun::Sampler;
using specrun::SamplingParams;

namespace {

// Tolerance for probabilities built from float exponentials and renormalised in double.
constexpr float kProbTol = 2e-6f;

std::vector<float> transform(const std::vector<float>& logits, float temperature, int top_k = 0,
                             float top_p = 1.0f) {
  std::vector<float> probs(logits.size());
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  specrun::logits_to_probs(logits.data(), static_cast<int>(logits.size()), params, probs.data());
  return probs;
}

void expect_probs_at(int line, const std::vector<float>& actual,
                     const std::vector<double>& expected) {
  SCOPED_TRACE(testing::Message() << "expectation at line " << line);
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(actual[i], 0.0f) << "token " << i << " should have been removed";
    } else {
      EXPECT_NEAR(actual[i], expected[i], kProbTol) << "token " << i;
    }
  }
}

#define expect_probs(...) expect_probs_at(__LINE__, __VA_ARGS__)

// Logits whose softmax is exactly {1, 2, 3, 4} / 10.
const std::vector<float> kOneToFour = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};

}  // namespace

TEST(LogitsToProbs, SoftmaxOfKnownLogits) {
  expect_probs(transform(kOneToFour, 1.0f), {0.1, 0.2, 0.3, 0.4});
  // Huge logits do not overflow: the result is the softmax of the (rounded) float inputs,
  // computed here in double.
  std::vector<float> shifted = kOneToFour;
  for (float& l : shifted) l += 1000.0f;
  std::vector<double> expected(4);
  double total = 0.0;
  for (int i = 0; i < 4; ++i) total += expected[i] = std::exp(double{shifted[i]} - shifted[3]);
  for (double& e : expected) e /= total;
  expect_probs(transform(shifted, 1.0f), expected);
  expect_probs(transform({1000.0f, 0.0f}, 1.0f), {1.0, std::exp(-1000.0)});
}

TEST(LogitsToProbs, TemperatureDividesLogits) {
  // Doubling the logits and the temperature gives the same distribution.
  std::vector<float> doubled = kOneToFour;
  for (float& l : doubled) l *= 2.0f;
  expect_probs(transform(doubled, 2.0f), {0.1, 0.2, 0.3, 0.4});
  // Temperature 0.5 squares the ratios: {1, 4, 9, 16} / 30.
  expect_probs(transform(kOneToFour, 0.5f), {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0});
}

TEST(LogitsToProbs, TopK) {
  expect_probs(transform(kOneToFour, 1.0f, 2), {0, 0, 3 / 7.0, 4 / 7.0});
  expect_probs(transform(kOneToFour, 1.0f, 1), {0, 0, 0, 1});
  // k >= vocab is off.
  expect_probs(transform(kOneToFour, 1.0f, 4), {0.1, 0.2, 0.3, 0.4});
  expect_probs(transform(kOneToFour, 1.0f, 100), {0.1, 0.2, 0.3, 0.4});
  // Ties: the lower ids are kept.
  expect_probs(transform({1, 1, 1, 1}, 1.0f, 2), {0.5, 0.5, 0, 0});
  expect_probs(transform({0, 5, 0, 5, 0}, 1.0f, 1), {0, 1, 0, 0, 0});
}

TEST(LogitsToProbs, TopPKeepsSmallestPrefixReachingTheMass) {
  // Sorted: 0.4, 0.3, 0.2, 0.1. Cumulative: 0.4, 0.7, 0.9, 1.0.
  expect_probs(transform(kOneToFour, 1.0f, 0, 0.5f), {0, 0, 3 / 7.0, 4 / 7.0});
  expect_probs(transform(kOneToFour, 1.0f, 0, 0.75f), {0, 2 / 9.0, 3 / 9.0, 4 / 9.0});
  expect_probs(transform(kOneToFour, 1.0f, 0, 0.95f), {0.1, 0.2, 0.3, 0.4});
  // Always at least one token.
  expect_probs(transform(kOneToFour, 1.0f, 0, 0.01f), {0, 0, 0, 1});
  // Ties are walked in id order: with four equal tokens, top_p 0.6 keeps the first three.
  expect_probs(transform({2, 2, 2, 2}, 1.0f, 0, 0.6f), {1 / 3.0, 1 / 3.0, 1 / 3.0, 0});
}

TEST(LogitsToProbs, TopKIsAppliedBeforeTopP) {
  // Top-k 2 leaves {3/7, 4/7}; top-p 0.55 is then reached by token 3 alone (4/7 = 0.571).
  // (Top-p first, over the full distribution, would keep tokens 2 and 3.)
  expect_probs(transform(kOneToFour, 1.0f, 2, 0.55f), {0, 0, 0, 1});
  // Top-k 3 leaves {2,3,4}/9; top-p 0.5: 4/9 < 0.5 <= 7/9.
  expect_probs(transform(kOneToFour, 1.0f, 3, 0.5f), {0, 0, 3 / 7.0, 4 / 7.0});
}

TEST(LogitsToProbs, MaskedTokensAndBadInput) {
  const float inf = std::numeric_limits<float>::infinity();
  expect_probs(transform({-inf, 0.0f, 0.0f}, 0.7f), {0, 0.5, 0.5});
  expect_probs(transform({-inf, 0.0f, 0.0f}, 1.0f, 0, 0.3f), {0, 1, 0});
  EXPECT_THROW(transform({-inf, -inf}, 1.0f), specrun::Error);
  EXPECT_THROW(transform({0.0f, std::nanf("")}, 1.0f), specrun::Error);
  EXPECT_THROW(transform(kOneToFour, 0.0f), specrun::Error);
  EXPECT_THROW(transform(kOneToFour, 1.0f, -1), specrun::Error);
  EXPECT_THROW(transform(kOneToFour, 1.0f, 0, 0.0f), specrun::Error);
  EXPECT_THROW(transform(kOneToFour, 1.0f, 0, 1.5f), specrun::Error);
}

TEST(LogitsToProbs, LargeVocabularyTopKTopP) {
  // 32000 logits from the counter RNG; top-k 50 then top-p 0.9.
  const int vocab = 32000;
  std::vector<float> logits(vocab);
  for (int i = 0; i < vocab; ++i) {
    logits[i] = static_cast<float>(8.0 * specrun::uniform(5, 0, i, specrun::RandPurpose::kBonus));
  }
  std::vector<float> probs(vocab);
  Sampler sampler;
  SamplingParams params{0.8f, 50, 0.9f};
  sampler.logits_to_probs(logits.data(), vocab, params, probs.data());
  std::vector<int> by_logit(vocab);
  std::iota(by_logit.begin(), by_logit.end(), 0);
  std::sort(by_logit.begin(), by_logit.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const int kept =
      static_cast<int>(std::count_if(probs.begin(), probs.end(), [](float p) { return p > 0; }));
  EXPECT_GE(kept, 1);
  EXPECT_LE(kept, 50);
  double sum = 0.0;
  for (int j = 0; j < vocab; ++j) {
    const float p = probs[by_logit[j]];
    EXPECT_EQ(p > 0.0f, j < kept) << "kept tokens must be the " << kept << " largest logits";
    sum += p;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
  // The same Sampler reused for a different vocabulary gives the fresh result.
  std::vector<float> small(4);
  sampler.logits_to_probs(kOneToFour.data(), 4, SamplingParams{1.0f, 2, 1.0f}, small.data());
  expect_probs(small, {0, 0, 3 / 7.0, 4 / 7.0});
}

TEST(SampleFrom, InverseCdfBoundaries) {
  const std::vector<float> probs = {0.25f, 0.0f, 0.5f, 0.25f};
  EXPECT_EQ(sample_from(probs.data(), 4, 0.0), 0);
  EXPECT_EQ(sample_from(probs.data(), 4, 0.2499999), 0);
  EXPECT_EQ(sample_from(probs.data(), 4, 0.25), 2);  // token 1 has probability 0: skipped
  EXPECT_EQ(sample_from(probs.data(), 4, 0.7499999), 2);
  EXPECT_EQ(sample_from(probs.data(), 4, 0.75), 3);
  EXPECT_EQ(sample_from(probs.data(), 4, 1.0 - 0x1.0p-53), 3);
  // Leading and trailing zeros are never returned, even at the extremes of u.
  const std::vector<float> inner = {0.0f, 0.0f, 0.3f, 0.7f, 0.0f, 0.0f};
  EXPECT_EQ(sample_from(inner.data(), 6, 0.0), 2);
  EXPECT_EQ(sample_from(inner.data(), 6, std::nextafter(1.0, 0.0)), 3);
  // Weights need not be normalised.
  const std::vector<float> weights = {2.0f, 6.0f};
  EXPECT_EQ(sample_from(weights.data(), 2, 0.2499), 0);
  EXPECT_EQ(sample_from(weights.data(), 2, 0.2501), 1);
  // A sum that falls short of 1 by rounding still returns a real token for u near 1.
  const std::vector<float> short_sum = {0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f};
  EXPECT_EQ(sample_from(short_sum.data(), 10, 1.0 - 0x1.0p-53), 9);
}

TEST(SampleFrom, RejectsBadInput) {
  const std::vector<float> zeros = {0.0f, 0.0f};
  EXPECT_THROW(sample_from(zeros.data(), 2, 0.5), specrun::Error);
  const std::vector<float> negative = {-0.5f, 1.5f};
  EXPECT_THROW(sample_from(negative.data(), 2, 0.5), specrun::Error);
  const std::vector<float> ok = {1.0f};
  EXPECT_THROW(sample_from(ok.data(), 1, 1.0), specrun::Error);
  EXPECT_THROW(sample_from(ok.data(), 1, -0.1), specrun::Error);
}

TEST(SampleFrom, FrequenciesMatchProbabilities) {
  // 100k draws with the counter RNG; chi-square with 4 degrees of freedom (token 2 has
  // probability 0 and must never appear). 18.47 is the 0.001 upper critical value for 4 df.
  const std::vector<float> probs = {0.05f, 0.15f, 0.0f, 0.3f, 0.1f, 0.4f};
  const int n = 100'000;
  std::vector<int> counts(probs.size(), 0);
  for (int i = 0; i < n; ++i) {
    ++counts[sample_from(probs.data(), 6,
                         specrun::uniform(9, 1, i, specrun::RandPurpose::kTargetSample))];
  }
  EXPECT_EQ(counts[2], 0);
  double chi2 = 0.0;
  for (std::size_t t = 0; t < probs.size(); ++t) {
    if (probs[t] == 0.0f) continue;
    const double e = probs[t] * n;
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
  }
  EXPECT_LT(chi2, 18.47);
}

TEST(Argmax, LowestIdWinsTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(logits.data(), 4), 1);
  const std::vector<float> with_nan = {std::nanf(""), -5.0f, std::nanf(""), -1.0f};
  EXPECT_EQ(argmax(with_nan.data(), 4), 3);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> masked = {-inf, -inf, -inf};
  EXPECT_EQ(argmax(masked.data(), 3), 0);
  const std::vector<float> all_nan = {std::nanf(""), std::nanf("")};
  EXPECT_THROW(argmax(all_nan.data(), 2), specrun::Error);
}
