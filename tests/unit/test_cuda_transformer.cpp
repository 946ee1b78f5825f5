// The Llama graph on the CUDA backend against the same graph on the CPU backend (the reference)
// on the same checkpoint, and the cache invariants speculative decoding relies on, on one GPU
// (label "gpu"):
//  - logits of a prompt agree with the CPU's (F32 weights: float32 tolerance; BF16: argmax and
//    a bf16-sized tolerance, since the prefill path rounds activations to BF16 for cuBLAS);
//  - a verify window gives bit-identical logits to decoding the same tokens one by one, and
//    truncate-and-redo equals no rollback (this is what makes greedy speculative == baseline);
//  - greedy continuations equal the CPU model's, token for token (F32 weights);
//  - the NCCL communicator's timing is filled from CUDA events without extra synchronisation,
//    also for collectives replayed inside step graphs;
//  - the phase timeline (backend/cuda_timeline.h) times the device's work between its marks, not
//    the host's enqueueing, and waits only when read;
//  - step graphs (kernels/cuda/step_graphs.h): decode steps, verify windows and token trees
//    replayed from captured graphs give bitwise the logits of the passes launched one by one,
//    across batch sizes, rollbacks and a buffer that grows mid-run; likewise an EAGLE-3 head's
//    drafting passes (../shared/models/code-eagle3 on code-target).
// Skips visibly without a CUDA build or without a device.
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaTransformer, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): the CUDA backend is not compiled";
}

#else

#include "cuda_transformer_fixtures.h"

namespace fs = std::filesystem;
using namespace specrun;
using namespace specrun::test;

TEST(CudaTransformer, LogitsMatchCpuTransformer) {
  REQUIRE_DEVICE();
  GpuRank rank;
  SingleRankComm cpu_comm;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Checkpoint ckpt(synthetic_target(dt));
    auto cpu_owned = load_cpu_model(ckpt, cpu_comm, 2);
    auto gpu_owned = rank.load(ckpt);
    LanguageModel& cpu_model = *cpu_owned;
    LanguageModel& gpu_model = *gpu_owned;
    const int V = ckpt.config().vocab_size;
    // 40 tokens: the batch-invariant path; 150: the cuBLAS prefill path.
    for (int len : {40, 150}) {
      const auto tokens = prompt(len, V, len);
      auto cc = cpu_model.new_cache(256);
      auto gc = gpu_model.new_cache(256);
      const auto expected = run(cpu_model, *cc, tokens, true);
      const auto actual = run(gpu_model, *gc, tokens, true);
      double max_abs = 0;
      int flips = 0;
      compare_logits(expected, actual, V, &max_abs, &flips);
      const bool exact_path = dt == DType::kF32 || len <= cuda::kMaxGemvTokens;
      // Logits here have std ~3; float32 reorderings move them by ~1e-5, BF16 activations
      // (cuBLAS prefill) by ~1e-2.
      const double tol = exact_path ? 2e-3 : 0.15;
      EXPECT_LT(max_abs, tol) << dtype_name(dt) << ", " << len << " tokens";
      EXPECT_LE(flips, exact_path ? 0 : len / 20)
          << dtype_name(dt) << ", " << len << " tokens: argmax differs in " << flips << " rows";
      EXPECT_EQ(gc->length(), len);
    }
  }
}

TEST(CudaTransformer, VerifyWindowEqualsStepByStepDecodeBitwise) {
  REQUIRE_DEVICE();
  GpuRank rank;
  Checkpoint ckpt(synthetic_target(DType::kBF16));
  auto owned = rank.load(ckpt);
  expect_window_equals_steps(*owned, 100, 10, 200);  // contexts prefilled through cuBLAS
}

