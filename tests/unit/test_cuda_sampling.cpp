// The device token decisions (kernels/cuda/sampling.h) against the CPU reference (spec/sampling.h,
// spec/verifier.h) on seeded random inputs (label "gpu"). Every output buffer is poisoned before
// the launch (floats NaN, ints 0x7f7f7f7f), and every comparison fails on NaN.
//
// Tolerances and what may legitimately differ (see kernels/cuda/sampling.cu and
// sampling_verify.cu):
//   logits_to_probs: the kept token sets must be equal, except for a token whose CPU cumulative
//     mass before it lies within 1e-9 (relative) of the top-p threshold: the device sums the
//     masses in double in another order (rounding ~1e-16 relative), and its exponential may
//     differ from glibc's expf in the last bit in rare cases. Rows without such a boundary case
//     must agree to a relative L2 error <= 1e-6 (in practice ~1e-8: only last-bit differences)
//     and elementwise to 1e-6 relative; removed tokens exactly 0.
//   sample_rows and the residual / bonus samples: exactly the CPU's token, except when u * total
//     lies within 1e-12 (relative to the total) of a cumulative boundary (again the summation
//     order); such cases are counted and bounded, and the token must still have positive weight.
//   argmax_rows and the acceptance decisions: exact.
// Top-k and tree verification: test_cuda_tree_sampling.cpp. Skips visibly without a CUDA build
// or without a device.
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaSampling, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): the CUDA sampling kernels are not "
                  "compiled";
}

#else

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_sampling_test_util.h"
#include "cuda_test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/sampling.h"
#include "spec/sampling.h"
#include "spec/verifier.h"

using namespace specrun;
using namespace specrun::test::sampling;

namespace {

// ---- logits_to_probs ---------------------------------------------------------------------------

// The CPU's top-p bookkeeping, recomputed as Sampler::logits_to_probs does it: for each token,
// the cumulative mass of the top-k survivors before it in the order (larger logit first, lower
// id on ties); NaN for a token that top-k removes. threshold = top_p * kept mass (0 when top-p
// is off).
struct TopPBoundary {
  std::vector<double> cum_before;
  double threshold = 0.0;
};

TopPBoundary cpu_top_p_boundary(const float* x, int vocab, const SamplingParams& params) {
  TopPBoundary b;
  b.cum_before.assign(vocab, std::nan(""));
  if (!(params.top_p < 1.0f)) return b;
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) m = std::max(m, x[i]);
  const float inv_temperature = 1.0f / params.temperature;
  std::vector<float> e(vocab);
  for (int i = 0; i < vocab; ++i) e[i] = std::exp((x[i] - m) * inv_temperature);
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [x](int a, int c) { return x[a] > x[c] || (x[a] == x[c] && a < c); });
  const int kept = params.top_k > 0 && params.top_k < vocab ? params.top_k : vocab;
  double kept_mass = 0.0;
  for (int j = 0; j < kept; ++j) kept_mass += e[order[j]];
  b.threshold = static_cast<double>(params.top_p) * kept_mass;
  double cum = 0.0;
  for (int j = 0; j < kept; ++j) {
    b.cum_before[order[j]] = cum;
    cum += e[order[j]];
  }
  return b;
}

struct ProbsStats {
  int rows = 0;
  int boundary_rows = 0;  // rows with a kept-set difference at the top-p threshold
  double worst_l2 = 0.0;
};

