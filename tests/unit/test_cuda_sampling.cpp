// The device token decisions (kernels/cuda/sampling.h) against the CPU reference (spec/sampling.h,
// spec/verifier.h) on seeded random inputs (label "gpu"). Every output buffer is poisoned before
// the launch (floats NaN, ints 0x7f7f7f7f), and every comparison fails on NaN.
//
// Tolerances and what may legitimately differ (see kernels/cuda/sampling.cu):
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
//   top_k_rows: ids exact (ties to the lower id, NaN never chosen); log-probabilities within
//     1e-6 relative (+ 1e-12 absolute, for values near 0) of the double reference logit -
//     (max + log(sum exp(logit - max))): the device sums in another order, with its own exp
//     and log, then rounds to float.
//   verify_trees_sampling: accepted count, path and token exactly verify_tree_sampling_with's
//     (driven by sample_from), except when the uniform of the first level where they differ
//     lies within 1e-12 of a cumulative boundary of the row sampled there (counted, bounded);
//     every device walk must still be one the rule can produce.
// Skips visibly without a CUDA build or without a device.
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
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/sampling.h"
#include "spec/rng.h"
#include "spec/sampling.h"
#include "spec/verifier.h"

using namespace specrun;

namespace {

cuda::DeviceContext* context() {
  return test::device_context();
}

cudaStream_t stream() {
  return context()->stream();
}

// Copies in on the compute stream (so that the kernels see them in order).
template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<std::size_t>(1, v.size() * sizeof(T)));
  if (!v.empty())
    CUDA_CHECK(
        cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream()));
  return b;
}

// An output buffer of n elements filled with `byte` (0xff: float NaN; 0x7f: int 0x7f7f7f7f).
template <typename T>
cuda::DeviceBuffer poisoned(std::size_t n, int byte) {
  cuda::DeviceBuffer b(std::max<std::size_t>(1, n * sizeof(T)));
  CUDA_CHECK(cudaMemsetAsync(b.get(), byte, b.bytes(), stream()));
  return b;
}

template <typename T>
std::vector<T> download(const cuda::DeviceBuffer& b, std::size_t n) {
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  std::vector<T> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

constexpr std::int32_t kPoisonInt = 0x7f7f7f7f;

// A uniform in [0, 1) with 53 random bits.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// ---- logits ------------------------------------------------------------------------------------

enum class RowKind { kNormal, kQuantized, kMasked, kPeaked, kFlat, kSignedZeros };
constexpr RowKind kRowKinds[] = {RowKind::kNormal, RowKind::kQuantized, RowKind::kMasked,
                                 RowKind::kPeaked, RowKind::kFlat,      RowKind::kSignedZeros};

// One row of logits: normal with scale 3, then
//   quantized: rounded to multiples of 0.5 (many exact ties, -0 and +0 among them);
//   masked:    ~30% of the tokens -inf, the rest quantized;
//   peaked:    one token far above the rest;
//   flat:      every logit equal (ties everywhere);
//   signed zeros: ~30% of the tokens at the top, all +0 or -0 (equal, so one tie group in id
//              order), the rest negative.
std::vector<float> make_logits(int vocab, RowKind kind, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(vocab);
  for (float& v : x) v = normal(rng);
  switch (kind) {
    case RowKind::kNormal:
      break;
    case RowKind::kQuantized:
      for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
      break;
    case RowKind::kMasked:
      for (float& v : x)
        v = uniform01(rng) < 0.3 ? -std::numeric_limits<float>::infinity()
                                 : std::round(v * 2.0f) / 2.0f;
      x[rng() % vocab] = 1.0f;  // at least one finite logit
      break;
    case RowKind::kPeaked:
      x[rng() % vocab] = 25.0f;
      break;
    case RowKind::kFlat:
      std::fill(x.begin(), x.end(), 1.25f);
      break;
    case RowKind::kSignedZeros:
      for (float& v : x)
        v = uniform01(rng) < 0.3 ? (uniform01(rng) < 0.5 ? -0.0f : 0.0f) : -0.5f - std::fabs(v);
      break;
  }
  return x;
}

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

// The weights that count (> 0), their sequential double total, and whether u * total lies within
// 1e-12 (relative) of one of the CPU's cumulative sums.
bool near_cumulative_boundary(const float* w, int vocab, double u) {
  double total = 0.0;
  for (int i = 0; i < vocab; ++i)
    if (w[i] > 0.0f) total += w[i];
  const double target = u * total;
  double cum = 0.0;
  for (int i = 0; i < vocab; ++i) {
    if (!(w[i] > 0.0f)) continue;
    cum += w[i];
    if (std::fabs(target - cum) <= 1e-12 * total) return true;
  }
  return false;
}

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

// Upper 0.001 critical value of chi-square with df degrees of freedom (Wilson-Hilferty, as in
// test_lossless.cpp; within 1% of the table for df >= 7, erring high).
double chi2_critical_001(int df) {
  const double z = 3.090232306167813;
  const double h = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - h + z * std::sqrt(h), 3.0);
}

