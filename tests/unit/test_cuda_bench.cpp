// GPU benchmark (label "gpu"): how close a forward step of a synthetic ~1.1B-parameter Llama
// (BF16, hidden 2048, 16 layers, GQA 32/8, intermediate 8192, vocab 32000) comes to the device's
// memory bandwidth, measured side by side in one run:
//   copy bandwidth  2 x bytes / time of a 1 GiB device-to-device cudaMemcpyAsync (read + write);
//   cases           decode (1 token per sequence), verify of a chain (k + 1 = 5 tokens per
//                   sequence, all logits), verify of a 32-node token tree (root + 32 nodes, all
//                   logits), at batch 1 and 8 (the tree at batch 1), each with step graphs off
//                   (launch by launch) and on (kernels/cuda/step_graphs.h), every case from a
//                   cache of 128 tokens;
//   per case        host enqueue time (the forward call returning, the stream idle before it),
//                   device time (CUDA events around the call), step time (call + wait), and the
//                   achieved bandwidth = bytes the step must read (weights + KV cache) / device
//                   time, as a fraction of the copy bandwidth;
//   instrumentation a greedy decode loop (forward, argmax on the device, ids to the host) with
//                   and without the engine's per-step phase timing (engine/step_timer.h: host
//                   clocks, CPU rows and the device marks of the device rows), in alternating
//                   rounds: the overhead in % of the step.
// Opt-in, because it writes a 2.2 GB checkpoint: runs only with SPECRUN_GPU_BENCH=1
// (tests/gpu/check.sh sets it) and skips visibly otherwise.
//   SPECRUN_BENCH_DIR   where the synthetic model is written (default: the temp directory)
//   SPECRUN_BENCH_JSON  where the figures are written as JSON (optional)
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaBench, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no GPU benchmark";
}

#else

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cuda_backend.h"
#include "backend/cuda_timeline.h"
#include "dist/mpi_comm.h"
#include "dist/nccl_comm.h"
#include "engine/step_timer.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/synthetic.h"
#include "spec/token_ops.h"

namespace fs = std::filesystem;
using namespace specrun;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A timing event pair (cudaEventElapsedTime).
struct EventPair {
  cudaEvent_t a = nullptr, b = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
  }
  ~EventPair() {
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
  }
  float ms() const {
    float v = 0;
    CUDA_CHECK(cudaEventElapsedTime(&v, a, b));
    return v;
  }
};

double copy_bandwidth_gbs(cuda::DeviceContext& ctx) {
  const std::size_t bytes = std::size_t{1} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, ctx.stream()));
  EventPair ev;
  for (int i = 0; i < 3; ++i)
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
  const int iters = 20;
  CUDA_CHECK(cudaEventRecord(ev.a, ctx.stream()));
  for (int i = 0; i < iters; ++i)
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
  CUDA_CHECK(cudaEventRecord(ev.b, ctx.stream()));
  CUDA_CHECK(cudaEventSynchronize(ev.b));
  return 2.0 * static_cast<double>(bytes) * iters / (ev.ms() * 1e-3) / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Case {
  std::string name;
  int batch, tokens;  // tokens per sequence
  bool tree;          // tokens = root + nodes of a tree (batch 1)
};

// A tree of `nodes` nodes under a root at slot `root`: node i's parent is node (i - 1) / 4 for
// i >= 1 (the root for the first four), parents as cache slots (kv_cache.h).
std::vector<std::int32_t> tree_parents(int root, int nodes) {
  std::vector<std::int32_t> p = {kChainParent};
  for (int i = 0; i < nodes; ++i) p.push_back(i < 4 ? root : root + 1 + (i - 4) / 4);
  return p;
}

struct Measured {
  double host_ms, device_ms, step_ms;
};

