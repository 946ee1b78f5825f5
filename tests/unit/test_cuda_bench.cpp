// GPU benchmark (label "gpu"): decode and verify step times of a synthetic ~1.1B-parameter
// Llama (BF16, hidden 2048, 16 layers, GQA 32/8, intermediate 8192, vocab 32000) on one device,
// and the memory bandwidth they achieve against the device's measured copy bandwidth.
//
// Opt-in, because it writes a 2.2 GB checkpoint and takes about a minute: it runs only with
// SPECRUN_GPU_BENCH=1 (tests/gpu/check.sh sets it) and skips visibly otherwise.
//   SPECRUN_BENCH_DIR   where the synthetic model is written (default: the temp directory)
//   SPECRUN_BENCH_JSON  where the figures are written as JSON (optional)
// Step time = host wall clock of one LanguageModel::forward (inputs to logits on the host), the
// same span the engine's draft and verify phases measure. Achieved bandwidth = bytes the step
// must read (weights + KV cache) / step time. Copy bandwidth = 2 x bytes / time of a 1 GiB
// device-to-device cudaMemcpyAsync (read + write).
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaBench, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no GPU benchmark";
}

#else

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cuda_backend.h"
#include "dist/mpi_comm.h"
#include "dist/nccl_comm.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/synthetic.h"

namespace fs = std::filesystem;
using namespace specrun;
using Clock = std::chrono::steady_clock;