TEST(CudaTransformer, GreedyContinuationEqualsCpu) {
  REQUIRE_DEVICE();
  GpuRank rank;
  SingleRankComm cpu_comm;
  const fs::path shared = std::getenv("SPECRUN_SHARED_DIR") ? std::getenv("SPECRUN_SHARED_DIR")
                                                            : SPECRUN_SOURCE_DIR "/../shared";
  std::vector<std::string> dirs = {synthetic_target(DType::kF32)};
  if (fs::exists(shared / "models" / "code-target-f32" / "config.json"))
    dirs.push_back((shared / "models" / "code-target-f32").string());
  for (const std::string& dir : dirs) {
    Checkpoint ckpt(dir);
    auto cpu_owned = load_cpu_model(ckpt, cpu_comm, 2);
    auto gpu_owned = rank.load(ckpt);
    LanguageModel& cpu_model = *cpu_owned;
    LanguageModel& gpu_model = *gpu_owned;
    const int V = ckpt.config().vocab_size;
    auto cc = cpu_model.new_cache(128);
    auto gc = gpu_model.new_cache(128);
    std::vector<std::int32_t> tokens = prompt(20, V, 9);
    auto lc = run(cpu_model, *cc, tokens, false);
    auto lg = run(gpu_model, *gc, tokens, false);
    for (int step = 0; step < 48; ++step) {
      const int tc = cpu::argmax(lc.data(), V), tg = cpu::argmax(lg.data(), V);
      ASSERT_EQ(tc, tg) << dir << ": greedy token " << step << " differs (CPU " << tc << ", GPU "
                        << tg << ")";
      lc = run(cpu_model, *cc, {tc}, false);
      lg = run(gpu_model, *gc, {tg}, false);
    }
  }
}

// The same passes with step graphs off and on: decode steps of two sequences, verify windows of
// 5 with rollback, a token tree of 8 nodes (root + 7) with rollback, then a third sequence (a
// new batch size, and larger scratch buffers).
// The index of the first value whose bits differ (a.size() when none do; sizes must match).
std::size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

std::vector<float> graph_workload(LanguageModel& m, int vocab) {
  std::vector<float> all, logits;
  auto keep = [&] { all.insert(all.end(), logits.begin(), logits.end()); };
  std::vector<std::unique_ptr<KvCache> > caches;
  for (int s = 0; s < 3; ++s) caches.push_back(m.new_cache(160));
  for (int s = 0; s < 3; ++s) {
    const auto p = prompt(12 + 5 * s, vocab, 30 + s);
    SeqChunk pre{caches[s].get(), p.data(), static_cast<int>(p.size())};
    m.forward({&pre, 1}, false, logits);
    keep();
  }
  for (int step = 0; step < 12; ++step) {
    const int n_seqs = step < 8 ? 2 : 3;
    std::vector<std::int32_t> tok(n_seqs);
    std::vector<SeqChunk> batch;
    for (int s = 0; s < n_seqs; ++s) {
      tok[s] = (step * 131 + s * 17 + 5) % vocab;
      batch.push_back(SeqChunk{caches[s].get(), &tok[s], 1});
    }
    m.forward(batch, false, logits);
    keep();
    if (step % 3 == 2) {  // a verify window of 5 per sequence, all logits, then rolled back
      std::vector<std::vector<std::int32_t> > win(n_seqs);
      std::vector<int> len(n_seqs);
      batch.clear();
      for (int s = 0; s < n_seqs; ++s) {
        win[s] = prompt(5, vocab, step + 7 * s);
        len[s] = caches[s]->length();
        batch.push_back(SeqChunk{caches[s].get(), win[s].data(), 5});
      }
      m.forward(batch, true, logits);
      keep();
      for (int s = 0; s < n_seqs; ++s) caches[s]->truncate(len[s]);
    }
  }
  for (int rep = 0; rep < 3; ++rep) {  // a tree: root (chain) + 7 nodes, parents by slot
    KvCache& c = *caches[0];
    const int P = c.length();
    const std::vector<std::int32_t> tokens = {3, 11, 12, 13, 21, 22, 31, 32};
    const std::vector<std::int32_t> parents = {kChainParent, P, P, P, P + 1, P + 1, P + 4, P + 2};
    SeqChunk tree{&c, tokens.data(), 8, parents.data()};
    m.forward({&tree, 1}, true, logits);
    keep();
    c.truncate(P);
  }
  return all;
}