// Pearson's statistic of counts against probabilities over the cells of nonzero probability;
// draws in cells of probability 0 are counted in *impossible.
double chi_square(const std::vector<long>& observed, const std::vector<float>& p, long total,
                  int* df, long* impossible) {
  double stat = 0.0;
  int cells = 0;
  *impossible = 0;
  for (std::size_t c = 0; c < observed.size(); ++c) {
    if (p[c] == 0.0f) {
      *impossible += observed[c];
      continue;
    }
    const double e = static_cast<double>(p[c]) * total;
    stat += (observed[c] - e) * (observed[c] - e) / e;
    ++cells;
  }
  *df = cells - 1;
  return stat;
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

// ---- top_k_rows --------------------------------------------------------------------------------

// The CPU reference of top_k_rows: the k first ids in the order (larger logit first, lower id on
// ties, NaN after every number) and logit - logsumexp(row) in double: max + log(sum over the
// numbers of exp(x_i - max)), max the largest logit.
struct TopKReference {
  std::vector<int> ids;
  std::vector<double> logprobs;
};

TopKReference cpu_top_k(const float* x, int vocab, int k) {
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [x](int a, int b) {
    const bool nan_a = std::isnan(x[a]), nan_b = std::isnan(x[b]);
    if (nan_a != nan_b) return nan_b;                // numbers first
    if (!nan_a && x[a] != x[b]) return x[a] > x[b];  // larger logit first
    return a < b;                                    // ties (-0 == +0): lower id
  });
  const double max = x[order[0]];
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i)
    if (!std::isnan(x[i])) sum += std::exp(static_cast<double>(x[i]) - max);
  const double lse = max + std::log(sum);
  TopKReference r;
  for (int j = 0; j < k; ++j) {
    r.ids.push_back(order[j]);
    r.logprobs.push_back(static_cast<double>(x[order[j]]) - lse);
  }
  return r;
}

TEST(CudaSampling, TopKRowsMatchesCpu) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(108);
  double worst = 0.0;  // worst |error| / tolerance
  for (const int vocab : {7, 1000, 32000, 151936}) {
    // The six kinds of make_logits (ties at the cut in quantized, flat and signed-zero rows,
    // -inf in masked rows) and a normal row with ~10% NaN (token 0 among them); each row
    // again for every k, fresh logits for every vocabulary.
    std::vector<std::vector<float> > rows;
    for (RowKind kind : kRowKinds) rows.push_back(make_logits(vocab, kind, rng));
    auto nans = make_logits(vocab, RowKind::kNormal, rng);
    for (float& v : nans)
      if (uniform01(rng) < 0.1) v = std::nanf("");
    nans[0] = std::nanf("");
    nans[vocab - 1] = 50.0f;  // the largest logit is the last token
    rows.push_back(nans);
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    const int n = static_cast<int>(rows.size());
    auto d_x = upload(flat);
    for (const int k_wanted : {1, 3, 10, 64}) {
      const int k = std::min(k_wanted, vocab);
      // Rows out of order, one twice.
      std::vector<std::int32_t> pick(n);
      std::iota(pick.begin(), pick.end(), 0);
      std::shuffle(pick.begin(), pick.end(), rng);
      pick.push_back(pick[1]);
      const std::size_t n_out = pick.size() * static_cast<std::size_t>(k);
      auto d_rows = upload(pick);
      auto d_ids = poisoned<std::int32_t>(n_out, 0x7f);
      auto d_lp = poisoned<float>(n_out, 0xff);
      cuda::top_k_rows(stream(), d_x.as<float>(), vocab, d_rows.as<std::int32_t>(),
                       static_cast<int>(pick.size()), k, d_ids.as<std::int32_t>(),
                       d_lp.as<float>());
      const auto ids = download<std::int32_t>(d_ids, n_out);
      const auto lp = download<float>(d_lp, n_out);
      for (std::size_t r = 0; r < pick.size(); ++r) {
        const float* x = rows[pick[r]].data();
        // Fewer numbers than k (the NaN row of the smallest vocabulary): not in the contract.
        if (std::count_if(x, x + vocab, [](float v) { return !std::isnan(v); }) < k) continue;
        const TopKReference ref = cpu_top_k(x, vocab, k);
        for (int j = 0; j < k; ++j) {
          const std::size_t at = r * k + j;
          const std::string what = "vocab " + std::to_string(vocab) + " k " + std::to_string(k) +
                                   " row " + std::to_string(pick[r]) + " rank " + std::to_string(j);
          ASSERT_EQ(ids[at], ref.ids[j]) << what;
          ASSERT_FALSE(std::isnan(x[ids[at]])) << what << ": a NaN logit was chosen";
          const double expected = ref.logprobs[j];
          if (std::isinf(expected)) {  // a -inf logit among the k
            ASSERT_EQ(lp[at], expected) << what;
            continue;
          }
          // float32 of a double computed in another order: within 1e-6 relative (one float
          // rounding is 6e-8), plus 1e-12 absolute for log-probabilities near 0, where the
          // double's own rounding (~1e-15 of the log-sum-exp) dominates.
          const double tolerance = 1e-6 * std::fabs(expected) + 1e-12;
          const double error = std::fabs(static_cast<double>(lp[at]) - expected);
          ASSERT_TRUE(error <= tolerance)  // NaN fails
              << what << ": logprob " << lp[at] << ", expected " << expected;
          worst = std::max(worst, error / tolerance);
        }
      }
    }
  }
  std::printf("  worst logprob error: %.3g of the tolerance\n", worst);
}