// Compares one device row with the CPU's. See the file comment for the tolerances.
void compare_probs(const std::string& what, const std::vector<float>& cpu, const float* gpu,
                   const TopPBoundary& boundary, ProbsStats* stats) {
  const int vocab = static_cast<int>(cpu.size());
  ++stats->rows;
  int bad_values = 0, mismatches = 0, unexplained = 0, first_bad = -1;
  for (int i = 0; i < vocab; ++i) {
    if (!(gpu[i] >= 0.0f && gpu[i] <= 1.0f)) {  // NaN fails here
      if (bad_values++ == 0) first_bad = i;
      continue;
    }
    if ((cpu[i] > 0.0f) != (gpu[i] > 0.0f)) {
      ++mismatches;
      const double c = boundary.cum_before[i];
      const bool at_threshold =
          !std::isnan(c) && std::fabs(c - boundary.threshold) <= 1e-9 * boundary.threshold;
      if (!at_threshold && unexplained++ == 0 && first_bad < 0) first_bad = i;
    }
  }
  ASSERT_EQ(bad_values, 0) << what << ": token " << first_bad << " has probability "
                           << gpu[first_bad];
  ASSERT_EQ(unexplained, 0) << what << ": token " << first_bad << " kept on one side only (cpu "
                            << cpu[first_bad] << ", gpu " << gpu[first_bad]
                            << "), not at the top-p threshold";
  if (mismatches > 0) {  // the renormalisation then differs by the boundary token's mass
    ++stats->boundary_rows;
    std::printf("  %s: %d token(s) at the top-p threshold kept on one side only\n", what.c_str(),
                mismatches);
    return;
  }
  double err2 = 0.0, ref2 = 0.0;
  int worst = 0;
  double worst_ratio = 0.0;
  for (int i = 0; i < vocab; ++i) {
    const double d = static_cast<double>(gpu[i]) - cpu[i];
    err2 += d * d;
    ref2 += static_cast<double>(cpu[i]) * cpu[i];
    const double ratio = std::fabs(d) / (1e-6 * cpu[i] + 1e-37);
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
    if (cpu[i] == 0.0f) {
      ASSERT_EQ(gpu[i], 0.0f) << what << ": removed token " << i;
    }
  }
  const double l2 = std::sqrt(err2 / ref2);
  stats->worst_l2 = std::max(stats->worst_l2, l2);
  EXPECT_TRUE(l2 <= 1e-6) << what << ": relative L2 error " << l2;
  EXPECT_TRUE(worst_ratio <= 1.0) << what << ": token " << worst << " cpu " << cpu[worst]
                                  << ", gpu " << gpu[worst];
}

struct TransformCase {
  float temperature;
  int top_k;
  float top_p;
};

// "vocab V T t top_k k top_p p [logit row r]" (row < 0: no row).
std::string describe(int vocab, const TransformCase& c, int row) {
  return "vocab " + std::to_string(vocab) + " T " + std::to_string(c.temperature) + " top_k " +
         std::to_string(c.top_k) + " top_p " + std::to_string(c.top_p) +
         (row < 0 ? std::string() : " logit row " + std::to_string(row));
}