TEST(CudaTransformer, StepGraphsReplayBitwiseThePassesLaunchedOneByOne) {
  REQUIRE_DEVICE();
  GpuRank rank;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    Checkpoint ckpt(synthetic_target(dt));
    auto owned = rank.load(ckpt);
    LanguageModel& m = *owned;
    const int V = ckpt.config().vocab_size;
    // The context's counts add up over the loop: compare with the counts at each point.
    const cuda::StepGraphStats start = rank.context.step_graph_stats();
    rank.context.set_step_graphs(false);
    const auto eager = graph_workload(m, V);
    const cuda::StepGraphStats before = rank.context.step_graph_stats();
    EXPECT_EQ(before.replays, start.replays) << "graphs off, yet a pass was replayed";
    EXPECT_EQ(before.steps, start.steps) << "graphs off, yet a pass was recorded";
    rank.context.set_step_graphs(true);
    const auto graphed = graph_workload(m, V);
    const auto again = graph_workload(m, V);  // every shape seen: mostly replays
    const cuda::StepGraphStats& after = rank.context.step_graph_stats();
    ASSERT_EQ(eager.size(), graphed.size());
    const std::size_t first = first_difference(eager, graphed);
    EXPECT_EQ(first, eager.size())
        << dtype_name(dt) << ": logits of step graphs differ from the "
        << "passes launched one by one, first at value " << first << " (row " << first / V
        << "): " << eager[first] << " vs " << graphed[first];
    EXPECT_EQ(0, std::memcmp(eager.data(), again.data(), eager.size() * sizeof(float)))
        << dtype_name(dt) << ": a second round of replays differs";
    EXPECT_GT(after.captures, before.captures) << "no step graph was captured";
    EXPECT_GT(after.replays - before.replays, 20)
        << "step graphs were captured but hardly replayed (" << after.replays - before.replays
        << " replays, " << after.eager - before.eager << " eager)";
    std::cout << dtype_name(dt) << ": " << after.steps - before.steps << " graphable passes, "
              << after.captures - before.captures << " captures, " << after.replays - before.replays
              << " replays, " << after.eager - before.eager << " eager\n";
  }
}

// The fused ops of the CUDA backend (parallel.cuda_fused_ops: RoPE inside the KV append and
// attention, RMSNorm inside the projections after it, the residual add in the epilogue of those
// before it) give the logits of their default compositions bitwise, over the same workload
// (prefills, decode steps of 2 and 3 sequences: the norm fused; verify windows of 10 and 15
// tokens: only the add; trees of 8 nodes), launched one by one and as step graphs, on the CUDA
// cores and (BF16) the tensor cores.
TEST(CudaTransformer, FusedOpsGiveTheBitsOfTheirCompositions) {
  REQUIRE_DEVICE();
  GpuRank rank;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    Checkpoint ckpt(synthetic_target(dt));
    auto owned = rank.load(ckpt);
    const int V = ckpt.config().vocab_size;
    for (const bool tensor_cores : {false, true}) {
      rank.context.set_tensor_core_gemv(tensor_cores);  // read at every pass
      for (const bool graphs : {false, true}) {
        rank.context.set_step_graphs(graphs);
        rank.context.set_fused_ops(false);
        const auto composed = graph_workload(*owned, V);
        rank.context.set_fused_ops(true);
        const auto fused = graph_workload(*owned, V);
        ASSERT_EQ(composed.size(), fused.size());
        const std::size_t first = first_difference(composed, fused);
        EXPECT_EQ(first, composed.size())
            << dtype_name(dt) << (tensor_cores ? ", tensor cores" : "")
            << (graphs ? ", step graphs" : "") << ": fused ops differ from their compositions, "
            << "first at value " << first << " (row " << first / V << ")";
      }
    }
  }
  rank.context.set_tensor_core_gemv(false);
  rank.context.set_step_graphs(true);
}

