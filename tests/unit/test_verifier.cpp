#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "common/error.h"
#include "spec/rng.h"
#include "spec/sampling.h"
#include "spec/verifier.h"

using specrun::accept_draft_token;
using specrun::greedy_accept;
using specrun::RandPurpose;
using specrun::residual_distribution;
using specrun::sample_residual;
using specrun::VerifyResult;

namespace {

// Hand-made 4-token distributions: residual max(0, p - q) = {0, 0, 0.1, 0.3}, mass 0.4,
// normalised {0, 0, 0.25, 0.75}. Values are exact in binary up to float rounding of 0.1 etc.
const std::vector<float> kP = {0.1f, 0.2f, 0.3f, 0.4f};
const std::vector<float> kQ = {0.4f, 0.3f, 0.2f, 0.1f};

// Scripted uniforms for verify_sampling_with: records every (purpose, offset) requested.
struct ScriptedUniforms {
  std::vector<double> accept;  // by offset
  double residual = 0.0;
  double bonus = 0.0;
  std::vector<std::pair<RandPurpose, int>> calls;
  double operator()(RandPurpose purpose, int offset) {
    calls.emplace_back(purpose, offset);
    switch (purpose) {
      case RandPurpose::kAccept:
        return accept.at(offset);
      case RandPurpose::kResidual:
        return residual;
      case RandPurpose::kBonus:
        return bonus;
      default:
        ADD_FAILURE() << "verifier asked for an unexpected purpose";
        return 0.0;
    }
  }
};

// k = 3 chain: q rows and p rows, one draft token per row.
struct Chain {
  std::vector<int> draft = {3, 0, 2};
  // q_1..q_3 (k rows) and p_1..p_4 (k+1 rows), 4 tokens each.
  std::vector<float> q = {0.1f,  0.2f,  0.3f,  0.4f,    // q_1: x_1 = 3, q = 0.4
                          0.5f,  0.1f,  0.2f,  0.2f,    // q_2: x_2 = 0, q = 0.5
                          0.25f, 0.25f, 0.25f, 0.25f};  // q_3: x_3 = 2, q = 0.25
  std::vector<float> p = {0.1f,  0.1f, 0.4f, 0.4f,      // p_1(3) = 0.4: ratio 1, always accepted
                          0.25f, 0.5f, 0.0f, 0.25f,     // p_2(0) = 0.25: ratio 0.5
                          0.0f,  0.5f, 0.5f, 0.0f,      // p_3(2) = 0.5: ratio 2, always accepted
                          0.0f,  0.0f, 0.0f, 1.0f};     // p_4: the bonus is always token 3
};

}  // namespace

TEST(Residual, ExactValuesOnHandMadeDistributions) {
  std::vector<float> out(4);
  const double mass = residual_distribution(kP.data(), kQ.data(), 4, out.data());
  EXPECT_NEAR(mass, 0.4, 1e-6);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_NEAR(out[2], 0.25f, 1e-6);
  EXPECT_NEAR(out[3], 0.75f, 1e-6);
  // The reverse direction puts the mass on the first two tokens: {0.3, 0.1} / 0.4.
  residual_distribution(kQ.data(), kP.data(), 4, out.data());
  EXPECT_NEAR(out[0], 0.75f, 1e-6);
  EXPECT_NEAR(out[1], 0.25f, 1e-6);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
}

TEST(Residual, EqualDistributionsFallBackToP) {
  std::vector<float> out(4, -1.0f);
  EXPECT_EQ(residual_distribution(kP.data(), kP.data(), 4, out.data()), 0.0);
  EXPECT_EQ(out, kP);
  // Sampling the residual of p against itself samples p.
  EXPECT_EQ(sample_residual(kP.data(), kP.data(), 4, 0.05), 0);
  EXPECT_EQ(sample_residual(kP.data(), kP.data(), 4, 0.25), 1);
  EXPECT_EQ(sample_residual(kP.data(), kP.data(), 4, 0.95), 3);
}

TEST(Residual, SamplingMatchesTheMaterialisedDistribution) {
  // Inverse CDF of {0, 0, 0.25, 0.75}: token 2 below 0.25, token 3 from 0.25 on; zero-weight
  // tokens never appear, not even at u = 0 or u near 1.
  EXPECT_EQ(sample_residual(kP.data(), kQ.data(), 4, 0.0), 2);
  EXPECT_EQ(sample_residual(kP.data(), kQ.data(), 4, 0.2), 2);
  EXPECT_EQ(sample_residual(kP.data(), kQ.data(), 4, 0.3), 3);
  EXPECT_EQ(sample_residual(kP.data(), kQ.data(), 4, 1.0 - 0x1.0p-53), 3);
  std::vector<float> out(4);
  residual_distribution(kP.data(), kQ.data(), 4, out.data());
  for (double u = 0.0; u < 1.0; u += 0.0137) {
    EXPECT_EQ(sample_residual(kP.data(), kQ.data(), 4, u), specrun::sample_from(out.data(), 4, u))
        << "u = " << u;
  }
}