TEST(CudaSampling, LogitsToProbsMatchesCpu) {
  REQUIRE_DEVICE();
  const std::vector<TransformCase> cases = {
      {1.0f, 0, 1.0f},          // all off: plain softmax
      {0.7f, 50, 1.0f},         // top-k
      {1.5f, 1, 1.0f},          // top-1
      {1.0f, 3, 1.0f},          // small k (ties at the cut in quantized rows)
      {1.0f, 0, 0.9f},          // top-p
      {0.6f, 0, 0.5f},          // top-p
      {1.0f, 0, 1e-6f},         // top-p keeping one token
      {0.8f, 40, 0.95f},        // both
      {2.0f, 3000, 0.8f},       // both, a large k
      {1.3f, 1 << 30, 0.999f},  // top_k >= vocab: off
  };
  std::mt19937_64 rng(101);
  ProbsStats stats;
  for (const int vocab : {7, 1000, 32000, 151936}) {
    // Six logit rows (one per kind), transformed into rows of a seven-row output, both index
    // lists out of order; output row 4 must stay untouched.
    std::vector<float> logits;
    for (RowKind kind : kRowKinds) {
      const auto row = make_logits(vocab, kind, rng);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    const std::vector<std::int32_t> src = {3, 0, 5, 4, 1, 2}, dst = {2, 3, 6, 0, 1, 5};
    const int n_out = 7, untouched = 4;
    auto d_logits = upload(logits);
    auto d_src = upload(src), d_dst = upload(dst);
    for (const TransformCase& c : cases) {
      auto d_probs = poisoned<float>(static_cast<std::size_t>(n_out) * vocab, 0xff);
      auto d_error = upload(std::vector<int>{0});
      cuda::logits_to_probs(stream(), d_logits.as<float>(), vocab, d_src.as<std::int32_t>(),
                            d_dst.as<std::int32_t>(), static_cast<int>(src.size()),
                            cuda::SamplingConfig{c.temperature, c.top_k, c.top_p},
                            d_probs.as<float>(), d_error.as<int>());
      const auto got = download<float>(d_probs, static_cast<std::size_t>(n_out) * vocab);
      EXPECT_EQ(download<int>(d_error, 1)[0], 0) << describe(vocab, c, -1);
      const SamplingParams params{c.temperature, c.top_k, c.top_p};
      Sampler sampler;
      std::vector<float> expected(vocab);
      for (std::size_t r = 0; r < src.size(); ++r) {
        const float* x = logits.data() + static_cast<std::size_t>(src[r]) * vocab;
        sampler.logits_to_probs(x, vocab, params, expected.data());
        compare_probs(describe(vocab, c, src[r]), expected,
                      got.data() + static_cast<std::size_t>(dst[r]) * vocab,
                      cpu_top_p_boundary(x, vocab, params), &stats);
      }
      const float* spare = got.data() + static_cast<std::size_t>(untouched) * vocab;
      EXPECT_TRUE(std::all_of(spare, spare + vocab, [](float v) { return std::isnan(v); }))
          << describe(vocab, c, -1) << ": a row not in dst_rows was written";
    }
  }
  std::printf("  %d rows compared, %d with a top-p boundary case, worst relative L2 %.3g\n",
              stats.rows, stats.boundary_rows, stats.worst_l2);
  // Boundary cases need a cumulative mass within 1e-9 of the threshold: essentially never on
  // random logits (the flat rows hit the threshold exactly, and the device keeps the same side).
  EXPECT_LE(stats.boundary_rows, 2);
}

TEST(CudaSampling, LogitsToProbsFlagsNaNAndInfiniteRows) {
  REQUIRE_DEVICE();
  const int vocab = 3000;
  std::mt19937_64 rng(102);
  std::vector<float> logits = make_logits(vocab, RowKind::kNormal, rng);  // row 0: valid
  auto nan_row = make_logits(vocab, RowKind::kNormal, rng);
  nan_row[1234] = std::nan("");
  auto ninf_row = std::vector<float>(vocab, -std::numeric_limits<float>::infinity());
  auto pinf_row = make_logits(vocab, RowKind::kNormal, rng);
  pinf_row[7] = std::numeric_limits<float>::infinity();
  for (const auto* row : {&nan_row, &ninf_row, &pinf_row})
    logits.insert(logits.end(), row->begin(), row->end());
  auto d_logits = upload(logits);
  const cuda::SamplingConfig config{0.9f, 100, 0.9f};
  const SamplingParams params{0.9f, 100, 0.9f};
  std::vector<float> expected(vocab);
  logits_to_probs(logits.data(), vocab, params, expected.data());

  for (int bad = 1; bad <= 3; ++bad) {
    // The valid row alone: no error. The valid row and a broken one: error, the broken row's
    // output all zeros, the valid row still right.
    for (const bool with_bad : {false, true}) {
      const std::vector<std::int32_t> src =
          with_bad ? std::vector<std::int32_t>{bad, 0} : std::vector<std::int32_t>{0};
      const std::vector<std::int32_t> dst =
          with_bad ? std::vector<std::int32_t>{0, 1} : std::vector<std::int32_t>{1};
      auto d_src = upload(src), d_dst = upload(dst);
      auto d_probs = poisoned<float>(2 * static_cast<std::size_t>(vocab), 0xff);
      auto d_error = upload(std::vector<int>{0});
      cuda::logits_to_probs(stream(), d_logits.as<float>(), vocab, d_src.as<std::int32_t>(),
                            d_dst.as<std::int32_t>(), static_cast<int>(src.size()), config,
                            d_probs.as<float>(), d_error.as<int>());
      const auto got = download<float>(d_probs, 2 * static_cast<std::size_t>(vocab));
      const std::string what =
          "bad row kind " + std::to_string(bad) + (with_bad ? " with the bad row" : " without it");
      EXPECT_EQ(download<int>(d_error, 1)[0], with_bad ? 1 : 0) << what;
      if (with_bad) {
        EXPECT_TRUE(
            std::all_of(got.begin(), got.begin() + vocab, [](float v) { return v == 0.0f; }))
            << what << ": the broken row's output is not all zeros";
      }
      ProbsStats stats;
      compare_probs(what, expected, got.data() + vocab,
                    cpu_top_p_boundary(logits.data(), vocab, params), &stats);
    }
  }
  // error may be nullptr.
  auto d_src = upload(std::vector<std::int32_t>{1});
  auto d_dst = upload(std::vector<std::int32_t>{0});
  auto d_probs = poisoned<float>(vocab, 0xff);
  cuda::logits_to_probs(stream(), d_logits.as<float>(), vocab, d_src.as<std::int32_t>(),
                        d_dst.as<std::int32_t>(), 1, config, d_probs.as<float>(), nullptr);
  const auto got = download<float>(d_probs, vocab);
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return v == 0.0f; }));
}

// ---- argmax_rows -------------------------------------------------------------------------------