// ---- tree verification by sampling -------------------------------------------------------------

// Trees of one launch: probability rows, the TreeSpecs, their nodes and uniforms, and the size
// of the paths array (each tree's share followed by one spare entry that must stay untouched).
struct TreeBatch {
  int vocab = 0;
  std::vector<float> probs;
  std::vector<cuda::TreeSpec> specs;
  std::vector<std::int32_t> tokens, parents;
  std::vector<double> uniforms;
  int path_entries = 0;

  const float* row(int r) const { return probs.data() + static_cast<std::size_t>(r) * vocab; }
  int n_rows() const { return static_cast<int>(probs.size() / vocab); }
  // The row after `node` (-1: the root) of tree c.
  const float* row_after(int c, int node) const { return row(specs[c].first_row + 1 + node); }
  TreeView view(int c) const {
    const cuda::TreeSpec& s = specs[c];
    return TreeView{tokens.data() + s.first_node, parents.data() + s.first_node, s.n_nodes};
  }
  void add_row(const std::vector<float>& p) { probs.insert(probs.end(), p.begin(), p.end()); }
  // Appends a tree's spec for nodes tokens/parents [node_begin, end) whose rows start at
  // first_row; `levels` uniforms from `u`.
  void add_spec(int node_begin, int first_row, const std::vector<double>& u) {
    cuda::TreeSpec s;
    s.n_nodes = static_cast<int>(tokens.size()) - node_begin;
    s.first_node = node_begin;
    s.first_row = first_row;
    uniforms.push_back(0.5);  // a gap: trees' uniforms do not start at 0
    s.first_uniform = static_cast<int>(uniforms.size());
    uniforms.insert(uniforms.end(), u.begin(), u.end());
    s.first_path = path_entries;
    path_entries += s.n_nodes + 1;
    specs.push_back(s);
  }
};

struct TreeResults {
  std::vector<std::int32_t> out, paths;
};

TreeResults run_trees(const TreeBatch& b) {
  auto d_probs = upload(b.probs);
  auto d_specs = upload(b.specs);
  auto d_tokens = upload(b.tokens), d_parents = upload(b.parents);
  auto d_u = upload(b.uniforms);
  auto d_out = poisoned<std::int32_t>(2 * b.specs.size(), 0x7f);
  auto d_paths = poisoned<std::int32_t>(b.path_entries, 0x7f);
  cuda::verify_trees_sampling(stream(), d_probs.as<float>(), b.vocab, d_specs.as<cuda::TreeSpec>(),
                              static_cast<int>(b.specs.size()), d_tokens.as<std::int32_t>(),
                              d_parents.as<std::int32_t>(), d_u.as<double>(),
                              d_out.as<std::int32_t>(), d_paths.as<std::int32_t>());
  TreeResults r;
  r.out = download<std::int32_t>(d_out, 2 * b.specs.size());
  r.paths = download<std::int32_t>(d_paths, b.path_entries);
  return r;
}

// The CPU's verdict on tree c: verify_tree_sampling_with driven by sample_from on the same rows
// and uniforms.
TreeVerdict cpu_tree_verdict(const TreeBatch& b, int c) {
  const double* u = b.uniforms.data() + b.specs[c].first_uniform;
  return verify_tree_sampling_with(b.view(c), [&](int node, int level) {
    return sample_from(b.row_after(c, node), b.vocab, u[level]);
  });
}

// The device's verdict on tree c (path entries past `accepted` are not read).
TreeVerdict device_tree_verdict(const TreeBatch& b, const TreeResults& r, int c) {
  TreeVerdict v;
  v.accepted = r.out[2 * c];
  v.token = r.out[2 * c + 1];
  for (int j = 0; j < v.accepted && j < kMaxTreeDepth; ++j)
    v.path[j] = r.paths[b.specs[c].first_path + j];
  return v;
}