TEST(AcceptRule, ProbabilityIsMinOfOneAndRatio) {
  // p/q = 0.1/0.4 = 0.25 (in float arithmetic, computed in double).
  const double ratio = static_cast<double>(kP[0]) / static_cast<double>(kQ[0]);
  EXPECT_TRUE(accept_draft_token(ratio - 1e-9, kP[0], kQ[0]));
  EXPECT_TRUE(accept_draft_token(ratio, kP[0], kQ[0]));  // u <= ratio
  EXPECT_FALSE(accept_draft_token(ratio + 1e-9, kP[0], kQ[0]));
  EXPECT_TRUE(accept_draft_token(0.0, kP[0], kQ[0]));
  // p >= q: accepted for every u in [0, 1).
  EXPECT_TRUE(accept_draft_token(1.0 - 0x1.0p-53, kP[3], kQ[3]));
  EXPECT_TRUE(accept_draft_token(1.0 - 0x1.0p-53, 0.3f, 0.3f));
  // q(x) = 0 < p(x): infinite ratio, accepted.
  EXPECT_TRUE(accept_draft_token(0.999, 0.2f, 0.0f));
  // p(x) = 0: never accepted, not even at u = 0 (the target cannot produce x).
  EXPECT_FALSE(accept_draft_token(0.0, 0.0f, 0.5f));
  EXPECT_FALSE(accept_draft_token(0.0, 0.0f, 0.0f));
}

TEST(GreedyAccept, EveryPrefixLength) {
  const int argmax[] = {5, 6, 7, 8};
  const int all[] = {5, 6, 7};
  const int none[] = {9, 6, 7};
  const int one[] = {5, 9, 7};
  const int two[] = {5, 6, 9};
  EXPECT_EQ(greedy_accept(all, 3, argmax), 3);   // emitted: 5 6 7 then the bonus argmax[3] = 8
  EXPECT_EQ(greedy_accept(none, 3, argmax), 0);  // emitted: argmax[0] = 5
  EXPECT_EQ(greedy_accept(one, 3, argmax), 1);
  EXPECT_EQ(greedy_accept(two, 3, argmax), 2);
  EXPECT_EQ(greedy_accept(all, 0, argmax), 0);  // k = 0: plain greedy, emits argmax[0]
  // A later match after a mismatch does not count.
  const int late[] = {1, 6, 7};
  EXPECT_EQ(greedy_accept(late, 3, argmax), 0);
  EXPECT_THROW(greedy_accept(all, -1, argmax), specrun::Error);
}

TEST(VerifySampling, AllAcceptedEmitsBonusFromLastTargetRow) {
  Chain c;
  ScriptedUniforms u;
  u.accept = {0.99, 0.5, 0.99};  // 0.5 <= ratio 0.5: accepted
  u.bonus = 0.1;
  const VerifyResult r =
      specrun::verify_sampling_with(c.draft.data(), 3, c.q.data(), c.p.data(), 4, u);
  EXPECT_EQ(r.accepted, 3);
  EXPECT_EQ(r.token, 3);
  const std::vector<std::pair<RandPurpose, int>> expected_calls = {{RandPurpose::kAccept, 0},
                                                                   {RandPurpose::kAccept, 1},
                                                                   {RandPurpose::kAccept, 2},
                                                                   {RandPurpose::kBonus, 3}};
  EXPECT_EQ(u.calls, expected_calls);
}

TEST(VerifySampling, FirstRejectionSamplesResidualAndStops) {
  Chain c;
  ScriptedUniforms u;
  u.accept = {0.0, 0.5000001, 0.0};  // just above the ratio 0.5 at slot 1: rejected
  // Residual at slot 1: max(0, p_2 - q_2) = {0, 0.4, 0, 0.05} -> {0, 8/9, 0, 1/9}.
  u.residual = 0.85;
  VerifyResult r = specrun::verify_sampling_with(c.draft.data(), 3, c.q.data(), c.p.data(), 4, u);
  EXPECT_EQ(r.accepted, 1);
  EXPECT_EQ(r.token, 1);
  const std::vector<std::pair<RandPurpose, int>> expected_calls = {
      {RandPurpose::kAccept, 0}, {RandPurpose::kAccept, 1}, {RandPurpose::kResidual, 1}};
  EXPECT_EQ(u.calls, expected_calls);
  u.calls.clear();
  u.residual = 0.9;  // past 8/9
  r = specrun::verify_sampling_with(c.draft.data(), 3, c.q.data(), c.p.data(), 4, u);
  EXPECT_EQ(r.accepted, 1);
  EXPECT_EQ(r.token, 3);
  // The rejected draft token itself (0) can be emitted only if the residual has mass on it;
  // here p_2(0) < q_2(0), so it cannot.
  for (double res = 0.0; res < 1.0; res += 0.01) {
    u.residual = res;
    EXPECT_NE(specrun::verify_sampling_with(c.draft.data(), 3, c.q.data(), c.p.data(), 4, u).token,
              0);
  }
}