TEST(CudaSampling, ArgmaxRowsFollowsTheCpuTieAndNanRules) {
  REQUIRE_DEVICE();
  const float kNan = std::nanf(""), kInf = std::numeric_limits<float>::infinity();
  std::mt19937_64 rng(103);
  for (const int vocab : {7, 1000, 151936}) {
    std::vector<std::vector<float> > rows;
    rows.push_back(make_logits(vocab, RowKind::kNormal, rng));
    rows.push_back(make_logits(vocab, RowKind::kQuantized, rng));  // ties at the top likely
    rows.push_back(std::vector<float>(vocab, 1.0f));               // all tied: 0
    auto tie = make_logits(vocab, RowKind::kNormal, rng);
    tie[vocab - 1] = tie[vocab / 2] = 100.0f;  // lowest index wins
    rows.push_back(tie);
    auto nans = make_logits(vocab, RowKind::kNormal, rng);
    for (int i = 0; i < vocab; i += 3) nans[i] = kNan;  // index 0 NaN too
    nans[vocab - 1] = 60.0f;
    rows.push_back(nans);
    rows.push_back(std::vector<float>(vocab, kNan));   // all NaN: -1
    rows.push_back(std::vector<float>(vocab, -kInf));  // all -inf: 0
    auto ninf_nan = std::vector<float>(vocab, -kInf);
    ninf_nan[0] = kNan;  // NaN then -inf: 1 (or -1 when vocab == 1)
    rows.push_back(ninf_nan);
    auto pinf = make_logits(vocab, RowKind::kNormal, rng);
    pinf[vocab / 3] = kInf;
    pinf[vocab - 1] = kInf;
    rows.push_back(pinf);
    auto signed_zero = std::vector<float>(vocab, -1.0f);
    signed_zero[vocab - 1] = 0.0f;
    signed_zero[vocab / 2] = -0.0f;  // -0 == +0: the lower index wins
    rows.push_back(signed_zero);

    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    const int n = static_cast<int>(rows.size());
    std::vector<std::int32_t> pick(n);
    std::iota(pick.begin(), pick.end(), 0);
    std::shuffle(pick.begin(), pick.end(), rng);
    pick.push_back(pick[0]);  // a row twice
    auto d_x = upload(flat);
    auto d_rows = upload(pick);
    auto d_out = poisoned<std::int32_t>(pick.size(), 0x7f);
    cuda::argmax_rows(stream(), d_x.as<float>(), vocab, d_rows.as<std::int32_t>(),
                      static_cast<int>(pick.size()), d_out.as<std::int32_t>());
    const auto got = download<std::int32_t>(d_out, pick.size());
    for (std::size_t r = 0; r < pick.size(); ++r) {
      const auto& row = rows[pick[r]];
      const bool all_nan =
          std::all_of(row.begin(), row.end(), [](float v) { return std::isnan(v); });
      const int expected = all_nan ? -1 : specrun::argmax(row.data(), vocab);
      EXPECT_EQ(got[r], expected) << "vocab " << vocab << " row " << pick[r];
    }
  }
}

// ---- sample_rows -------------------------------------------------------------------------------

struct SampleStats {
  long samples = 0;
  long boundary = 0;  // differences explained by a cumulative boundary
};

// Checks a device sample against the CPU's `expected` for weights w (the row's positive weight
// is known to be nonzero).
void check_sample(const std::string& what, const float* w, int vocab, double u, int expected,
                  int got, SampleStats* stats) {
  ++stats->samples;
  ASSERT_TRUE(got >= 0 && got < vocab) << what << ": token " << got << " (u " << u << ")";
  ASSERT_GT(w[got], 0.0f) << what << ": token " << got << " of weight 0 (u " << u << ")";
  if (got == expected) return;
  ASSERT_TRUE(near_cumulative_boundary(w, vocab, u))
      << what << ": u " << u << " gave " << got << ", the CPU " << expected;
  ++stats->boundary;
}