// Passes above the CUDA-core kernels' 64 tokens (3 sequences x windows of 33: 99 tokens, the
// shape of a batch of trees' verify) with every projection on the tensor cores (BF16, `in` a
// multiple of 32: intermediate 704) are step graphs too: recorded, captured and replayed, with
// logits bitwise those of the passes launched one by one. Without the tensor cores such passes
// are not recorded (their projections go through cuBLAS).
TEST(CudaTransformer, StepGraphsTakeTensorCorePassesAbove64Tokens) {
  REQUIRE_DEVICE();
  GpuRank rank;
  const std::string dir =
      (fs::temp_directory_path() / ("specrun_cuda_test_tc_" + std::to_string(getpid()))).string();
  if (!fs::exists(dir + "/target/config.json")) {
    SyntheticSpec spec;
    spec.dtype = DType::kBF16;
    spec.intermediate = 704;
    spec.seed = 12;
    make_model_pair(spec, dir);
  }
  Checkpoint ckpt(dir + "/target");
  auto owned = rank.load(ckpt);
  LanguageModel& m = *owned;
  const int V = ckpt.config().vocab_size;
  auto workload = [&] {
    std::vector<float> all, logits;
    std::vector<std::unique_ptr<KvCache> > caches;
    for (int s = 0; s < 3; ++s) {
      caches.push_back(m.new_cache(128));
      const auto p = prompt(20 + s, V, 40 + s);
      SeqChunk pre{caches[s].get(), p.data(), static_cast<int>(p.size())};
      m.forward({&pre, 1}, false, logits);
    }
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<std::vector<std::int32_t> > win(3);
      std::vector<SeqChunk> batch;
      std::vector<int> len(3);
      for (int s = 0; s < 3; ++s) {
        win[s] = prompt(33, V, 50 + rep + 3 * s);
        len[s] = caches[s]->length();
        batch.push_back(SeqChunk{caches[s].get(), win[s].data(), 33});
      }
      m.forward(batch, true, logits);
      all.insert(all.end(), logits.begin(), logits.end());
      for (int s = 0; s < 3; ++s) caches[s]->truncate(len[s]);
    }
    return all;
  };
  rank.context.set_tensor_core_gemv(true);
  rank.context.set_step_graphs(false);
  const auto eager = workload();
  rank.context.set_step_graphs(true);
  const cuda::StepGraphStats before = rank.context.step_graph_stats();
  const auto graphed = workload();
  const cuda::StepGraphStats after = rank.context.step_graph_stats();
  ASSERT_EQ(eager.size(), graphed.size());
  EXPECT_EQ(0, std::memcmp(eager.data(), graphed.data(), eager.size() * sizeof(float)))
      << "99-token passes on the tensor cores: step graphs differ from launches one by one";
  EXPECT_GE(after.steps - before.steps, 4) << "the 99-token passes were not recorded";
  EXPECT_GE(after.replays - before.replays, 1) << "the 99-token passes were never replayed";
  // On the CUDA cores the same passes go through cuBLAS: launched one by one, never recorded;
  // only the three prefills (at most 64 tokens) are.
  rank.context.set_tensor_core_gemv(false);
  const cuda::StepGraphStats cuda_cores = rank.context.step_graph_stats();
  (void)workload();
  EXPECT_EQ(rank.context.step_graph_stats().steps - cuda_cores.steps, 3)
      << "without the tensor cores, passes of 99 tokens were recorded (or prefills were not)";
}