// Runs `reps` steps of one case (after 3 of warm-up), each from a cache of `context` tokens.
Measured run_case(LanguageModel& model, CudaContext& ctx, const Case& c,
                  std::vector<std::unique_ptr<KvCache> >& caches,
                  const std::vector<std::vector<std::int32_t> >& tokens, int context, int reps) {
  std::vector<SeqChunk> chunks;
  const std::vector<std::int32_t> parents = tree_parents(context, c.tokens - 1);
  for (int s = 0; s < c.batch; ++s)
    chunks.push_back(
        SeqChunk{caches[s].get(), tokens[s].data(), c.tokens, c.tree ? parents.data() : nullptr});
  const ForwardRequest request{c.tokens > 1, {}};
  std::vector<double> host, device, step;
  EventPair ev;
  for (int r = 0; r < reps + 3; ++r) {
    model.synchronize();  // an idle stream: the host time below is the launches alone
    const auto t0 = Clock::now();
    CUDA_CHECK(cudaEventRecord(ev.a, ctx.stream()));
    model.forward(chunks, request);
    const double h = ms_since(t0);
    CUDA_CHECK(cudaEventRecord(ev.b, ctx.stream()));
    model.synchronize();
    const double w = ms_since(t0);
    if (r >= 3) {
      host.push_back(h);
      device.push_back(ev.ms());
      step.push_back(w);
    }
    for (auto& cache : caches) cache->truncate(context);
  }
  return Measured{median(host), median(device), median(step)};
}

// Greedy decode steps as the engine takes them: forward of one token per sequence, argmax on
// the device, the ids to the host. With `timed`, each step is wrapped in the engine's phase
// timing (StepTimer: verify and sample phases, the row appended as the engine does, and the
// device marks of `device`, resolved after the last step as the engine does after a batch; their
// mean device verify time goes to *device_verify_ms).
double decode_loop_ms(LanguageModel& model, TokenOps& ops, Communicator& comm, KvCache& cache,
                      int context, int steps, bool timed, DevicePhaseLog* device = nullptr,
                      double* device_verify_ms = nullptr) {
  std::vector<std::int32_t> token = {7}, next(1);
  const std::vector<int> rows = {0};
  std::vector<float> timing_rows, cpu_rows, device_rows;
  timing_rows.reserve(static_cast<std::size_t>(steps) * kNumPhases);
  cpu_rows.reserve(static_cast<std::size_t>(steps) * kNumCpuColumns);
  device_rows.reserve(static_cast<std::size_t>(steps) * kNumDeviceColumns);
  if (device != nullptr) device->reserve(static_cast<std::size_t>(steps), 3);
  ThreadWaitClock wait;
  model.synchronize();
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    SeqChunk chunk{&cache, token.data(), 1};
    if (timed) {
      StepTimer timer(comm, &wait, device);
      timer.begin(kPhaseVerify);
      const ForwardResult out = model.forward({&chunk, 1}, ForwardRequest{});
      timer.end();
      timer.begin(kPhaseSample);
      ops.argmax(out.logits, rows, next);
      timer.end();
      timer.finish(timing_rows, cpu_rows);
    } else {
      const ForwardResult out = model.forward({&chunk, 1}, ForwardRequest{});
      ops.argmax(out.logits, rows, next);
    }
    token[0] = next[0];
  }
  if (timed && device != nullptr && device->on()) device->resolve(device_rows);
  const double ms = ms_since(t0) / steps;
  if (device_verify_ms != nullptr && !device_rows.empty()) {
    double sum = 0;
    for (std::size_t i = 1; i < device_rows.size(); i += kNumDeviceColumns) sum += device_rows[i];
    *device_verify_ms = sum / static_cast<double>(device_rows.size() / kNumDeviceColumns);
  }
  cache.truncate(context);
  return ms;
}

// Device microseconds per launch: `launch` captured kLaunches times in a graph (as a step
// graph issues it), replayed kReplays times after one warm-up replay.
template <class Launch>
double us_per_launch(cudaStream_t stream, Launch&& launch) {
  constexpr int kLaunches = 40, kReplays = 5;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunches; ++i) launch(i);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  EventPair ev;
  CUDA_CHECK(cudaEventRecord(ev.a, stream));
  for (int r = 0; r < kReplays; ++r) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaEventRecord(ev.b, stream));
  CUDA_CHECK(cudaEventSynchronize(ev.b));
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  return 1e3 * ev.ms() / (kLaunches * kReplays);
}

// `copies` device copies of `bytes` random bytes (launches rotate through them, so that a
// matrix smaller than the 60 MB L2 is read from memory, as in a step).
std::vector<cuda::DeviceBuffer> random_copies(std::size_t bytes, int copies, std::uint32_t seed) {
  std::vector<std::uint16_t> host(bytes / 2);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::uint16_t& v : host) {  // BF16 values of moderate size, never NaN
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v = static_cast<std::uint16_t>(0x3c00 | (x & 0x83ff));
  }
  std::vector<cuda::DeviceBuffer> out;
  for (int c = 0; c < copies; ++c) {
    out.emplace_back(bytes);
    CUDA_CHECK(cudaMemcpy(out.back().get(), host.data(), bytes, cudaMemcpyHostToDevice));
  }
  return out;
}