TEST(CudaSampling, SampleRowsMatchesSampleFrom) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(104);
  SampleStats random_stats, boundary_stats;
  for (const int vocab : {7, 1000, 32000, 151936}) {
    // Weight rows: transformed distributions (many exact zeros), unnormalised weights with
    // zeros, a single nonzero weight, and all zeros (-> -1).
    std::vector<std::vector<float> > rows;
    for (const SamplingParams& p : {SamplingParams{1.0f, 0, 1.0f}, SamplingParams{0.8f, 30, 0.9f},
                                    SamplingParams{1.2f, 0, 0.7f}}) {
      const auto x = make_logits(vocab, RowKind::kMasked, rng);
      std::vector<float> probs(vocab);
      logits_to_probs(x.data(), vocab, p, probs.data());
      rows.push_back(probs);
    }
    std::vector<float> raw(vocab);
    for (float& v : raw) v = uniform01(rng) < 0.5 ? 0.0f : static_cast<float>(3.0 * uniform01(rng));
    raw[rng() % vocab] = 0.5f;
    rows.push_back(raw);
    std::vector<float> single(vocab, 0.0f);
    single[rng() % vocab] = 1e-20f;
    rows.push_back(single);
    const int n_rows = static_cast<int>(rows.size());
    const int zero_row = n_rows;
    rows.push_back(std::vector<float>(vocab, 0.0f));

    // Draws: for every row, random uniforms, the extremes, and uniforms aimed at cumulative
    // boundaries (u = cum_j / total, where the two summation orders may disagree).
    const int per_row = vocab > 100000 ? 300 : 1500;
    std::vector<std::int32_t> pick;
    std::vector<double> u;
    std::vector<bool> aimed;
    for (int r = 0; r < n_rows; ++r) {
      const auto& w = rows[r];
      double total = 0.0;
      for (float v : w) total += v;
      for (int s = 0; s < per_row; ++s) {
        pick.push_back(r);
        u.push_back(uniform01(rng));
        aimed.push_back(false);
      }
      for (double e : {0.0, 1.0 - 0x1.0p-53}) {
        pick.push_back(r);
        u.push_back(e);
        aimed.push_back(false);
      }
      const long positive = std::count_if(w.begin(), w.end(), [](float v) { return v > 0.0f; });
      const double aim = std::min(1.0, 200.0 / static_cast<double>(positive));
      double cum = 0.0;
      for (int i = 0; i < vocab; ++i) {
        cum += w[i];
        if (w[i] > 0.0f && uniform01(rng) < aim && cum < total) {
          pick.push_back(r);
          u.push_back(cum / total);
          aimed.push_back(true);
        }
      }
    }
    pick.push_back(zero_row);
    u.push_back(0.5);
    aimed.push_back(false);

    std::vector<float> flat;
    for (const auto& w : rows) flat.insert(flat.end(), w.begin(), w.end());
    auto d_w = upload(flat);
    auto d_rows = upload(pick);
    auto d_u = upload(u);
    auto d_out = poisoned<std::int32_t>(pick.size(), 0x7f);
    cuda::sample_rows(stream(), d_w.as<float>(), vocab, d_rows.as<std::int32_t>(),
                      static_cast<int>(pick.size()), d_u.as<double>(), d_out.as<std::int32_t>());
    const auto got = download<std::int32_t>(d_out, pick.size());
    for (std::size_t s = 0; s < pick.size(); ++s) {
      const std::string what = "vocab " + std::to_string(vocab) + " row " + std::to_string(pick[s]);
      if (pick[s] == zero_row) {
        EXPECT_EQ(got[s], -1) << what << ": all-zero row";
        continue;
      }
      const float* w = rows[pick[s]].data();
      check_sample(what, w, vocab, u[s], sample_from(w, vocab, u[s]), got[s],
                   aimed[s] ? &boundary_stats : &random_stats);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  std::printf("  %ld random draws (%ld at a boundary), %ld aimed at boundaries (%ld differ)\n",
              random_stats.samples, random_stats.boundary, boundary_stats.samples,
              boundary_stats.boundary);
  // Random uniforms land within 1e-12 of a boundary with probability ~1e-12 * vocab.
  EXPECT_LE(random_stats.boundary, 1);
}

// ---- chain verification with draft distributions --------------------------------------------

// Draws of x ~ w by the CPU's sample_from.
int draw(const std::vector<float>& w, std::mt19937_64& rng) {
  return sample_from(w.data(), static_cast<int>(w.size()), uniform01(rng));
}

// The CPU's verification of one chain with the uniforms of the device layout.
VerifyResult cpu_verify(const cuda::ChainSpec& s, const std::vector<std::int32_t>& drafts,
                        const std::vector<float>& target, const std::vector<float>& draft,
                        int vocab, const std::vector<double>& uniforms) {
  const double* u = uniforms.data() + s.first_uniform;
  const int k = s.k;
  std::vector<int> x(drafts.begin() + s.first_draft, drafts.begin() + s.first_draft + k);
  return verify_sampling_with(x.data(), k, draft.data() + static_cast<std::size_t>(s.q_row) * vocab,
                              target.data() + static_cast<std::size_t>(s.target_row) * vocab, vocab,
                              [&](RandPurpose purpose, int offset) {
                                switch (purpose) {
                                  case RandPurpose::kAccept:
                                    return u[offset];
                                  case RandPurpose::kResidual:
                                    return u[k + offset];
                                  default:
                                    return u[2 * k];
                                }
                              });
}

// The weights the emitted token was drawn from: the residual max(0, p - q) (p when its mass is
// 0) after a rejection at `accepted`, else the bonus row.
std::vector<float> emitted_weights(const cuda::ChainSpec& s, int accepted,
                                   const std::vector<float>& target,
                                   const std::vector<float>& draft, int vocab) {
  const float* p = target.data() + static_cast<std::size_t>(s.target_row + accepted) * vocab;
  std::vector<float> w(p, p + vocab);
  if (accepted == s.k) return w;
  const float* q = draft.data() + static_cast<std::size_t>(s.q_row + accepted) * vocab;
  std::vector<float> r(vocab);
  double mass = 0.0;
  for (int i = 0; i < vocab; ++i) mass += r[i] = std::max(0.0f, p[i] - q[i]);
  return mass > 0.0 ? r : w;
}

TEST(CudaSampling, VerifyChainsSamplingMatchesVerifySamplingWith) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(106);
  SampleStats stats;
  for (const int vocab : {50, 1000, 32000}) {
    const SamplingParams target_params{1.0f, std::max(2, vocab / 5), 1.0f};
    const SamplingParams draft_params{1.0f, std::max(2, vocab / 4), 0.95f};
    std::vector<float> target, draft;
    // Fresh target and draft rows: the draft's logits are the target's plus noise, so the draft
    // often proposes tokens the target likes, but not always; both have exact zeros (top-k).
    auto add_pair = [&](std::vector<float>* p_out, std::vector<float>* q_out) {
      auto x = make_logits(vocab, RowKind::kNormal, rng);
      std::vector<float> p(vocab), q(vocab);
      logits_to_probs(x.data(), vocab, target_params, p.data());
      std::normal_distribution<float> noise(0.0f, 1.5f);
      for (float& v : x) v += noise(rng);
      logits_to_probs(x.data(), vocab, draft_params, q.data());
      p_out->insert(p_out->end(), p.begin(), p.end());
      if (q_out != nullptr) q_out->insert(q_out->end(), q.begin(), q.end());
      return std::make_pair(p, q);
    };
    draft.resize(3 * static_cast<std::size_t>(vocab), 0.5f);  // rows no chain uses

    std::vector<cuda::ChainSpec> chains;
    std::vector<std::int32_t> drafts;
    std::vector<double> uniforms;
    for (int c = 0; c < 160; ++c) {
      const int k = std::vector<int>{0, 1, 2, 3, 5}[c % 5];
      const int kind = (c / 5) % 8;  // how the draft tokens are chosen
      cuda::ChainSpec s;
      s.k = k;
      s.target_row = static_cast<int>(target.size() / vocab);
      s.q_row = static_cast<int>(draft.size() / vocab);
      s.first_draft = static_cast<int>(drafts.size());
      uniforms.push_back(0.25);  // a gap: chains do not start at 0
      s.first_uniform = static_cast<int>(uniforms.size());
      std::vector<double> ua(k), ur(k);
      for (int i = 0; i < k; ++i) {
        auto [p, q] = add_pair(&target, &draft);
        int x = draw(q, rng);
        ua[i] = uniform01(rng);
        ur[i] = uniform01(rng);
        if (kind == 1 && i == k / 2) {  // p_x == 0: a forced rejection
          std::vector<int> zero;
          for (int t = 0; t < vocab; ++t)
            if (p[t] == 0.0f) zero.push_back(t);
          x = zero[rng() % zero.size()];
        } else if (kind == 2) {  // q_x == 0 < p_x where possible: always accepted
          for (int t = 0; t < vocab; ++t)
            if (q[t] == 0.0f && p[t] > 0.0f) x = t;
        } else if (kind == 3) {
          // Residual mass 0 at the last position: q = p there but with q_x doubled, so
          // max(0, p - q) == 0 everywhere; u = 0.75 > p_x / q_x = 0.5 rejects, and the sample
          // falls back to p. Before it, q = p and x = argmax p: always accepted.
          x = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
          float* qrow = draft.data() + draft.size() - vocab;
          std::copy(p.begin(), p.end(), qrow);
          if (i == k - 1) {
            qrow[x] = 2.0f * p[x];
            ua[i] = 0.75;
          }
        } else if (kind == 4) {  // q == p and x ~ p: always accepted (ratio 1)
          std::copy(p.begin(), p.end(), draft.data() + draft.size() - vocab);
          x = draw(p, rng);
        }
        drafts.push_back(x);
      }
      add_pair(&target, nullptr);  // p_{k+1}
      uniforms.insert(uniforms.end(), ua.begin(), ua.end());
      uniforms.insert(uniforms.end(), ur.begin(), ur.end());
      uniforms.push_back(uniform01(rng));
      chains.push_back(s);
    }
    auto d_target = upload(target), d_draft = upload(draft);
    auto d_chains = upload(chains);
    auto d_drafts = upload(drafts);
    auto d_u = upload(uniforms);
    auto d_out = poisoned<std::int32_t>(2 * chains.size(), 0x7f);
    cuda::verify_chains_sampling(stream(), d_target.as<float>(), d_draft.as<float>(), vocab,
                                 d_chains.as<cuda::ChainSpec>(), static_cast<int>(chains.size()),
                                 d_drafts.as<std::int32_t>(), d_u.as<double>(),
                                 d_out.as<std::int32_t>());
    const auto got = download<std::int32_t>(d_out, 2 * chains.size());
    int rejected = 0, full = 0, fallback = 0;
    for (std::size_t c = 0; c < chains.size(); ++c) {
      const cuda::ChainSpec& s = chains[c];
      const VerifyResult expected = cpu_verify(s, drafts, target, draft, vocab, uniforms);
      const std::string what = "vocab " + std::to_string(vocab) + " chain " + std::to_string(c) +
                               " (k " + std::to_string(s.k) + ")";
      ASSERT_EQ(got[2 * c], expected.accepted) << what;
      const auto w = emitted_weights(s, expected.accepted, target, draft, vocab);
      const double u = expected.accepted < s.k ? uniforms[s.first_uniform + s.k + expected.accepted]
                                               : uniforms[s.first_uniform + 2 * s.k];
      check_sample(what, w.data(), vocab, u, expected.token, got[2 * c + 1], &stats);
      if (::testing::Test::HasFatalFailure()) return;
      rejected += expected.accepted < s.k;
      full += s.k > 0 && expected.accepted == s.k;
      if (expected.accepted < s.k) {
        const float* p =
            target.data() + static_cast<std::size_t>(s.target_row + expected.accepted) * vocab;
        fallback += std::equal(w.begin(), w.end(), p);
      }
    }
    // The chains must cover rejections, full acceptances and the residual fallback.
    EXPECT_GE(rejected, 20) << "vocab " << vocab;
    EXPECT_GE(full, 20) << "vocab " << vocab;
    EXPECT_GE(fallback, 16) << "vocab " << vocab;
  }
  EXPECT_LE(stats.boundary, 1);
}

