// CUDA backend smoke test (label "gpu"), step graphs' housekeeping (a capture the driver refuses,
// the least recently used graph making room, struct arguments in a step's signature), and the
// attention split's token groups and which heads take the latent attention, in which cache layout
// (host arithmetic: runs without a device). Without a CUDA build
// only the smoke test is built, and it skips visibly; without a device the device tests skip,
// saying why.
#include <gtest/gtest.h>

#ifdef SPECRUN_HAVE_CUDA
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda_backend.h"
#include "common/error.h"
#include "cuda_test_util.h"
#include "kernels/cuda/attention_latent.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/step_graphs.h"
#endif

TEST(Cuda, DeviceSelfTest) {
#ifndef SPECRUN_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no GPU test to run";
#else
  std::string why;
  int n = specrun::cuda::device_count(&why);
  if (n == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  EXPECT_GT(specrun::cuda::nccl_runtime_version(), 0);
  for (int d = 0; d < n; ++d) specrun::cuda::self_test(d);
#endif
}

#ifdef SPECRUN_HAVE_CUDA
namespace {

using namespace specrun;

// Fine when launched one by one; inside a stream capture a refused call (a capture cannot wait
// for its own stream), which invalidates the capture.
void wait_for_stream(cudaStream_t stream) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Steps of one recorded copy (in -> out, `bytes`), optionally followed by wait_for_stream; each
// checks that out holds the step's fresh input.
struct CopySteps {
  static constexpr int kN = 1024;
  static constexpr std::size_t kBytes = kN * sizeof(float);
  cudaStream_t stream = test::device_context()->stream();
  cuda::DeviceBuffer in{kBytes}, out{kBytes};
  std::vector<float> host = std::vector<float>(kN), back = std::vector<float>(kN);
  int salt = 0;

  // The step's launches only (no inputs, no check).
  void record(cuda::StepGraphs& graphs, std::size_t bytes, bool wait,
              const cuda::StepGraphs::Agree& agree) {
    graphs.begin(true);
    graphs.launch(&cuda::memcpy_async, stream, out.get(), static_cast<const void*>(in.get()), bytes,
                  cudaMemcpyDeviceToDevice);
    if (wait) graphs.launch(&wait_for_stream, stream);
    graphs.end(stream, agree);
  }
  void run(cuda::StepGraphs& graphs, std::size_t bytes, bool wait = false) {
    for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i + 7 * ++salt);
    CUDA_CHECK(cudaMemcpyAsync(in.get(), host.data(), kBytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, kBytes, stream));  // NaN
    record(graphs, bytes, wait, {});
    CUDA_CHECK(cudaMemcpyAsync(back.data(), out.get(), bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(0, std::memcmp(back.data(), host.data(), bytes)) << "step " << salt;
  }
};

// Sets split.floats floats of split.partial to `value`: a launch whose arguments are a struct.
void fill_split(cudaStream_t stream, cuda::AttentionSplit split, int value) {
  CUDA_CHECK(cudaMemsetAsync(split.partial, value, split.floats * sizeof(float), stream));
}

}  // namespace

TEST(Cuda, StepGraphsRunAStepWhoseCaptureFailsOneByOne) {
  REQUIRE_DEVICE();
  CopySteps copies;
  cuda::StepGraphStats stats;
  cuda::StepGraphs graphs(stats);
  // First sight: one by one. Second: the capture fails, and the step runs one by one; then no
  // capture is tried again.
  for (int s = 0; s < 4; ++s) copies.run(graphs, CopySteps::kBytes, /*wait=*/true);
  EXPECT_EQ(stats.steps, 4);
  EXPECT_EQ(stats.eager, 4);
  EXPECT_EQ(stats.captures, 0);
  EXPECT_EQ(stats.capture_failures, 1);
  EXPECT_NE(stats.capture_error.find("cudaStreamSynchronize"), std::string::npos)
      << stats.capture_error;
  EXPECT_EQ(graphs.graphs(), 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed capture's error was left behind";

  // With collectives of several ranks (an agreement) the failure ends the step, naming it.
  cuda::StepGraphStats group_stats;
  cuda::StepGraphs group(group_stats);
  const cuda::StepGraphs::Agree agree = [](std::int64_t choice) { return choice; };
  copies.record(group, CopySteps::kBytes, true, agree);
  EXPECT_THROW(copies.record(group, CopySteps::kBytes, true, agree), Error);
  EXPECT_EQ(group_stats.capture_failures, 0);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
  CUDA_CHECK(cudaStreamIsCapturing(copies.stream, &capturing));
  EXPECT_EQ(capturing, cudaStreamCaptureStatusNone) << "the stream was left capturing";
  (void)cudaGetLastError();
  copies.run(graphs, CopySteps::kBytes);  // the stream still works
}

TEST(Cuda, StepGraphsBeyondTheirRoomEvictTheLeastRecentlyUsed) {
  REQUIRE_DEVICE();
  CopySteps copies;
  cuda::StepGraphStats stats;
  cuda::StepGraphs graphs(stats, /*max_graphs=*/2);
  // Shapes A, B, C (0, 1, 2): copies of a quarter, a half and all of the buffer.
  auto step = [&](int shape) { copies.run(graphs, CopySteps::kBytes >> (2 - shape)); };
  // A A B B: two graphs, the room full. C C: C's capture evicts A (used least recently). A A:
  // A seen anew, then captured, evicting B. C: still kept, replayed.
  for (int shape : {0, 0, 1, 1, 2, 2, 0, 0, 2}) step(shape);
  EXPECT_EQ(stats.captures, 4);
  EXPECT_EQ(stats.evicted, 2);
  EXPECT_EQ(stats.replays, 1);
  EXPECT_EQ(stats.eager, 4);
  EXPECT_EQ(graphs.graphs(), 2);
  step(1);  // B was evicted: first sight again, one by one
  EXPECT_EQ(stats.eager, 5);
  EXPECT_EQ(stats.replays, 1);
}

// A step's signature holds every field of a struct argument: steps that differ only in
// AttentionSplit::floats are two graphs, each replaying its own size.
TEST(Cuda, StepGraphsTellStructArgumentsApart) {
  REQUIRE_DEVICE();
  cudaStream_t stream = test::device_context()->stream();
  constexpr std::size_t kFloats = 64;
  cuda::DeviceBuffer buf(kFloats * sizeof(float));
  cuda::StepGraphStats stats;
  cuda::StepGraphs graphs(stats);
  std::vector<unsigned char> back(kFloats * sizeof(float));
  constexpr int kValue = 0x5a;
  int step = 0;
  for (std::size_t floats : {16, 16, 16, 32, 32, 32}) {
    ++step;
    CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, buf.bytes(), stream));
    graphs.begin(true);
    graphs.launch(&fill_split, stream, cuda::AttentionSplit{buf.as<float>(), 2, floats}, kValue);
    graphs.end(stream);
    CUDA_CHECK(
        cudaMemcpyAsync(back.data(), buf.get(), back.size(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::size_t set = 0;
    while (set < back.size() && back[set] == kValue) ++set;
    EXPECT_EQ(set, floats * sizeof(float)) << "step " << step;
  }
  EXPECT_EQ(stats.eager, 2);
  EXPECT_EQ(stats.captures, 2);
  EXPECT_EQ(stats.replays, 2);
}

// The tokens of one launch group: as many as the buffer holds states of (at least one), all of
// them unsplit; a buffer for less than one token, or a split without one, refused.
TEST(Cuda, AttentionSplitGroupsFitTheStatesBuffer) {
  const int heads = 8, hd = 64, chunks = 4;
  const std::size_t one = cuda::attention_split_floats(1, heads, hd, chunks);
  EXPECT_EQ(one, std::size_t{8 * 4 * 66});
  EXPECT_EQ(cuda::attention_split_floats(5, heads, hd, chunks), 5 * one);
  float* p = reinterpret_cast<float*>(std::uintptr_t{256});  // never dereferenced
  auto split = [&](std::size_t floats, int c) { return cuda::AttentionSplit{p, c, floats}; };
  auto group = [&](int n, std::size_t floats) {
    return cuda::attention_split_group(n, heads, hd, split(floats, chunks));
  };
  EXPECT_EQ(group(9, 9 * one), 9);
  EXPECT_EQ(group(9, 100 * one), 9);
  EXPECT_EQ(group(9, 3 * one + one / 2), 3);
  EXPECT_EQ(group(9, one), 1);
  EXPECT_EQ(group(1, one), 1);
  EXPECT_EQ(cuda::attention_split_group(9, heads, hd, cuda::AttentionSplit{}), 9);
  EXPECT_THROW(group(9, one - 1), Error);
  EXPECT_THROW(cuda::attention_split_group(9, heads, hd, split(9 * one, 0)), Error);
  EXPECT_THROW(cuda::attention_split_group(9, heads, hd, split(9 * one, 65536)), Error);
  EXPECT_THROW(cuda::attention_split_group(9, heads, hd, cuda::AttentionSplit{nullptr, 2, one}),
               Error);
}

// Only heads the grouped-query kernels cannot run (MLA's: key_dim != value_dim, values inside the
// keys, an explicit scale) take cuda::latent_attention; Llama/Qwen3 heads keep their kernels and,
// with keys and values of one width, the cache layout those kernels read ([layers][K, V][capacity]
// [row]); MLA's cache is one latent row per token and layer. The latent kernels refuse bad shapes
// before launching anything.
TEST(Cuda, OnlyMlaHeadsTakeTheLatentAttentionAndItsLayout) {
  EXPECT_FALSE(CudaBackend::latent_heads(AttentionHeads{32, 8, 128, 128}));
  EXPECT_FALSE(CudaBackend::latent_heads(AttentionHeads{4, 2, 64, 64}));
  EXPECT_TRUE(CudaBackend::latent_heads(AttentionHeads{16, 1, 576, 512, 0.07f, true}));
  EXPECT_TRUE(CudaBackend::latent_heads(AttentionHeads{4, 2, 192, 128}));
  EXPECT_TRUE(CudaBackend::latent_heads(AttentionHeads{4, 2, 64, 64, 0.1f}));
  CudaBackend::KvBlock dense;
  dense.capacity = 100;
  dense.key_floats = dense.value_floats = 8 * 128;
  for (int layer = 0; layer < 3; ++layer)
    for (int which : {0, 1})
      EXPECT_EQ(dense.offset(layer, which), (std::size_t{2} * layer + which) * 100 * 8 * 128);
  CudaBackend::KvBlock latent;
  latent.capacity = 100;
  latent.key_floats = 576;
  EXPECT_EQ(latent.offset(3, 0), std::size_t{3} * 100 * 576);
  float* p = reinterpret_cast<float*>(std::uintptr_t{256});  // never dereferenced
  const auto* slots = reinterpret_cast<const cuda::KvSlot*>(p);
  EXPECT_THROW(cuda::latent_attention(nullptr, p, 1, 4, 1, 1025, 512, 0.1f, true, slots, 0, p),
               Error);
  EXPECT_THROW(cuda::latent_attention(nullptr, p, 1, 4, 2, 576, 512, 0.1f, true, slots, 0, p),
               Error);
  EXPECT_THROW(cuda::latent_attention(nullptr, p, 1, 4, 1, 512, 576, 0.1f, true, slots, 0, p),
               Error);
  EXPECT_THROW(cuda::latent_attention(nullptr, p, 1, 4, 1, 576, 512, 0.0f, true, slots, 0, p),
               Error);
  EXPECT_THROW(cuda::latent_kv_append(nullptr, p, nullptr, 1, 576, 64, slots, 0), Error);
  EXPECT_THROW(cuda::kv_keep_split(nullptr, p, 10, 2, 576, 0, 8,
                                   reinterpret_cast<const std::int32_t*>(p), 3, p),
               Error);
}

#endif  // SPECRUN_HAVE_CUDA