// Checks that v is a walk the rule can produce on tree c whatever the uniforms: a path of first
// children by token from the root, each token of positive weight in the row it was drawn from,
// and an emitted token of positive weight that no child of the last node carries.
void check_tree_walk(const std::string& what, const TreeBatch& b, int c, const TreeVerdict& v) {
  const TreeView tree = b.view(c);
  ASSERT_TRUE(v.accepted >= 0 && v.accepted <= tree.n) << what << ": accepted " << v.accepted;
  int node = -1;
  for (int j = 0; j < v.accepted; ++j) {
    const int next = v.path[j];
    ASSERT_TRUE(next >= 0 && next < tree.n) << what << ": path[" << j << "] = " << next;
    const int y = tree.tokens[next];
    ASSERT_EQ(child_with_token(tree, node, y), next) << what << ": path[" << j << "]";
    ASSERT_GT(b.row_after(c, node)[y], 0.0f) << what << ": path[" << j << "] of weight 0";
    node = next;
  }
  ASSERT_TRUE(v.token >= 0 && v.token < b.vocab) << what << ": token " << v.token;
  ASSERT_GT(b.row_after(c, node)[v.token], 0.0f) << what << ": token of weight 0";
  ASSERT_EQ(child_with_token(tree, node, v.token), -1)
      << what << ": token " << v.token << " has a child to descend into";
}

// The token sampled at level l of a verdict: the token of path[l], or the emitted token.
int sampled_at(const TreeView& tree, const TreeVerdict& v, int level) {
  return level < v.accepted ? tree.tokens[v.path[level]] : v.token;
}

// Compares the device's verdict on tree c with the CPU's: equal, or first different at a level
// whose uniform lies within 1e-12 of a cumulative boundary of the row sampled there (counted in
// *boundary). Paths are compared node by node.
void compare_tree(const std::string& what, const TreeBatch& b, int c, const TreeVerdict& got,
                  const TreeVerdict& expected, long* boundary) {
  const TreeView tree = b.view(c);
  const double* u = b.uniforms.data() + b.specs[c].first_uniform;
  int node = -1;
  for (int level = 0;; ++level) {
    const int y_got = sampled_at(tree, got, level), y_expected = sampled_at(tree, expected, level);
    const bool got_ends = level == got.accepted, expected_ends = level == expected.accepted;
    if (y_got != y_expected || got_ends != expected_ends) {
      ASSERT_TRUE(near_cumulative_boundary(b.row_after(c, node), b.vocab, u[level]))
          << what << ": level " << level << " (u " << u[level] << ") gave token " << y_got
          << (got_ends ? " (emitted)" : "") << ", the CPU " << y_expected
          << (expected_ends ? " (emitted)" : "");
      ++*boundary;
      return;
    }
    if (got_ends) return;
    ASSERT_EQ(got.path[level], expected.path[level]) << what << ": path[" << level << "]";
    node = got.path[level];
  }
}

// Every entry of `paths` not on a device path (the first `accepted` entries of each tree's
// share) must keep the poison.
void check_paths_untouched(const std::string& what, const TreeBatch& b, const TreeResults& r) {
  std::vector<bool> written(b.path_entries, false);
  for (std::size_t c = 0; c < b.specs.size(); ++c)
    for (int j = 0; j < r.out[2 * c] && j < b.specs[c].n_nodes; ++j)
      written[b.specs[c].first_path + j] = true;
  for (int i = 0; i < b.path_entries; ++i)
    if (!written[i]) {
      ASSERT_EQ(r.paths[i], kPoisonInt) << what << ": paths[" << i << "] written";
    }
}