TEST(CudaSampling, VerifiedFirstTokenIsDistributedAsTheTarget) {
  // One draft position on a 16-token vocabulary, many times over: x ~ q, verified against p on
  // the device. The emitted first token (x if accepted, else the residual sample) must follow p
  // (chi-square at p = 0.001). Power check: replacing each residual sample by a sample of p
  // itself (the classic mistake) must fail the same test by a wide margin.
  REQUIRE_DEVICE();
  const int vocab = 16, n = 200000;
  std::mt19937_64 rng(107);
  std::vector<float> lp(vocab), lq(vocab);
  std::uniform_real_distribution<float> spread(-3.0f, 3.0f);
  for (float& v : lp) v = spread(rng);
  for (float& v : lq) v = spread(rng);
  std::vector<float> p(vocab), q(vocab), target(2 * vocab);
  logits_to_probs(lp.data(), vocab, SamplingParams{1.0f, 12, 1.0f}, p.data());
  logits_to_probs(lq.data(), vocab, SamplingParams{1.0f, 10, 1.0f}, q.data());
  std::copy(p.begin(), p.end(), target.begin());
  std::copy(p.begin(), p.end(), target.begin() + vocab);  // p_2 (bonus), unused by the test

  std::vector<cuda::ChainSpec> chains(n);
  std::vector<std::int32_t> drafts(n);
  std::vector<double> uniforms(3 * static_cast<std::size_t>(n));
  for (int c = 0; c < n; ++c) {
    chains[c] = cuda::ChainSpec{1, 0, 0, c, 3 * c};
    drafts[c] = draw(q, rng);
    for (int j = 0; j < 3; ++j) uniforms[3 * c + j] = uniform01(rng);
  }
  auto d_target = upload(target), d_q = upload(q);
  auto d_chains = upload(chains);
  auto d_drafts = upload(drafts);
  auto d_u = upload(uniforms);
  auto d_out = poisoned<std::int32_t>(2 * static_cast<std::size_t>(n), 0x7f);
  cuda::verify_chains_sampling(stream(), d_target.as<float>(), d_q.as<float>(), vocab,
                               d_chains.as<cuda::ChainSpec>(), n, d_drafts.as<std::int32_t>(),
                               d_u.as<double>(), d_out.as<std::int32_t>());
  const auto got = download<std::int32_t>(d_out, 2 * static_cast<std::size_t>(n));

  std::vector<long> right(vocab, 0), wrong(vocab, 0);
  long rejections = 0, mismatches = 0;
  for (int c = 0; c < n; ++c) {
    const VerifyResult expected = cpu_verify(chains[c], drafts, target, q, vocab, uniforms);
    mismatches += got[2 * c] != expected.accepted || got[2 * c + 1] != expected.token;
    ASSERT_TRUE(got[2 * c] == 0 || got[2 * c] == 1) << "chain " << c;
    ASSERT_TRUE(got[2 * c + 1] >= 0 && got[2 * c + 1] < vocab) << "chain " << c;
    const bool accepted = got[2 * c] == 1;
    rejections += !accepted;
    const int first = accepted ? drafts[c] : got[2 * c + 1];
    ++right[first];
    ++wrong[accepted ? first : sample_from(p.data(), vocab, uniforms[3 * c + 1])];
  }
  EXPECT_LE(mismatches, 1) << "device results differing from verify_sampling_with";
  EXPECT_GT(rejections, n / 20);
  EXPECT_LT(rejections, n - n / 20);

  int df = 0;
  long impossible = 0;
  const double stat = chi_square(right, p, n, &df, &impossible);
  const double critical = chi2_critical_001(df);
  std::printf("  emitted token:          chi2 %9.2f  df %d  critical(0.001) %.2f\n", stat, df,
              critical);
  EXPECT_EQ(impossible, 0) << "tokens of target probability 0 were emitted";
  EXPECT_LT(stat, critical);
  long wrong_impossible = 0;
  const double wrong_stat = chi_square(wrong, p, n, &df, &wrong_impossible);
  std::printf("  wrong residual (p):     chi2 %9.2f  df %d\n", wrong_stat, df);
  EXPECT_GT(wrong_stat, 10.0 * critical) << "the test has no power against a wrong residual";
}