TEST(VerifySampling, RejectionAtTheFirstSlotAndZeroTargetProbability) {
  Chain c;
  c.draft = {1, 0, 2};  // p_1(1) = 0.1, q_1(1) = 0.2: ratio 0.5
  ScriptedUniforms u;
  u.accept = {0.6, 0.0, 0.0};
  u.residual = 0.0;  // residual of p_1 - q_1 = {0, 0, 0.1, 0}: token 2 whatever u is
  VerifyResult r = specrun::verify_sampling_with(c.draft.data(), 3, c.q.data(), c.p.data(), 4, u);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.token, 2);
  // A draft token the target gives probability 0 is rejected even with u = 0.
  c.draft = {3, 2, 2};  // p_2(2) = 0
  u.accept = {0.0, 0.0, 0.0};
  u.residual = 0.5;
  r = specrun::verify_sampling_with(c.draft.data(), 3, c.q.data(), c.p.data(), 4, u);
  EXPECT_EQ(r.accepted, 1);
  EXPECT_NE(r.token, 2);
}

TEST(VerifySampling, ZeroDraftLengthSamplesTheTarget) {
  const std::vector<float> p = {0.0f, 0.5f, 0.5f};
  ScriptedUniforms u;
  u.bonus = 0.75;
  const VerifyResult r = specrun::verify_sampling_with(nullptr, 0, nullptr, p.data(), 3, u);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.token, 2);
}

TEST(VerifySampling, CounterRngVersionUsesSequencePositions) {
  // verify_sampling must draw (kAccept, first + i), then (kResidual, first + n) or
  // (kBonus, first + k). Compare with the scripted version fed those exact draws, over many keys.
  Chain c;
  c.p[1 * 4 + 0] = 0.05f;  // make slot 1 reject often: ratio 0.1
  c.p[1 * 4 + 1] = 0.7f;
  int rejected = 0;
  for (std::uint64_t prompt = 0; prompt < 200; ++prompt) {
    const specrun::SeqRandKey key{99, prompt};
    const std::int64_t first = 17 + static_cast<std::int64_t>(prompt);
    ScriptedUniforms u;
    for (int i = 0; i < 3; ++i) u.accept.push_back(key.uniform(first + i, RandPurpose::kAccept));
    const VerifyResult r =
        specrun::verify_sampling(c.draft.data(), 3, c.q.data(), c.p.data(), 4, key, first);
    u.residual = key.uniform(first + r.accepted, RandPurpose::kResidual);
    u.bonus = key.uniform(first + 3, RandPurpose::kBonus);
    const VerifyResult s =
        specrun::verify_sampling_with(c.draft.data(), 3, c.q.data(), c.p.data(), 4, u);
    EXPECT_EQ(r.accepted, s.accepted);
    EXPECT_EQ(r.token, s.token);
    if (r.accepted < 3) ++rejected;
  }
  EXPECT_GT(rejected, 100);  // both branches were exercised
  EXPECT_LT(rejected, 200);
}

TEST(VerifySampling, RejectsDraftTokensOutsideTheVocabulary) {
  Chain c;
  c.draft = {3, 4, 0};
  EXPECT_THROW(specrun::verify_sampling(c.draft.data(), 3, c.q.data(), c.p.data(), 4, {1, 2}, 0),
               specrun::Error);
}

TEST(TokensUntilEos, TruncatesAfterFirstEos) {
  const int tokens[] = {5, 2, 7, 2};
  EXPECT_EQ(specrun::tokens_until_eos(tokens, 4, 2), 2);
  EXPECT_EQ(specrun::tokens_until_eos(tokens, 4, 9), 4);
  EXPECT_EQ(specrun::tokens_until_eos(tokens, 4, -1), 4);
  EXPECT_EQ(specrun::tokens_until_eos(tokens, 0, 2), 0);
  EXPECT_EQ(specrun::tokens_until_eos(tokens, 1, 5), 1);
}