int copies_for(std::size_t bytes) {
  return static_cast<int>(std::max<std::size_t>(1, (std::size_t{200} << 20) / bytes + 1));
}

// The ops of one layer of the benchmark model (and lm_head), each timed alone at n tokens of one
// sequence: what a step's device time is made of. Rows: op, tokens, us, GB/s (bytes each launch
// must read and write), % of copy bandwidth.
nlohmann::json op_breakdown(cudaStream_t stream, double copy_gbs, std::ostream& log) {
  const int H = 2048, I = 8192, V = 32000, heads = 32, kv_heads = 8, hd = 64, ctx = 128;
  const DType bf = DType::kBF16;
  nlohmann::json rows = nlohmann::json::array();
  const std::size_t qkv_rows = H + 2 * kv_heads * hd;
  struct Mat {
    const char* name;
    std::size_t rows, in;
  };
  const Mat mats[] = {{"q,k,v (one launch)", qkv_rows, H},
                      {"o_proj", H, H},
                      {"gate,up + SiLU", 2 * static_cast<std::size_t>(I), H},
                      {"down_proj", H, I},
                      {"lm_head", V, H}};
  std::vector<std::vector<cuda::DeviceBuffer> > weights;
  for (const Mat& m : mats)
    weights.push_back(random_copies(m.rows * m.in * 2, copies_for(m.rows * m.in * 2),
                                    static_cast<std::uint32_t>(m.rows)));
  const int max_n = 33;
  cuda::DeviceBuffer x(static_cast<std::size_t>(max_n) * I * sizeof(float)),
      y(static_cast<std::size_t>(max_n) * V * sizeof(float)),
      y2(static_cast<std::size_t>(max_n) * H * sizeof(float)), norm(H * sizeof(float));
  CUDA_CHECK(cudaMemset(x.get(), 0, x.bytes()));
  CUDA_CHECK(cudaMemset(y.get(), 0, y.bytes()));
  CUDA_CHECK(cudaMemset(y2.get(), 0, y2.bytes()));
  CUDA_CHECK(cudaMemset(norm.get(), 0, norm.bytes()));
  // One sequence's cache at 128 tokens for attention, KvSlots of n new tokens.
  const std::size_t kv_row = static_cast<std::size_t>(kv_heads) * hd;
  const int cap = ctx + max_n + 1;
  cuda::DeviceBuffer cache(2 * static_cast<std::size_t>(cap) * kv_row * sizeof(float));
  CUDA_CHECK(cudaMemset(cache.get(), 0, cache.bytes()));
  std::vector<cuda::KvSlot> slots;
  for (int i = 0; i < max_n; ++i)
    slots.push_back(cuda::KvSlot{cache.as<float>(), cap, ctx + i, ctx + i, 0, nullptr});
  cuda::DeviceBuffer dslots(slots.size() * sizeof(cuda::KvSlot));
  CUDA_CHECK(cudaMemcpy(dslots.get(), slots.data(), dslots.bytes(), cudaMemcpyHostToDevice));
  // And one at 2048 tokens, with the states of its split attention.
  constexpr int kLongContext = 2048;
  const int long_cap = kLongContext + max_n + 1;
  cuda::DeviceBuffer long_cache(2 * static_cast<std::size_t>(long_cap) * kv_row * sizeof(float));
  CUDA_CHECK(cudaMemset(long_cache.get(), 0, long_cache.bytes()));
  std::vector<cuda::KvSlot> long_slots;
  for (int i = 0; i < max_n; ++i)
    long_slots.push_back(cuda::KvSlot{long_cache.as<float>(), long_cap, kLongContext + i,
                                      kLongContext + i, 0, nullptr});
  cuda::DeviceBuffer dlong_slots(long_slots.size() * sizeof(cuda::KvSlot));
  CUDA_CHECK(cudaMemcpy(dlong_slots.get(), long_slots.data(), dlong_slots.bytes(),
                        cudaMemcpyHostToDevice));
  const int long_chunks = cuda::attention_chunks(kLongContext + max_n - 1);
  const std::size_t states_floats = cuda::attention_split_floats(max_n, heads, hd, long_chunks);
  cuda::DeviceBuffer states(states_floats * sizeof(float));
  cuda::DeviceBuffer rope(static_cast<std::size_t>(max_n) * hd * sizeof(float));
  CUDA_CHECK(cudaMemset(rope.get(), 0, rope.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());  // the setup above ran on the legacy default stream
  float* xf = x.as<float>();
  float* yf = y.as<float>();
  float* y2f = y2.as<float>();

  log << "  op (one layer of the model, then lm_head)  tokens      us    GB/s  % copy\n";
  double layer_us[3] = {0, 0, 0};
  const int ns[3] = {1, 5, 33};
  for (int ni = 0; ni < 3; ++ni) {
    const int n = ns[ni];
    // per_layer: once per layer (x16 a step). variant: an alternative to what a step runs by
    // default, left out of the layer's sum: "tensor cores" (a projection's other kernel),
    // "fused" (a projection with the norm before it or the residual add after it),
    // "unfused" (the launches a fused op replaces), "context 2048" (attention over a long
    // context, split over blocks as a step runs it, and "unsplit").
    auto row = [&](const std::string& op, double us, double bytes, bool per_layer,
                   const char* variant = nullptr) {
      const double gbs = bytes / (us * 1e-6) / 1e9;
      const bool tensor_cores = variant != nullptr && std::string(variant) == "tensor cores";
      rows.push_back({{"op", op},
                      {"tokens", n},
                      {"us", us},
                      {"gb_per_s", gbs},
                      {"fraction_of_copy", gbs / copy_gbs},
                      {"per_layer", per_layer},
                      {"tensor_cores", tensor_cores},
                      {"variant", variant != nullptr ? variant : "default"}});
      if (per_layer && variant == nullptr) layer_us[ni] += us;
      log << "  " << std::left << std::setw(42) << op << std::right << std::setw(7) << n
          << std::setprecision(1) << std::setw(9) << us << std::setprecision(0) << std::setw(8)
          << gbs << std::setprecision(1) << std::setw(8) << 100 * gbs / copy_gbs << "\n";
    };
    // Each projection as a plain launch (in the layer's sum), on the tensor cores
    // (kGemvTensorCores), and fused as a step runs it (persistent): the RMSNorm before q/k/v and
    // gate/up inside their launch (where gemv_norm_fits: 1 and 5 tokens), the residual add
    // after o_proj and down_proj in their epilogue (the last two not in the sum: the plain
    // launches and the add + RMSNorm row below stand for them).
    const char* kinds[3] = {nullptr, "tensor cores", "fused"};
    for (int kind = 0; kind < 3; ++kind) {
      for (std::size_t m = 0; m < std::size(mats); ++m) {
        const bool fused = kind == 2, norm_first = m == 0 || m == 2;
        if (fused && (m == 4 || (norm_first && !cuda::gemv_norm_fits(n, H, cuda::kGemvPersistent))))
          continue;
        const int flags = kind == 1 ? cuda::kGemvTensorCores : fused ? cuda::kGemvPersistent : 0;
        const void* fn = fused ? norm.get() : nullptr;  // the norm of a fused q/k/v or gate/up
        const Mat& mat = mats[m];
        auto& w = weights[m];
        const double bytes = static_cast<double>(mat.rows * mat.in * 2) +
                             4.0 * n * (static_cast<double>(mat.in) + mat.rows);
        const double us = us_per_launch(stream, [&](int i) {
          const void* wp = w[static_cast<std::size_t>(i) % w.size()].get();
          if (m == 0)
            cuda::matmul_multi(
                stream, xf, n, H, bf, 3, wp, H, nullptr, yf,
                static_cast<const std::byte*>(wp) + static_cast<std::size_t>(H) * H * 2,
                kv_heads * hd, nullptr, yf + n * H,
                static_cast<const std::byte*>(wp) +
                    (static_cast<std::size_t>(H) + kv_heads * hd) * H * 2,
                kv_heads * hd, nullptr, yf + n * (H + kv_heads * hd), flags, fn, DType::kF32,
                1e-5f);
          else if (m == 2)
            cuda::swiglu_gemv(stream, xf, n, H, wp, bf, I, yf, flags, fn, DType::kF32, 1e-5f);
          else if (fused)
            cuda::matmul_accumulate(stream, xf, n, static_cast<int>(mat.in), wp, bf,
                                    static_cast<int>(mat.rows), nullptr, y2f, flags);
          else
            cuda::matmul(nullptr, stream, xf, n, static_cast<int>(mat.in), wp, bf,
                         static_cast<int>(mat.rows), nullptr, yf, nullptr, 0, flags);
        });
        const std::string name = !fused ? mat.name
                                        : std::string(norm_first ? "RMSNorm + " : "") + mat.name +
                                              (norm_first ? "" : " + residual add");
        row(name + (kind == 0   ? ""
                    : kind == 1 ? " [tensor cores]"
                                : " [fused]"),
            us, bytes, m != 4, kinds[kind]);
      }
    }
    // RoPE, the KV append and attention: the two launches a step runs (rope_attend), then the
    // four they replace. q in y, the new keys and values in x.
    const double kv_bytes = 2.0 * (ctx + n) * kv_row * 4;
    const cuda::KvSlot* sl = dslots.as<cuda::KvSlot>();
    row("rope + kv_append + attention (context 128)",
        us_per_launch(stream,
                      [&](int) {
                        cuda::rope_kv_append(stream, xf, xf + n * kv_row, n, kv_heads, hd,
                                             rope.as<float>(), sl, 0);
                        cuda::attention_rope(stream, yf, n, heads, kv_heads, hd, rope.as<float>(),
                                             sl, 0, y2f);
                      }),
        kv_bytes + 8.0 * n * heads * hd, true);
    row("kv_append + attention [unfused]",
        us_per_launch(stream,
                      [&](int) {
                        cuda::kv_append(stream, xf, xf + n * kv_row, n, kv_heads, hd, sl, 0);
                        cuda::attention(stream, yf, n, heads, kv_heads, hd, sl, 0, y2f);
                      }),
        kv_bytes, true, "unfused");
    row("rope q and k [unfused]",
        us_per_launch(stream,
                      [&](int) {
                        cuda::rope_apply(stream, yf, n, heads, hd, heads * hd, rope.as<float>());
                        cuda::rope_apply(stream, xf, n, kv_heads, hd, kv_heads * hd,
                                         rope.as<float>());
                      }),
        8.0 * n * (heads + kv_heads) * hd, true, "unfused");
    // At a context of 2048: the attention split over blocks of 256 positions (as decode and
    // verify passes run it), and in one block per (token, head).
    const double long_bytes = 2.0 * (kLongContext + n) * kv_row * 4 + 8.0 * n * heads * hd;
    const cuda::KvSlot* long_sl = dlong_slots.as<cuda::KvSlot>();
    for (const bool split : {true, false})
      row(split ? "rope + kv_append + attention (context 2048)"
                : "rope + kv_append + attention (context 2048) [unsplit]",
          us_per_launch(stream,
                        [&](int) {
                          cuda::rope_kv_append(stream, xf, xf + n * kv_row, n, kv_heads, hd,
                                               rope.as<float>(), long_sl, 0);
                          cuda::attention_rope(
                              stream, yf, n, heads, kv_heads, hd, rope.as<float>(), long_sl, 0, y2f,
                              split ? cuda::AttentionSplit{states.as<float>(), long_chunks,
                                                           states_floats}
                                    : cuda::AttentionSplit{});
                        }),
          long_bytes, true, split ? "context 2048" : "unsplit");
    row("add + RMSNorm (x2 per layer)",
        2 * us_per_launch(stream,
                          [&](int) {
                            cuda::add_rmsnorm(stream, xf, yf, n, H, norm.get(), DType::kF32, 1e-5f,
                                              y2f);
                          }),
        2 * 12.0 * n * H, true);
    log << "  " << std::left << std::setw(42) << "sum of one layer" << std::right << std::setw(7)
        << n << std::setprecision(1) << std::setw(9) << layer_us[ni]
        << "   (x16 layers: " << std::setprecision(3) << 16 * layer_us[ni] / 1e3 << " ms)\n";
    rows.push_back(
        {{"op", "layer total"}, {"tokens", n}, {"us", layer_us[ni]}, {"per_layer", false}});
  }
  return rows;
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
  // The figures so far, written after each configuration and at the end: a kernel that fails
  // later (a CUDA error is sticky: every call after it fails) leaves what was measured before.
  auto save = [&report] {
    if (const char* out = std::getenv("SPECRUN_BENCH_JSON")) std::ofstream(out) << report.dump(2);
  };
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
    spec.deep_scale = 0.2;  // the 1-layer draft agrees with the target often (tau ~3.8 at k = 4)
    spec.dtype = DType::kBF16;
    const auto t_make = Clock::now();
    if (!fs::exists(dir / "target" / "config.json")) make_model_pair(spec, dir.string());
    const double make_s = ms_since(t_make) / 1e3;
    Checkpoint ckpt((dir / "target").string());
    auto owned = load_cuda_model(ckpt, cuda_ctx, cuda_ctx.tp());
    LanguageModel& model = *owned;
    const ModelConfig& cfg = model.config();
    // Bytes a step reads: every weight but the embedding table (one row of it is read).
    double weight_bytes = 0, params = 0;
    for (const std::string& name : ckpt.names()) {
      const double b = static_cast<double>(ckpt.tensor(name).nbytes);
      params += b / 2;
      if (name.find("embed_tokens") == std::string::npos) weight_bytes += b;
    }

    report["device"] = ctx.description();
    report["copy_bandwidth_gbs"] = copy_gbs;
    report["weight_bytes"] = weight_bytes;
    report["parameters"] = params;
    report["model_make_s"] = make_s;
    std::cout
        << "device: " << ctx.description() << "\n"
        << "copy bandwidth (D2D, read+write): " << std::fixed << std::setprecision(1) << copy_gbs
        << " GB/s\n"
        << "model: " << std::setprecision(2) << params / 1e9 << "B parameters, "
        << weight_bytes / 1e9 << " GB of BF16 weights read per step, context 128 tokens\n"
        << "  case        batch tokens    graphs  host ms  device ms  step ms  GB/s   % copy\n";

    const int context = 128, reps = 30;
    const std::vector<Case> cases = {{"decode", 1, 1, false},
                                     {"verify5", 1, 5, false},
                                     {"tree32", 1, 33, true},
                                     {"decode", 8, 1, false},
                                     {"verify5", 8, 5, false}};
    std::vector<std::unique_ptr<KvCache> > caches;
    std::vector<std::vector<std::int32_t> > tokens;
    for (int s = 0; s < 8; ++s) {
      caches.push_back(model.new_cache(context + 40));
      std::vector<std::int32_t> p(context);
      for (int i = 0; i < context; ++i) p[i] = (i * 131 + s * 7 + 3) % cfg.vocab_size;
      tokens.push_back(p);
      SeqChunk pre{caches[s].get(), p.data(), context};
      model.forward({&pre, 1}, ForwardRequest{});  // prefill
    }
    std::map<std::string, double> device_ms;
    // Launch by launch; step graphs whose projections wait for the kernel before them to end;
    // step graphs whose projections launch one block per group of rows (in waves); step graphs
    // without the fused RoPE, RMSNorm and residual adds (parallel.cuda_fused_ops = false:
    // "on-unfused"); step graphs as a job runs them by default (dependent launches, persistent
    // GEMVs, fused ops: "on"); and so with the projections on the tensor cores
    // (parallel.cuda_tensor_cores: "on-tc").
    struct Config {
      bool graphs, pdl, persistent, fused, tensor_cores;
      const char* label;
    };
    const Config configs[] = {{false, true, true, true, false, "off"},
                              {true, false, true, true, false, "on-nopdl"},
                              {true, true, false, true, false, "on-waves"},
                              {true, true, true, false, false, "on-unfused"},
                              {true, true, true, true, false, "on"},
                              {true, true, true, true, true, "on-tc"}};
    // The ratios of what has been measured so far (JSON null until both sides are): key,
    // numerator, denominator (case/batch/configuration). Step graphs against launch by launch;
    // what the dependent launches and the persistent GEMVs bring inside step graphs; the
    // projections on the tensor cores against the CUDA cores, both as a job runs them.
    struct Ratio {
      const char *key, *num, *den;
    };
    const Ratio ratios[] = {
        {"verify_over_decode_batch1", "verify5/1/on", "decode/1/on"},
        {"tree32_over_decode_batch1", "tree32/1/on", "decode/1/on"},
        {"graphs_speedup_decode_batch1", "decode/1/off", "decode/1/on"},
        {"graphs_speedup_verify5_batch1", "verify5/1/off", "verify5/1/on"},
        {"pdl_speedup_decode_batch1", "decode/1/on-nopdl", "decode/1/on"},
        {"pdl_speedup_verify5_batch1", "verify5/1/on-nopdl", "verify5/1/on"},
        {"persistent_speedup_decode_batch1", "decode/1/on-waves", "decode/1/on"},
        {"persistent_speedup_verify5_batch1", "verify5/1/on-waves", "verify5/1/on"},
        {"fused_ops_speedup_decode_batch1", "decode/1/on-unfused", "decode/1/on"},
        {"fused_ops_speedup_verify5_batch1", "verify5/1/on-unfused", "verify5/1/on"},
        {"tensor_core_speedup_decode_batch1", "decode/1/on", "decode/1/on-tc"},
        {"tensor_core_speedup_verify5_batch1", "verify5/1/on", "verify5/1/on-tc"},
        {"tensor_core_speedup_tree32_batch1", "tree32/1/on", "tree32/1/on-tc"},
        {"verify_over_decode_batch1_tensor_cores", "verify5/1/on-tc", "decode/1/on-tc"},
        {"tree32_over_decode_batch1_tensor_cores", "tree32/1/on-tc", "decode/1/on-tc"}};
    auto derive = [&] {
      for (const Ratio& r : ratios) {
        const auto a = device_ms.find(r.num), b = device_ms.find(r.den);
        report[r.key] = a != device_ms.end() && b != device_ms.end()
                            ? nlohmann::json(a->second / b->second)
                            : nlohmann::json(nullptr);
      }
    };
    for (const auto& [graphs, pdl, persistent, fused, tensor_cores, label_text] : configs) {
      const std::string label = label_text;
      cuda_ctx.set_step_graphs(graphs);
      cuda_ctx.set_dependent_launch(pdl);
      cuda_ctx.set_persistent_gemv(persistent);
      cuda_ctx.set_fused_ops(fused);
      cuda_ctx.set_tensor_core_gemv(tensor_cores);
      for (const Case& c : cases) {
        const Measured m = run_case(model, cuda_ctx, c, caches, tokens, context, reps);
        const double kv_bytes = 2.0 * c.batch * cfg.num_layers * (context + c.tokens) *
                                model.kv_heads() * cfg.head_dim * sizeof(float);
        const double gbs = (weight_bytes + kv_bytes) / (m.device_ms * 1e-3) / 1e9;
        std::cout << "  " << std::left << std::setw(10) << c.name << std::right << std::setw(7)
                  << c.batch << std::setw(7) << c.tokens << std::setw(10) << label
                  << std::setprecision(3) << std::setw(9) << m.host_ms << std::setw(11)
                  << m.device_ms << std::setw(9) << m.step_ms << std::setprecision(0)
                  << std::setw(7) << gbs << std::setprecision(1) << std::setw(8)
                  << 100.0 * gbs / copy_gbs << "\n";
        report["steps"].push_back({{"case", c.name},
                                   {"batch", c.batch},
                                   {"tokens_per_sequence", c.tokens},
                                   {"graphs", graphs},
                                   {"pdl", graphs && pdl && cuda_ctx.dependent_launch()},
                                   {"persistent", persistent},
                                   {"fused_ops", fused},
                                   {"tensor_cores", tensor_cores},
                                   {"config", label},
                                   {"host_enqueue_ms", m.host_ms},
                                   {"device_ms", m.device_ms},
                                   {"step_ms", m.step_ms},
                                   {"achieved_gbs", gbs},
                                   {"fraction_of_copy", gbs / copy_gbs}});
        device_ms[c.name + "/" + std::to_string(c.batch) + "/" + label] = m.device_ms;
        // A measurement above the copy bandwidth would mean the byte count or timing is wrong.
        EXPECT_LT(gbs, 1.1 * copy_gbs) << c.name << " batch " << c.batch;
      }
      derive();
      save();
    }
    const cuda::StepGraphStats& st = cuda_ctx.step_graph_stats();
    report["step_graph_stats"] = {{"steps", st.steps},
                                  {"replays", st.replays},
                                  {"captures", st.captures},
                                  {"eager", st.eager},
                                  {"capture_ms", st.capture_ms},
                                  {"evicted", st.evicted},
                                  {"capture_failures", st.capture_failures},
                                  {"capture_error", st.capture_error}};
    report["dependent_launch"] = cuda_ctx.dependent_launch();
    cuda_ctx.set_tensor_core_gemv(false);

    // Instrumentation: alternating rounds of timed and untimed decode loops (graphs on).
    cuda_ctx.set_step_graphs(true);
    cuda_ctx.set_dependent_launch(true);
    cuda_ctx.set_persistent_gemv(true);
    std::unique_ptr<TokenOps> ops = make_token_ops(BackendKind::kCuda, &cuda_ctx);
    // The timed loops mark the phases on the device as a job does (device rows, schema 5).
    CudaPhaseTimeline timeline(cuda_ctx);
    DevicePhaseLog device_log(&timeline);
    std::vector<double> timed, untimed, device_verify;
    for (int round = 0; round < 9; ++round) {
      const bool first_timed = round % 2 == 0;
      for (bool t : {first_timed, !first_timed}) {
        double verify_ms = 0;
        const double ms = decode_loop_ms(model, *ops, cuda_ctx.tp(), *caches[0], context, 40, t,
                                         &device_log, &verify_ms);
        if (round > 0) (t ? timed : untimed).push_back(ms);
        if (round > 0 && t) device_verify.push_back(verify_ms);
      }
    }
    std::vector<double> diff;
    for (std::size_t i = 0; i < timed.size(); ++i) diff.push_back(timed[i] / untimed[i] - 1.0);
    std::sort(diff.begin(), diff.end());
    const double overhead = median(diff);
    report["instrumentation"] = {{"timed_step_ms", median(timed)},
                                 {"untimed_step_ms", median(untimed)},
                                 {"overhead_fraction", overhead},
                                 {"overhead_fraction_min", diff.front()},
                                 {"overhead_fraction_max", diff.back()},
                                 {"rounds", diff.size()},
                                 {"device_verify_ms", median(device_verify)}};
    std::cout << std::setprecision(3) << "greedy decode step (forward + argmax + ids to host), "
              << "graphs on: " << median(untimed) << " ms untimed, " << median(timed)
              << " ms with the phase timing; overhead " << std::setprecision(2) << 100 * overhead
              << "% (rounds from " << 100 * diff.front() << "% to " << 100 * diff.back()
              << "%); device verify per step from the phase marks " << std::setprecision(3)
              << median(device_verify) << " ms\n";
    std::cout << std::setprecision(2) << "verify (5 tokens) / decode, batch 1, graphs on: "
              << report["verify_over_decode_batch1"].get<double>()
              << "; tree of 32 / decode: " << report["tree32_over_decode_batch1"].get<double>()
              << "; step graphs speed decode up "
              << report["graphs_speedup_decode_batch1"].get<double>() << "x, verify "
              << report["graphs_speedup_verify5_batch1"].get<double>() << "x; dependent launches ("
              << (cuda_ctx.dependent_launch() ? "on" : "unavailable") << ") speed decode up "
              << report["pdl_speedup_decode_batch1"].get<double>() << "x, verify "
              << report["pdl_speedup_verify5_batch1"].get<double>()
              << "x; persistent GEMVs speed decode up "
              << report["persistent_speedup_decode_batch1"].get<double>() << "x, verify "
              << report["persistent_speedup_verify5_batch1"].get<double>() << "x\n"
              << "projections on the tensor cores: decode "
              << report["tensor_core_speedup_decode_batch1"].get<double>() << "x, verify "
              << report["tensor_core_speedup_verify5_batch1"].get<double>() << "x, tree of 32 "
              << report["tensor_core_speedup_tree32_batch1"].get<double>()
              << "x as fast; verify / decode "
              << report["verify_over_decode_batch1_tensor_cores"].get<double>()
              << ", tree of 32 / decode "
              << report["tree32_over_decode_batch1_tensor_cores"].get<double>() << "\n"
              << "step graphs: " << st.replays << " of " << st.steps << " passes replayed, "
              << st.captures << " captured in " << std::setprecision(1) << st.capture_ms << " ms\n";
    // Where a step's device time goes: each op alone, in graphs, from memory.
    std::cout << std::fixed;
    report["ops"] = op_breakdown(ctx.stream(), copy_gbs, std::cout);
    // Speculation pays only if scoring k + 1 tokens costs about as much as decoding one.
    EXPECT_LT(report["verify_over_decode_batch1"].get<double>(), 3.0);
  }
  save();
  if (!initialized) MPI_Finalize();
}

#endif  // SPECRUN_HAVE_CUDA