namespace {

double copy_bandwidth_gbs(cuda::DeviceContext& ctx) {
  const std::size_t bytes = std::size_t{1} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, ctx.stream()));
  cudaEvent_t start, end;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&end));
  for (int i = 0; i < 3; ++i)
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
  const int iters = 20;
  CUDA_CHECK(cudaEventRecord(start, ctx.stream()));
  for (int i = 0; i < iters; ++i)
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
  CUDA_CHECK(cudaEventRecord(end, ctx.stream()));
  CUDA_CHECK(cudaEventSynchronize(end));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(end));
  return 2.0 * static_cast<double>(bytes) * iters / (ms * 1e-3) / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST(CudaBench, DecodeAndVerifyStepsAgainstCopyBandwidth) {
  std::string why;
  if (cuda::device_count(&why) == 0)
    GTEST_SKIP() << "no CUDA device visible (" << why << "): benchmark skipped";
  const char* enabled = std::getenv("SPECRUN_GPU_BENCH");
  if (enabled == nullptr || std::string(enabled) != "1")
    GTEST_SKIP() << "set SPECRUN_GPU_BENCH=1 to run the GPU benchmark (tests/gpu/check.sh does)";

  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  nlohmann::json report;
  {
    MpiComm self(MPI_COMM_SELF);
    CudaContext cuda_ctx(0, self, self, 300.0);
    cuda::DeviceContext& ctx = cuda_ctx.device();
    const double copy_gbs = copy_bandwidth_gbs(ctx);

    const fs::path dir = std::getenv("SPECRUN_BENCH_DIR")
                             ? fs::path(std::getenv("SPECRUN_BENCH_DIR"))
                             : fs::temp_directory_path() / "specrun_bench_1b";
    SyntheticSpec spec;
    spec.hidden = 2048;
    spec.layers = 16;
    spec.heads = 32;
    spec.kv_heads = 8;
    spec.intermediate = 8192;
    spec.vocab = 32000;
    spec.max_pos = 4096;
    spec.draft_layers = 1;
    spec.dtype = DType::kBF16;
    const auto t_make = Clock::now();
    if (!fs::exists(dir / "target" / "config.json")) make_model_pair(spec, dir.string());
    const double make_s = std::chrono::duration<double>(Clock::now() - t_make).count();
    Checkpoint ckpt((dir / "target").string());
    auto owned = load_cuda_model(ckpt, cuda_ctx, cuda_ctx.tp());
    LanguageModel& model = *owned;
    const ModelConfig& cfg = model.config();
    double weight_bytes = 0;
    for (const std::string& name : ckpt.names())
      weight_bytes += static_cast<double>(ckpt.tensor(name).nbytes);

    report["device"] = ctx.description();
    report["copy_bandwidth_gbs"] = copy_gbs;
    report["weight_bytes"] = weight_bytes;
    report["model_make_s"] = make_s;
    std::cout << "device: " << ctx.description() << "\n"
              << "copy bandwidth (D2D, read+write): " << std::fixed << std::setprecision(1)
              << copy_gbs << " GB/s\n"
              << "model: " << std::setprecision(2) << weight_bytes / 1e9
              << " GB of BF16 weights, context 128 tokens\n"
              << "  batch  tokens/seq  step ms   achieved GB/s  % of copy\n";

    const int context = 128, reps = 30;
    for (int batch : {1, 8}) {
      std::vector<std::unique_ptr<KvCache> > caches;
      std::vector<std::vector<std::int32_t> > prompts;
      for (int s = 0; s < batch; ++s) {
        caches.push_back(model.new_cache(context + 16));
        std::vector<std::int32_t> p(context);
        for (int i = 0; i < context; ++i) p[i] = (i * 131 + s * 7 + 3) % cfg.vocab_size;
        prompts.push_back(std::move(p));
      }
      std::vector<SeqChunk> chunks;
      for (int s = 0; s < batch; ++s)
        chunks.push_back(SeqChunk{caches[s].get(), prompts[s].data(), context});
      std::vector<float> logits;
      model.forward(chunks, false, logits);  // prefill
      for (int window : {1, 5}) {            // decode; verify of k + 1 = 5 tokens
        std::vector<double> times;
        for (int r = 0; r < reps + 3; ++r) {
          for (int s = 0; s < batch; ++s)
            chunks[s] = SeqChunk{caches[s].get(), prompts[s].data(), window};
          const auto t0 = Clock::now();
          model.forward(chunks, window > 1, logits);
          const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
          if (r >= 3) times.push_back(dt);  // first steps warm up
          for (auto& c : caches) c->truncate(context);
        }
        const double t = median(times);
        const double kv_bytes = 2.0 * batch * cfg.num_layers * (context + window) *
                                model.kv_heads() * cfg.head_dim * sizeof(float);
        const double gbs = (static_cast<double>(weight_bytes) + kv_bytes) / t / 1e9;
        std::cout << "  " << std::setw(5) << batch << "  " << std::setw(10) << window << "  "
                  << std::setw(7) << std::setprecision(3) << t * 1e3 << "  " << std::setw(14)
                  << std::setprecision(1) << gbs << "  " << std::setw(8) << 100.0 * gbs / copy_gbs
                  << "\n";
        report["steps"].push_back({{"batch", batch},
                                   {"tokens_per_sequence", window},
                                   {"step_ms", t * 1e3},
                                   {"achieved_gbs", gbs},
                                   {"fraction_of_copy", gbs / copy_gbs}});
        // A measurement above the copy bandwidth would mean the byte count or timing is wrong.
        EXPECT_LT(gbs, 1.1 * copy_gbs) << "batch " << batch << ", window " << window;
      }
    }
    const auto& s = report["steps"];
    const double verify_over_decode = s[1]["step_ms"].get<double>() / s[0]["step_ms"].get<double>();
    report["verify_over_decode_batch1"] = verify_over_decode;
    std::cout << "verify (5 tokens) / decode, batch 1: " << std::setprecision(2)
              << verify_over_decode << "\n";
    // Speculation pays only if scoring k + 1 tokens costs about as much as decoding one.
    EXPECT_LT(verify_over_decode, 3.0);
  }
  if (const char* out = std::getenv("SPECRUN_BENCH_JSON")) std::ofstream(out) << report.dump(2);
  if (!initialized) MPI_Finalize();
}

#endif  // SPECRUN_HAVE_CUDA