TEST(CudaSampling, VerifyTreesSamplingMatchesVerifyTreeSamplingWith) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(109);
  long boundary = 0, trees = 0;
  for (const int vocab : {50, 1000, 32000}) {
    // Mostly concentrated rows (temperature 0.25, top-k 8) so that drafted tokens are often
    // accepted, some wider ones (top-k 40, top-p).
    const SamplingParams params_a{0.25f, 8, 1.0f}, params_b{1.0f, 40, 0.9f};
    // A chain's rows are peaked (one token far above the rest) half of the time: deep walks.
    auto fresh_row = [&](bool chain) {
      const double kind = uniform01(rng);
      const auto x = make_logits(vocab,
                                 chain && kind < 0.5 ? RowKind::kPeaked
                                 : kind < 0.8        ? RowKind::kNormal
                                                     : RowKind::kMasked,
                                 rng);
      std::vector<float> p(vocab);
      logits_to_probs(x.data(), vocab, uniform01(rng) < 0.7 ? params_a : params_b, p.data());
      return p;
    };
    TreeBatch b;
    b.vocab = vocab;
    b.add_row(std::vector<float>(vocab, 0.25f));  // a row no tree uses
    // A drafted token for a child of a node whose row is p: mostly likely tokens (sampled from
    // p or its argmax), sometimes a token of probability 0 or any token.
    auto draft_token = [&](const std::vector<float>& p) {
      const double r = uniform01(rng);
      if (r < 0.3) return sample_from(p.data(), vocab, uniform01(rng));
      if (r < 0.85) return argmax(p.data(), vocab);
      if (r < 0.92) {
        const int t = static_cast<int>(rng() % vocab);
        if (p[t] == 0.0f) return t;
      }
      return static_cast<int>(rng() % vocab);
    };
    // Each node has its own row: fewer and smaller trees for the large vocabulary.
    const int n_trees = vocab > 10000 ? 100 : 240, max_nodes = vocab > 10000 ? 12 : 30;
    for (int c = 0; c < n_trees; ++c) {
      // Shapes: 0 nodes (plain sampling), chains, random trees, wide trees, trees with
      // duplicate sibling tokens.
      const int shape = c % 5;
      int n = 0;
      if (shape == 1) n = 1 + static_cast<int>(rng() % 7);
      if (shape == 2 || shape == 4) n = 2 + static_cast<int>(rng() % (max_nodes - 1));
      if (shape == 3) n = 8 + static_cast<int>(rng() % (max_nodes - 7));
      const int node_begin = static_cast<int>(b.tokens.size());
      const int first_row = b.n_rows();
      std::vector<std::vector<float> > rows = {fresh_row(shape == 1)};  // the root's, node i's
      std::vector<int> depth;
      for (int i = 0; i < n; ++i) {
        int parent = -1;
        if (shape == 1) parent = i - 1;
        if (shape == 2 || shape == 4)  // often the previous node: deeper trees
          parent = uniform01(rng) < 0.4 ? i - 1 : static_cast<int>(rng() % (i + 1)) - 1;
        if (shape == 3) parent = i < 6 ? -1 : static_cast<int>(rng() % 6);
        int token = draft_token(rows[parent + 1]);
        if (shape == 4 && uniform01(rng) < 0.5) {  // the token of an earlier sibling
          for (int s = 0; s < i; ++s)
            if (b.parents[node_begin + s] == parent) token = b.tokens[node_begin + s];
        }
        b.tokens.push_back(token);
        b.parents.push_back(parent);
        depth.push_back(parent < 0 ? 1 : depth[parent] + 1);
        rows.push_back(fresh_row(shape == 1));
      }
      for (const auto& p : rows) b.add_row(p);
      const int levels = 1 + (n > 0 ? *std::max_element(depth.begin(), depth.end()) : 0);
      std::vector<double> u(levels);
      for (double& v : u) v = uniform01(rng);
      if (c % 37 == 5) u[0] = 0.0;  // the extremes
      if (c % 37 == 6) u[0] = 1.0 - 0x1.0p-53;
      b.add_spec(node_begin, first_row, u);
    }
    // Two trees with a row without mass (the CPU's sample_from throws; the device emits -1):
    // the root's row all zeros; and a root row with all its mass on token 3, drafted by two
    // siblings (the first is taken), whose row is all zeros.
    const int zero_root = static_cast<int>(b.specs.size());
    {
      const int node_begin = static_cast<int>(b.tokens.size()), first_row = b.n_rows();
      b.tokens.insert(b.tokens.end(), {1, 2});
      b.parents.insert(b.parents.end(), {-1, 0});
      b.add_row(std::vector<float>(vocab, 0.0f));
      b.add_row(fresh_row(false));
      b.add_row(fresh_row(false));
      b.add_spec(node_begin, first_row, {0.3, 0.3, 0.3});
    }
    {
      const int node_begin = static_cast<int>(b.tokens.size()), first_row = b.n_rows();
      b.tokens.insert(b.tokens.end(), {3, 3});
      b.parents.insert(b.parents.end(), {-1, -1});
      std::vector<float> one_hot(vocab, 0.0f);
      one_hot[3] = 1.0f;
      b.add_row(one_hot);
      b.add_row(std::vector<float>(vocab, 0.0f));
      b.add_row(fresh_row(false));
      b.add_spec(node_begin, first_row, {0.7, 0.7});
    }

    const TreeResults r = run_trees(b);
    const std::string v_what = "vocab " + std::to_string(vocab);
    check_paths_untouched(v_what, b, r);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(r.out[2 * zero_root], 0) << v_what << ": root row without mass";
    EXPECT_EQ(r.out[2 * zero_root + 1], -1) << v_what << ": root row without mass";
    EXPECT_EQ(r.out[2 * zero_root + 2], 1) << v_what << ": node row without mass";
    EXPECT_EQ(r.out[2 * zero_root + 3], -1) << v_what << ": node row without mass";
    EXPECT_EQ(r.paths[b.specs[zero_root + 1].first_path], 0) << v_what << ": first sibling";

    int partial = 0, deep = 0, to_leaf = 0, duplicate_taken = 0;
    for (int c = 0; c < n_trees; ++c) {
      const std::string what = v_what + " tree " + std::to_string(c) + " (" +
                               std::to_string(b.specs[c].n_nodes) + " nodes)";
      const TreeVerdict got = device_tree_verdict(b, r, c);
      check_tree_walk(what, b, c, got);
      if (::testing::Test::HasFatalFailure()) return;
      compare_tree(what, b, c, got, cpu_tree_verdict(b, c), &boundary);
      if (::testing::Test::HasFatalFailure()) return;
      ++trees;
      // Coverage: how far the walks went.
      const TreeView tree = b.view(c);
      partial += got.accepted > 0;
      deep += got.accepted >= 3;
      if (got.accepted > 0) {
        const int last = got.path[got.accepted - 1];
        to_leaf += std::find(tree.parents, tree.parents + tree.n, last) == tree.parents + tree.n;
      }
      for (int j = 0; j < got.accepted; ++j) {
        const int node = got.path[j];
        for (int s = node + 1; s < tree.n; ++s)
          duplicate_taken +=
              tree.parents[s] == tree.parents[node] && tree.tokens[s] == tree.tokens[node];
      }
    }
    std::printf(
        "  %s: %d trees, %d with an accepted node, %d with 3 or more, %d to a leaf, "
        "%d duplicate siblings passed over\n",
        v_what.c_str(), n_trees, partial, deep, to_leaf, duplicate_taken);
    EXPECT_GE(partial, n_trees / 3) << v_what;
    EXPECT_GE(deep, n_trees / 25) << v_what;
    EXPECT_GE(to_leaf, n_trees / 20) << v_what;
    EXPECT_GE(duplicate_taken, n_trees / 20) << v_what;
  }
  std::printf("  %ld trees, %ld differing at a cumulative boundary\n", trees, boundary);
  // Random uniforms land within 1e-12 of a boundary with probability ~1e-12 * vocab per level.
  EXPECT_LE(boundary, 1);
}

