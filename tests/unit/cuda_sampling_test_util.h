// Helpers the device sampling tests share (test_cuda_sampling.cpp: transforms, argmax,
// sampling, chain verification; test_cuda_tree_sampling.cpp: top-k and tree verification):
// uploads on the compute stream, poisoned outputs, seeded logit rows of the kinds that stress
// the tie and masking rules, the cumulative-boundary check that explains a differing sample,
// and the chi-square statistics of the distribution tests. CUDA builds only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"

namespace specrun::test::sampling {

inline cuda::DeviceContext* context() {
  return test::device_context();
}

inline cudaStream_t stream() {
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

inline constexpr std::int32_t kPoisonInt = 0x7f7f7f7f;

// A uniform in [0, 1) with 53 random bits.
inline double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// ---- logits ------------------------------------------------------------------------------------

enum class RowKind { kNormal, kQuantized, kMasked, kPeaked, kFlat, kSignedZeros };
inline constexpr RowKind kRowKinds[] = {RowKind::kNormal, RowKind::kQuantized,
                                        RowKind::kMasked, RowKind::kPeaked,
                                        RowKind::kFlat,   RowKind::kSignedZeros};

// One row of logits: normal with scale 3, then
//   quantized: rounded to multiples of 0.5 (many exact ties, -0 and +0 among them);
//   masked:    ~30% of the tokens -inf, the rest quantized;
//   peaked:    one token far above the rest;
//   flat:      every logit equal (ties everywhere);
//   signed zeros: ~30% of the tokens at the top, all +0 or -0 (equal, so one tie group in id
//              order), the rest negative.
inline std::vector<float> make_logits(int vocab, RowKind kind, std::mt19937_64& rng) {
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

// The weights that count (> 0), their sequential double total, and whether u * total lies within
// 1e-12 (relative) of one of the CPU's cumulative sums.
inline bool near_cumulative_boundary(const float* w, int vocab, double u) {
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

// Upper 0.001 critical value of chi-square with df degrees of freedom (Wilson-Hilferty, as in
// test_lossless.cpp; within 1% of the table for df >= 7, erring high).
inline double chi2_critical_001(int df) {
  const double z = 3.090232306167813;
  const double h = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - h + z * std::sqrt(h), 3.0);
}

// Pearson's statistic of counts against probabilities over the cells of nonzero probability;
// draws in cells of probability 0 are counted in *impossible.
inline double chi_square(const std::vector<long>& observed, const std::vector<float>& p, long total,
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

}  // namespace specrun::test::sampling