// ---- argument checks ---------------------------------------------------------------------------

TEST(CudaSampling, LaunchersRejectBadArguments) {
  REQUIRE_DEVICE();
  cuda::DeviceBuffer b(4096);
  const auto* rows = b.as<std::int32_t>();
  float* probs = b.as<float>() + 512;
  EXPECT_THROW(cuda::logits_to_probs(stream(), b.as<float>(), 4, rows, rows, 1,
                                     cuda::SamplingConfig{0.0f, 0, 1.0f}, probs, nullptr),
               Error);  // temperature 0
  EXPECT_THROW(cuda::logits_to_probs(stream(), b.as<float>(), 4, rows, rows, 1,
                                     cuda::SamplingConfig{1.0f, -1, 1.0f}, probs, nullptr),
               Error);  // top_k < 0
  EXPECT_THROW(cuda::logits_to_probs(stream(), b.as<float>(), 4, rows, rows, 1,
                                     cuda::SamplingConfig{1.0f, 0, 0.0f}, probs, nullptr),
               Error);  // top_p 0
  EXPECT_THROW(cuda::logits_to_probs(stream(), b.as<float>(), 4, rows, rows, 1,
                                     cuda::SamplingConfig{}, b.as<float>(), nullptr),
               Error);  // probs aliases logits
  EXPECT_THROW(cuda::argmax_rows(stream(), b.as<float>(), 0, rows, 1, b.as<std::int32_t>()),
               Error);  // vocab 0
  EXPECT_THROW(
      cuda::sample_rows(stream(), b.as<float>(), 4, rows, 1, nullptr, b.as<std::int32_t>()),
      Error);  // no uniforms
  // No rows / chains: nothing to do, no launch.
  cuda::argmax_rows(stream(), b.as<float>(), 4, rows, 0, b.as<std::int32_t>());
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

}  // namespace

#endif  // SPECRUN_HAVE_CUDA