TEST(CudaSampling, VerifiedTreeOutputIsDistributedAsTheTarget) {
  // A fixed tree on a 6-token vocabulary and fixed distributions, verified many times with
  // fresh uniforms. The emitted sequence (the accepted path's tokens, then the token) must be
  // distributed as sampling the target step by step: each possible sequence (a prefix-free
  // set: the walks of the rule) has the product of its tokens' probabilities, and the first
  // emitted token follows the root's row (chi-square at p = 0.001 each). Power checks on the
  // same uniforms: a rule that tests the first child with its probability and otherwise
  // samples the root's row again (the first token), descending into the last of two sibling
  // duplicates, and one uniform for every level (the sequence) must fail by a wide margin.
  REQUIRE_DEVICE();
  const int vocab = 6, n = 60000;
  // node:          0   1   2   3  4  5  6
  // parent:       -1  -1  -1   0  1  2  3
  // token:         0   2   2   1  3  4  0   (node 2 duplicates node 1: never reached)
  const std::vector<std::int32_t> tokens = {0, 2, 2, 1, 3, 4, 0};
  const std::vector<std::int32_t> parents = {-1, -1, -1, 0, 1, 2, 3};
  const int n_nodes = static_cast<int>(tokens.size()), levels = 4;  // depth 3
  std::mt19937_64 rng(110);
  // Logits uniform in [-1, 1], top-k 5 (one token of each row has probability 0); node 2's row
  // has node 1's logits reversed, so that the duplicates lead to different distributions. Tokens
  // 0 and 2 are kept at the root.
  std::vector<std::vector<float> > logits(n_nodes + 1, std::vector<float>(vocab));
  std::uniform_real_distribution<float> spread(-1.0f, 1.0f);
  for (auto& x : logits)
    for (float& v : x) v = spread(rng);
  logits[0][0] = 1.0f;
  logits[0][2] = 0.9f;
  std::reverse_copy(logits[2].begin(), logits[2].end(), logits[3].begin());
  std::vector<float> probs;  // the root's row, then node i's
  for (const auto& x : logits) {
    std::vector<float> p(vocab);
    logits_to_probs(x.data(), vocab, SamplingParams{1.0f, 5, 1.0f}, p.data());
    probs.insert(probs.end(), p.begin(), p.end());
  }
  const float* root_row = probs.data();
  auto row_after = [&](int node) {
    return probs.data() + static_cast<std::size_t>(node + 1) * vocab;
  };

  // The cells: every sequence the rule can emit, with its probability.
  std::map<std::vector<int>, int> cell_of;
  std::vector<float> cell_p;
  const TreeView tree{tokens.data(), parents.data(), n_nodes};
  std::function<void(int, std::vector<int>, double)> enumerate =
      [&](int node, std::vector<int> prefix, double mass) {
        for (int y = 0; y < vocab; ++y) {
          const double p = row_after(node)[y];
          if (p == 0.0) continue;
          std::vector<int> seq = prefix;
          seq.push_back(y);
          const int child = child_with_token(tree, node, y);
          if (child >= 0) {
            enumerate(child, seq, mass * p);
          } else {
            cell_of[seq] = static_cast<int>(cell_p.size());
            cell_p.push_back(static_cast<float>(mass * p));
          }
        }
      };
  enumerate(-1, {}, 1.0);
  ASSERT_GE(*std::min_element(cell_p.begin(), cell_p.end()) * n, 5.0) << "cells too small";

  std::vector<cuda::TreeSpec> specs(n);
  std::vector<double> uniforms(static_cast<std::size_t>(levels) * n);
  for (int c = 0; c < n; ++c) {
    specs[c] = cuda::TreeSpec{n_nodes, 0, 0, levels * c, (levels - 1) * c};
    for (int l = 0; l < levels; ++l) uniforms[levels * c + l] = uniform01(rng);
  }
  auto d_probs = upload(probs);
  auto d_specs = upload(specs);
  auto d_tokens = upload(tokens), d_parents = upload(parents);
  auto d_u = upload(uniforms);
  auto d_out = poisoned<std::int32_t>(2 * static_cast<std::size_t>(n), 0x7f);
  auto d_paths = poisoned<std::int32_t>((levels - 1) * static_cast<std::size_t>(n), 0x7f);
  cuda::verify_trees_sampling(stream(), d_probs.as<float>(), vocab, d_specs.as<cuda::TreeSpec>(), n,
                              d_tokens.as<std::int32_t>(), d_parents.as<std::int32_t>(),
                              d_u.as<double>(), d_out.as<std::int32_t>(),
                              d_paths.as<std::int32_t>());
  const auto out = download<std::int32_t>(d_out, 2 * static_cast<std::size_t>(n));
  const auto paths = download<std::int32_t>(d_paths, (levels - 1) * static_cast<std::size_t>(n));

  // A walk with a variant of the rule: `last_duplicate` descends into the last sibling with the
  // token, `one_uniform` uses level 0's uniform at every level.
  auto walk = [&](const double* u, bool last_duplicate, bool one_uniform) {
    std::vector<int> seq;
    int node = -1;
    while (true) {
      const int y = sample_from(row_after(node), vocab, u[one_uniform ? 0 : seq.size()]);
      seq.push_back(y);
      int child = -1;
      for (int i = 0; i < n_nodes; ++i)
        if (parents[i] == node && tokens[i] == y && (child < 0 || last_duplicate)) child = i;
      if (child < 0) return seq;
      node = child;
    }
  };

  const int cells = static_cast<int>(cell_p.size());
  std::vector<long> seq_count(cells, 0), wrong_dup(cells, 0), wrong_u(cells, 0);
  std::vector<long> first(vocab, 0), wrong_first(vocab, 0);
  long mismatches = 0, unknown = 0, wrong_unknown = 0;
  for (int c = 0; c < n; ++c) {
    const int accepted = out[2 * c], token = out[2 * c + 1];
    ASSERT_TRUE(accepted >= 0 && accepted < levels) << "tree " << c << ": accepted " << accepted;
    ASSERT_TRUE(token >= 0 && token < vocab) << "tree " << c << ": token " << token;
    std::vector<int> seq;
    TreeVerdict got;
    got.accepted = accepted;
    got.token = token;
    for (int j = 0; j < accepted; ++j) {
      const int node = paths[(levels - 1) * c + j];
      ASSERT_TRUE(node >= 0 && node < n_nodes) << "tree " << c << ": path[" << j << "]";
      got.path[j] = node;
      seq.push_back(tokens[node]);
    }
    seq.push_back(token);
    const double* u = uniforms.data() + levels * c;
    const TreeVerdict expected = verify_tree_sampling_with(
        tree, [&](int node, int level) { return sample_from(row_after(node), vocab, u[level]); });
    mismatches +=
        got.accepted != expected.accepted || got.token != expected.token ||
        !std::equal(got.path.begin(), got.path.begin() + got.accepted, expected.path.begin());
    const auto it = cell_of.find(seq);
    if (it == cell_of.end()) {
      ++unknown;
    } else {
      ++seq_count[it->second];
    }
    ++first[seq[0]];
    for (const auto& [wrong, count] : {std::make_pair(walk(u, true, false), &wrong_dup),
                                       std::make_pair(walk(u, false, true), &wrong_u)}) {
      const auto w = cell_of.find(wrong);
      if (w == cell_of.end())
        ++wrong_unknown;
      else
        ++(*count)[w->second];
    }
    // The first token by a wrong rule: the first child is accepted with its probability (u_0 <
    // p(token)); else the root's row is sampled again with u_1 (the child not excluded).
    const int t0 = tokens[0];
    ++wrong_first[u[0] < root_row[t0] ? t0 : sample_from(root_row, vocab, u[1])];
  }
  EXPECT_LE(mismatches, 1) << "device results differing from verify_tree_sampling_with";
  EXPECT_EQ(unknown, 0) << "emitted sequences the rule cannot produce";

  int df = 0;
  long impossible = 0;
  const double critical_seq = chi2_critical_001(cells - 1);
  const double stat = chi_square(seq_count, cell_p, n - unknown, &df, &impossible);
  std::printf("  emitted sequence:       chi2 %9.2f  df %d  critical(0.001) %.2f\n", stat, df,
              critical_seq);
  EXPECT_LT(stat, critical_seq);
  const std::vector<float> p_root(root_row, root_row + vocab);
  const double stat_first = chi_square(first, p_root, n, &df, &impossible);
  const double critical_first = chi2_critical_001(df);
  std::printf("  first token:            chi2 %9.2f  df %d  critical(0.001) %.2f\n", stat_first, df,
              critical_first);
  EXPECT_EQ(impossible, 0) << "first tokens of root probability 0 were emitted";
  EXPECT_LT(stat_first, critical_first);

  long ignored = 0;
  const double dup_stat = chi_square(wrong_dup, cell_p, n, &df, &ignored);
  const double u_stat = chi_square(wrong_u, cell_p, n, &df, &ignored);
  const double first_stat = chi_square(wrong_first, p_root, n, &df, &ignored);
  std::printf(
      "  wrong: last duplicate  chi2 %9.2f; one uniform chi2 %9.2f; first child tested "
      "then p resampled chi2 %9.2f (%ld sequences outside the cells)\n",
      dup_stat, u_stat, first_stat, wrong_unknown);
  EXPECT_GT(dup_stat, 10.0 * critical_seq) << "no power against the last duplicate sibling";
  EXPECT_GT(u_stat, 10.0 * critical_seq) << "no power against reusing one uniform";
  EXPECT_GT(first_stat, 10.0 * critical_first) << "no power against resampling the root row";
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

TEST(CudaSampling, TreeAndTopKLaunchersRejectBadArguments) {
  REQUIRE_DEVICE();
  cuda::DeviceBuffer b(4096);
  const auto* rows = b.as<std::int32_t>();
  auto* ids = b.as<std::int32_t>() + 256;
  float* logprobs = b.as<float>() + 512;
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 100, rows, 1, 0, ids, logprobs),
               Error);  // k 0
  EXPECT_THROW(
      cuda::top_k_rows(stream(), b.as<float>(), 100, rows, 1, cuda::kMaxTopK + 1, ids, logprobs),
      Error);  // k > kMaxTopK
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 4, rows, 1, 5, ids, logprobs),
               Error);  // k > vocab
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 0, rows, 1, 1, ids, logprobs),
               Error);  // vocab 0
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 100, rows, 1, 1, nullptr, logprobs),
               Error);  // no ids
  EXPECT_THROW(cuda::verify_trees_sampling(stream(), b.as<float>(), 4, nullptr, 1, nullptr, nullptr,
                                           b.as<double>(), ids, nullptr),
               Error);  // no trees
  EXPECT_THROW(cuda::verify_trees_sampling(stream(), b.as<float>(), 0, nullptr, 0, nullptr, nullptr,
                                           nullptr, nullptr, nullptr),
               Error);  // vocab 0
  // No rows / trees: nothing to do, no launch.
  cuda::top_k_rows(stream(), nullptr, 100, nullptr, 0, 5, nullptr, nullptr);
  cuda::verify_trees_sampling(stream(), nullptr, 4, nullptr, 0, nullptr, nullptr, nullptr, nullptr,
                              nullptr);
  // Trees of 0 nodes need no tokens, parents or paths: plain sampling of the root's row.
  auto d_p = upload(std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f});
  auto d_tree = upload(std::vector<cuda::TreeSpec>{cuda::TreeSpec{0, 0, 0, 0, 0}});
  auto d_u = upload(std::vector<double>{0.5});
  auto d_out = poisoned<std::int32_t>(2, 0x7f);
  cuda::verify_trees_sampling(stream(), d_p.as<float>(), 4, d_tree.as<cuda::TreeSpec>(), 1, nullptr,
                              nullptr, d_u.as<double>(), d_out.as<std::int32_t>(), nullptr);
  const auto got = download<std::int32_t>(d_out, 2);
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 1);
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

}  // namespace

#endif  // SPECRUN_HAVE_CUDA