namespace {

std::string shared_models() {
  if (const char* env = std::getenv("SPECRUN_SHARED_DIR")) return std::string(env) + "/models";
  return std::string(SPECRUN_SOURCE_DIR) + "/../shared/models";
}

// An EAGLE-3 head drafting as the drafter drives it: an extend pass over a prompt's captured
// target features, then one-token draft steps fed by its own previous output, a two-sequence
// step, a 4-node tree, and rollbacks; every pass's logits read back, in order.
std::vector<float> head_workload(LanguageModel& target, DraftHead& head) {
  std::vector<float> all;
  auto keep = [&](const ForwardResult& r) {
    const std::size_t at = all.size();
    all.resize(at + static_cast<std::size_t>(r.logits.rows) * r.logits.width);
    target.read(r.logits, 0, r.logits.rows, all.data() + at);
  };
  const std::vector<std::int32_t> tokens = {1, 822, 903, 1012, 309, 421, 288, 1300, 77, 9, 640, 12};
  const int n = static_cast<int>(tokens.size()) - 1;
  std::vector<std::unique_ptr<KvCache> > caches;
  for (int s = 0; s < 2; ++s) caches.push_back(head.new_cache(64));
  for (int round = 0; round < 3; ++round) {
    auto tcache = target.new_cache(64);
    const SeqChunk tchunk{tcache.get(), tokens.data(), n + 1};
    const ForwardResult t =
        target.forward({&tchunk, 1}, ForwardRequest{false, head.target_capture()});
    for (auto& c : caches) c->truncate(0);
    std::vector<int> rows(n);
    for (int i = 0; i < n; ++i) rows[i] = i;
    const SeqChunk extend{caches[0].get(), tokens.data() + 1, n};
    ForwardResult r = head.forward({&extend, 1}, t.hidden, rows, false);
    keep(r);
    for (int step = 0; step < 6; ++step) {  // chain drafting from its own output
      const std::int32_t tok = tokens[(step * 5 + round) % tokens.size()];
      const SeqChunk one{caches[0].get(), &tok, 1};
      const std::vector<int> last = {r.hidden.rows - 1};
      r = head.forward({&one, 1}, r.hidden, last, false);
      keep(r);
    }
    // Two sequences in one step, each fed a row of the previous output.
    const SeqChunk ext1{caches[1].get(), tokens.data() + 1, 4};
    const std::vector<int> four = {0, 1, 2, 3};
    r = head.forward({&ext1, 1}, t.hidden, four, false);
    keep(r);
    const std::int32_t pair[2] = {421, 288};
    const SeqChunk two[2] = {{caches[0].get(), &pair[0], 1}, {caches[1].get(), &pair[1], 1}};
    const std::vector<int> both = {0, 0};
    r = head.forward({two, 2}, r.hidden, both, true);
    keep(r);
    // A tree under the last token: 4 nodes, then rolled back.
    KvCache& c = *caches[0];
    const int P = c.length();
    const std::vector<std::int32_t> nodes = {7, 8, 9, 10};
    const std::vector<std::int32_t> parents = {P - 1, P - 1, P, P + 1};
    const SeqChunk tree{&c, nodes.data(), 4, parents.data()};
    const std::vector<int> tree_rows = {0, 0, 0, 0};
    r = head.forward({&tree, 1}, r.hidden, tree_rows, true);
    keep(r);
    c.truncate(P);
  }
  return all;
}

}  // namespace

// The EAGLE-3 head's passes as step graphs (their input rows staged with the pass's inputs):
// bitwise the logits of the passes launched one by one, with graphs captured and replayed; and
// its fused ops (o_proj and down_proj added in their epilogues, the norm inside the gate/up
// launch) bitwise their compositions.
TEST(CudaTransformer, Eagle3HeadStepGraphsReplayBitwise) {
  REQUIRE_DEVICE();
  const std::string models = shared_models();
  if (!fs::exists(models + "/code-eagle3/config.json"))
    GTEST_SKIP() << "shared models not found at " << models;
  GpuRank rank;
  const Checkpoint target_ckpt(models + "/code-target");
  auto target = rank.load(target_ckpt);
  const std::string dir = models + "/code-eagle3";
  const Eagle3Config cfg = Eagle3Config::from_file(dir + "/config.json", target_ckpt.config());
  const Checkpoint head_ckpt(dir, [&](const std::string&) { return cfg.head; });
  auto head = load_cuda_head(head_ckpt, target_ckpt, cfg, rank.context);
  rank.context.set_step_graphs(false);
  const std::vector<float> eager = head_workload(*target, *head);
  rank.context.set_fused_ops(false);  // read at every pass
  const std::vector<float> composed = head_workload(*target, *head);
  rank.context.set_fused_ops(true);
  ASSERT_EQ(eager.size(), composed.size());
  EXPECT_EQ(first_difference(eager, composed), eager.size())
      << "head logits of fused ops differ from their compositions";
  const cuda::StepGraphStats before = rank.context.step_graph_stats();
  rank.context.set_step_graphs(true);
  const std::vector<float> graphed = head_workload(*target, *head);
  const std::vector<float> again = head_workload(*target, *head);
  const cuda::StepGraphStats& after = rank.context.step_graph_stats();
  ASSERT_EQ(eager.size(), graphed.size());
  std::size_t first = eager.size();
  for (std::size_t i = 0; i < eager.size() && first == eager.size(); ++i)
    if (std::memcmp(&eager[i], &graphed[i], sizeof(float)) != 0) first = i;
  EXPECT_EQ(first, eager.size()) << "head logits of step graphs differ from the passes launched "
                                    "one by one, first at value "
                                 << first << ": " << eager[first] << " vs " << graphed[first];
  EXPECT_EQ(0, std::memcmp(eager.data(), again.data(), eager.size() * sizeof(float)))
      << "a second round of replays differs";
  EXPECT_GT(after.captures, before.captures) << "no step graph was captured";
  EXPECT_GT(after.replays - before.replays, 10)
      << "hardly any replay: " << after.replays - before.replays << " replays, "
      << after.eager - before.eager << " eager";
  std::cout << "EAGLE-3 head (and target prefill): " << after.steps - before.steps
            << " graphable passes, " << after.captures - before.captures << " captures, "
            << after.replays - before.replays << " replays\n";
}

