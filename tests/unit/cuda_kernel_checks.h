// What the float64-reference tests of the CUDA kernels share (test_cuda_kernels,
// test_cuda_attention; label "gpu"): inputs drawn fresh every run from a seed that is printed
// and named in every failure (SPECRUN_TEST_SEED replays it), uploads and NaN-poisoned outputs on
// the kernels' stream, and the two checks: relative L2 error against a float64 reference, and
// bitwise equality with the composition a fused op replaces.
#pragma once

#ifdef SPECRUN_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/device_buffer.h"

namespace specrun::test {

inline std::uint32_t run_seed() {
  static const std::uint32_t seed = [] {
    const char* fixed = std::getenv("SPECRUN_TEST_SEED");
    const std::uint32_t s = fixed != nullptr
                                ? static_cast<std::uint32_t>(std::strtoul(fixed, nullptr, 10))
                                : std::random_device{}();
    std::cout << "test seed " << s << " (SPECRUN_TEST_SEED=" << s << " replays it)\n";
    return s;
  }();
  return seed;
}

inline std::string seed_note() {
  return " [SPECRUN_TEST_SEED=" + std::to_string(run_seed()) + "]";
}

inline std::vector<float> randn(std::size_t n, std::uint32_t salt, float scale = 1.0f) {
  std::mt19937 rng(run_seed() * 2654435761u + salt);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline cudaStream_t stream() {
  return test::device_context()->stream();
}

// Copies and fills go on the kernels' stream: the context's stream does not wait for the legacy
// default stream, and a cudaMemcpy from pageable memory may return before its DMA has landed (a
// kernel on another stream could then read stale memory; seen on an H200 as wrong outputs that
// vanished under compute-sanitizer).
template <typename T>
inline cuda::DeviceBuffer upload(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<std::size_t>(1, v.size() * sizeof(T)));
  CUDA_CHECK(
      cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  return b;
}

// A float32 output buffer of n values, filled with NaN (all bits set).
inline cuda::DeviceBuffer poisoned(std::size_t n) {
  cuda::DeviceBuffer b(std::max<std::size_t>(1, n * sizeof(float)));
  CUDA_CHECK(cudaMemsetAsync(b.get(), 0xFF, n * sizeof(float), stream()));
  return b;
}

inline std::vector<float> download(const cuda::DeviceBuffer& b, std::size_t n) {
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  std::vector<float> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

// ||out - ref|| / ||ref||; infinity when out has a NaN or an infinity.
inline double rel_l2(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline void expect_l2(const std::string& what, const std::vector<float>& out,
                      const std::vector<double>& ref, double tol) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  const double e = rel_l2(out, ref);
  std::size_t worst = 0;
  double worst_err = -1;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::isfinite(out[i]) ? std::fabs(out[i] - ref[i]) : INFINITY;
    if (err > worst_err) worst_err = err, worst = i;
  }
  EXPECT_LE(e, tol) << what << ": relative L2 error " << e << " > " << tol << "; worst element "
                    << worst << " expected " << ref[worst] << ", got " << out[worst] << seed_note();
  std::cout << "  " << what << ": rel L2 " << e << " (limit " << tol << ")\n";
}

inline void expect_bitwise(const std::string& what, const std::vector<float>& a,
                           const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " differs: " << a[i] << " vs " << b[i]
                    << seed_note();
      return;
    }
}

// Captures what `record` launches on the kernels' stream into a graph (as a step graph issues
// its launches) and replays it `times` times, each after reset(); returns what results() gives
// after each replay.
template <class Record, class Reset, class Results>
auto graph_replays(Record&& record, Reset&& reset, Results&& results, int times = 2) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  record();
  CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<decltype(results())> out;
  for (int rep = 0; rep < times; ++rep) {
    reset();
    CUDA_CHECK(cudaGraphLaunch(exec, stream()));
    out.push_back(results());
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return out;
}

}  // namespace specrun::test

#endif  // SPECRUN_HAVE_CUDA