TEST(CudaTransformer, NcclTimingComesFromEventsWithoutExtraSync) {
  REQUIRE_DEVICE();
  GpuRank rank;
  cuda::DeviceBuffer buf(1 << 20);
  CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, 1 << 20, rank.context.stream()));
  // A one-rank group has nothing to reduce: no collective, no time.
  rank.nccl.all_reduce_sum(buf.as<float>(), 1 << 18);
  rank.nccl.synchronize();
  rank.nccl.collect_timing();
  EXPECT_EQ(rank.nccl.comm_calls(), 0);
  // Host buffers go through MPI and are timed on the host.
  std::vector<std::int32_t> host = {1, 2, 3};
  rank.nccl.broadcast(host.data(), host.size() * sizeof(std::int32_t), 0);
  EXPECT_EQ(host[2], 3);
  rank.nccl.barrier();
  EXPECT_GE(rank.nccl.comm_calls(), 1);
}

// NCCL collectives inside step graphs (tensor-parallel passes record them with their kernels):
// two all-gathers of the one-rank group (real NCCL launches) and a copy, recorded as a step
// through the group's agreement: eager on first sight, captured on the second, replayed
// after, each launch's result right and each collective counted once in the communicator's
// timing, also for replays issued back to back; drop_all() (what an abort does first) empties
// every StepGraphs, and the next sightings capture again.
TEST(CudaTransformer, NcclCollectivesReplayInStepGraphsAndAreTimed) {
  REQUIRE_DEVICE();
  GpuRank rank;
  cuda::StepGraphStats stats;
  cuda::StepGraphs graphs(stats);
  const int n = 4096;
  const std::size_t bytes = n * sizeof(float);
  cuda::DeviceBuffer src(bytes), gathered(bytes), again(bytes), out(bytes);
  cudaStream_t stream = rank.context.stream();
  NcclComm* nccl = &rank.nccl;
  EXPECT_EQ(nccl->agree_step(cuda::kStepReplay + 3), cuda::kStepReplay + 3);
  nccl->synchronize();
  nccl->collect_timing();
  nccl->reset_timing();
  std::vector<float> host(n), back(n);
  auto step = [&](int salt, bool wait) {
    for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i * 3 + salt);
    CUDA_CHECK(cudaMemcpyAsync(src.get(), host.data(), bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, bytes, stream));  // NaN
    graphs.begin(true);
    graphs.launch(&NcclComm::launch_all_gather, stream, nccl, static_cast<const void*>(src.get()),
                  gathered.get(), bytes);
    graphs.launch(&NcclComm::launch_all_gather, stream, nccl,
                  static_cast<const void*>(gathered.get()), again.get(), bytes);
    graphs.launch(&cuda::memcpy_async, stream, out.get(), static_cast<const void*>(again.get()),
                  bytes, cudaMemcpyDeviceToDevice);
    graphs.end(stream, [nccl](std::int64_t c) { return nccl->agree_step(c); });
    if (!wait) return;
    CUDA_CHECK(cudaMemcpyAsync(back.data(), out.get(), bytes, cudaMemcpyDeviceToHost, stream));
    rank.context.synchronize();
    EXPECT_EQ(0, std::memcmp(back.data(), host.data(), bytes)) << "step " << salt;
  };
  for (int s = 0; s < 5; ++s) step(s, true);
  EXPECT_EQ(stats.eager, 1);
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.replays, 3);
  EXPECT_EQ(nccl->comm_calls(), 10) << "each collective, replayed or not, counted once";
  EXPECT_GT(nccl->comm_seconds(), 0);
  // Two replays without a wait between: the second counts the first before reusing its events.
  step(5, false);
  step(6, true);
  EXPECT_EQ(stats.replays, 5);
  EXPECT_EQ(nccl->comm_calls(), 14);
  cuda::StepGraphs::drop_all();
  EXPECT_EQ(graphs.graphs(), 0);
  step(7, true);
  step(8, true);
  EXPECT_EQ(stats.eager, 2);
  EXPECT_EQ(stats.captures, 2);
  EXPECT_EQ(graphs.graphs(), 1);
  EXPECT_EQ(nccl->comm_calls(), 18);
}

TEST(CudaTransformer, PhaseTimelineTimesTheDeviceNotTheHost) {
  REQUIRE_DEVICE();
  GpuRank rank;
  CudaPhaseTimeline timeline(rank.context);
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  cuda::DeviceBuffer a(kBytes), b(kBytes);
  CUDA_CHECK(cudaMemsetAsync(a.get(), 1, kBytes, rank.context.stream()));
  auto copies = [&](int n) {
    for (int i = 0; i < n; ++i)
      CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), kBytes, cudaMemcpyDeviceToDevice,
                                 rank.context.stream()));
  };
  // The copies' device time, waited for on the host (the reference).
  rank.context.synchronize();
  const SteadyClockPoint t0 = SteadyClock::now();
  copies(8);
  rank.context.synchronize();
  const double synced_ms = 1e3 * seconds_since(t0);

  std::vector<double> out;
  timeline.read(out);  // no marks: nothing, and no wait
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(timeline.mark(), 0);
  const SteadyClockPoint t1 = SteadyClock::now();
  copies(8);
  const double enqueue_ms = 1e3 * seconds_since(t1);
  EXPECT_EQ(timeline.mark(), 1);
  EXPECT_EQ(timeline.mark(), 2);  // nothing in between
  timeline.read(out);
  ASSERT_EQ(out.size(), 2u);
  std::cout << "8 copies of 1 GiB: " << synced_ms << " ms waited for, " << enqueue_ms
            << " ms to enqueue, " << out[0] << " ms between the marks, " << out[1]
            << " ms between two adjacent marks\n";
  EXPECT_GT(out[0], 0.5 * synced_ms) << "the marks did not time the copies";
  EXPECT_LT(out[0], 1.5 * synced_ms + 1.0);
  EXPECT_LT(out[1], 0.05 * out[0]) << "adjacent marks should be (nearly) simultaneous";
  EXPECT_EQ(timeline.mark(), 0) << "read() forgets the marks";
  timeline.read(out);
  EXPECT_TRUE(out.empty());
}

TEST(CudaTransformer, RejectsCachesOfAnotherBackend) {
  REQUIRE_DEVICE();
  GpuRank rank;
  Checkpoint ckpt(synthetic_target(DType::kBF16));
  auto owned = rank.load(ckpt);
  LanguageModel& model = *owned;
  SingleRankComm cpu_comm;
  auto cpu_model = load_cpu_model(ckpt, cpu_comm, 1);
  auto host_cache = cpu_model->new_cache(16);
  EXPECT_THROW(run(model, *host_cache, {1, 2}, false), Error);
  auto cache = model.new_cache(4);
  EXPECT_THROW(run(model, *cache, {1, 2, 3, 4, 5}, false), Error);  // over capacity
  EXPECT_EQ(cache->length(), 0);
  EXPECT_THROW(run(model, *cache, {ckpt.config().vocab_size}, false), Error);  // bad token id
}

#endif  // SPECRUN_HAVE_CUDA
