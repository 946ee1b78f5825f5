#include "engine/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/memory_probe.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/host_stats.h"
#include "dist/communicator.h"
#include "engine/expert_accounting.h"
#include "engine/step_timer.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/weight_schema.h"

namespace specrun {

namespace {

using Clock = SteadyClock;

// A make-model directory that exists while this object lives (rank 0 writes and removes it).
class ModelDir {
 public:
  ModelDir(const BenchOptions& o, Communicator& comm) {
    char path[4096] = {};
    if (!o.model_dir.empty()) {
      path_ = o.model_dir;
      return;
    }
    if (comm.rank() == 0) {
      root_ =
          (std::filesystem::temp_directory_path() / ("specrun-bench-" + std::to_string(::getpid())))
              .string();
      SyntheticSpec spec = o.spec;
      spec.draft_layers = 1;
      std::cerr << "bench: writing the synthetic model to " << root_ << std::endl;
      make_model_pair(spec, root_);
      std::strncpy(path, root_.c_str(), sizeof path - 1);
    }
    comm.broadcast(path, sizeof path, 0);
    path_ = std::string(path) + "/target";
  }
  ~ModelDir() {
    std::error_code ignored;
    if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
  }
  ModelDir(const ModelDir&) = delete;
  ModelDir& operator=(const ModelDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string root_;  // non-empty on the rank that owns (and removes) the directory
  std::string path_;
};

// A tensor's view whatever its dtype (a quantized module's I32 codes, F8_E4M3 weight, scales).
const TensorView& raw_view(const Checkpoint& ckpt, const std::string& name) {
  const SafetensorsFile& f = ckpt.file_of(name);
  const std::string dtype = f.dtype_of(name);
  if (dtype == "F32" || dtype == "F16" || dtype == "BF16") return f.get(name);
  return f.get_other(name, dtype);
}

// Bytes one decode step reads: every tensor as the file stores it (a quantized module's codes,
// scales and zero points) but the embedding table, of which it reads one row (a tied lm_head
// reads the whole table as the classifier).
double decode_weight_bytes(const Checkpoint& ckpt) {
  double bytes = 0;
  const ModelConfig& c = ckpt.config();
  for (const std::string& name : ckpt.names()) {
    const TensorView& t = raw_view(ckpt, name);
    const double b = static_cast<double>(t.nbytes);
    if (name == embedding_tensor(c)) {
      bytes += static_cast<double>(c.hidden_size) * static_cast<double>(dtype_size(t.dtype));
      if (c.tie_word_embeddings) bytes += b;
    } else {
      bytes += b;
    }
  }
  return bytes;
}

// Weights: float tensors' elements, a packed module's [rows, cols] from its weight_shape, an
// FP8 weight's elements (scales, zero points and shapes are not parameters).
double parameter_count(const Checkpoint& ckpt) {
  double n = 0;
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const std::string& name : ckpt.names()) {
    const std::string dtype = ckpt.file_of(name).dtype_of(name);
    if (ends_with(name, ".weight_shape")) {
      const TensorView& t = raw_view(ckpt, name);
      double elements = 1;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        std::int64_t v = 0;
        if (dtype == "I64") {
          std::memcpy(&v, t.data + 8 * i, 8);
        } else {
          std::int32_t w = 0;
          std::memcpy(&w, t.data + 4 * i, 4);
          v = w;
        }
        elements *= static_cast<double>(v);
      }
      n += elements;
    } else if (dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F8_E4M3") {
      if (!ends_with(name, ".weight_scale") && !ends_with(name, ".weight_scale_inv"))
        n += static_cast<double>(raw_view(ckpt, name).numel());
    }
  }
  return n;
}

double median_of(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  return n == 0 ? 0 : n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

// A case's figures from its rounds' step times and communication times (seconds per step).
BenchCase summarize(const std::string& name, int tokens_per_step, double bytes_per_step,
                    const std::vector<double>& s, const std::vector<double>& comm = {}) {
  BenchCase c;
  c.comm_ms = median_of(comm) * 1e3;
  c.name = name;
  c.tokens_per_step = tokens_per_step;
  const double median = median_of(s);
  c.ms_median = median * 1e3;
  c.ms_min = *std::min_element(s.begin(), s.end()) * 1e3;
  c.ms_max = *std::max_element(s.begin(), s.end()) * 1e3;
  c.tokens_per_s = tokens_per_step > 0 ? tokens_per_step / median : 0;
  c.gb_per_s = bytes_per_step / median / 1e9;
  return c;
}

// Deterministic token ids in [3, vocab) (past the usual special ids) for the benchmark's inputs.
std::vector<std::int32_t> bench_tokens(int n, int vocab, std::uint32_t seed) {
  std::vector<std::int32_t> ids(n);
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (int& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = vocab > 3 ? 3 + static_cast<std::int32_t>((x >> 8) % static_cast<std::uint32_t>(vocab - 3))
                   : static_cast<std::int32_t>((x >> 8) % static_cast<std::uint32_t>(vocab));
  }
  return ids;
}

void check_options(const BenchOptions& o) {
  SPEC_INPUT_CHECK(o.threads >= 1, "--threads must be at least 1, got " << o.threads);
  SPEC_INPUT_CHECK(o.repeats >= 1, "--repeats must be at least 1, got " << o.repeats);
  SPEC_INPUT_CHECK(o.warmup >= 0, "--warmup must be >= 0, got " << o.warmup);
  SPEC_INPUT_CHECK(o.steps >= 1, "--steps must be at least 1, got " << o.steps);
  SPEC_INPUT_CHECK(o.context >= 1, "--context must be at least 1, got " << o.context);
  SPEC_INPUT_CHECK(o.verify_k >= 1, "--verify-k must be at least 1, got " << o.verify_k);
  SPEC_INPUT_CHECK(o.prefill >= 1, "--prefill must be at least 1, got " << o.prefill);
  SPEC_INPUT_CHECK(o.batch >= 1, "--batch must be at least 1, got " << o.batch);
  for (const std::string& c : o.cases)
    SPEC_INPUT_CHECK(c == "decode" || c == "verify" || c == "prefill" || c == "batch" ||
                         c == "experts" || c == "timing",
                     "--cases: unknown case '"
                         << c << "' (choose from decode, verify, prefill, batch, experts, timing)");
}

bool wants(const BenchOptions& o, const char* name) {
  return std::find(o.cases.begin(), o.cases.end(), name) != o.cases.end();
}

// The reference a case's GB/s is judged against: the backend's memory probes
// (backend/memory_probe.h: on the CPU every read kernel of every kernel variant this CPU runs, on
// CUDA the device's copy bandwidth), each timed per round across the ranks.
class BandwidthProbes {
 public:
  BandwidthProbes(ModelFactory& factory, std::size_t bytes_per_rank, int threads)
      : probes_(
            make_memory_probes(factory.backend(), factory.cuda_context(), bytes_per_rank, threads)),
        seconds_(probes_.size()) {}

  // One round of every probe (all ranks together).
  void round(Communicator& comm, bool record) {
    for (std::size_t i = 0; i < probes_.size(); ++i) {
      comm.barrier();
      const auto t0 = Clock::now();
      probes_[i]->pass();
      comm.barrier();
      if (record) seconds_[i].push_back(seconds_since(t0));
    }
  }

  // Fills rep.probes and puts the best (by median) as the bandwidth case.
  void report(BenchReport& rep, int tp) const;

 private:
  std::vector<std::unique_ptr<MemoryProbe>> probes_;
  std::vector<std::vector<double>> seconds_;  // per probe, per recorded round
};

void BandwidthProbes::report(BenchReport& rep, int tp) const {
  // Bytes one probe pass moves on all ranks (every probe of a backend moves the same).
  const double bw_bytes = probes_.front()->bytes() * tp;
  std::size_t best = 0;
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    const BenchCase c = summarize("bandwidth", 0, bw_bytes, seconds_[i]);
    BandwidthProbe f;
    f.isa = probes_[i]->isa();
    f.kernel = probes_[i]->kernel();
    f.gb_per_s = c.gb_per_s;
    f.gb_per_s_min = bw_bytes / (c.ms_max / 1e3) / 1e9;
    f.gb_per_s_max = bw_bytes / (c.ms_min / 1e3) / 1e9;
    rep.probes.push_back(f);
    if (f.gb_per_s > rep.probes[best].gb_per_s) best = i;
  }
  // The bound is the fastest probe: decode streams the same bytes, so it should not exceed it
  // by more than the noise.
  rep.cases.push_back(summarize("bandwidth", 0, bw_bytes, seconds_[best]));
}

// Step times (seconds per step) and communication times of the model cases, over the rounds;
// on a mixture-of-experts model the expert bytes of each case's last pass per round, and the
// experts case's times and expert counts per w (index w - 1).
struct CaseTimes {
  std::vector<double> decode, verify, prefill, batch;
  std::vector<double> c_decode, c_verify, c_prefill, c_batch;
  std::vector<double> e_decode, e_verify, e_prefill, e_batch;
  std::vector<std::vector<double>> sweep, c_sweep, sweep_unique, sweep_bytes;
};

// The unique experts per MoE layer and the expert bytes of the model's last pass (0, 0 for a
// dense model); `counts`: scratch.
std::pair<double, double> last_pass_experts(const LanguageModel& model, PassExpertCounts& counts) {
  const ExpertRouting* r = model.routing();
  if (r == nullptr || r->layers.empty()) return {0, 0};
  const std::vector<int> all = {r->n_tokens};
  count_experts(*r, PassTokens{all, {}}, counts);
  double unique = 0;
  for (int u : counts.unique) unique += u;
  return {unique / static_cast<double>(counts.layers),
          unique * static_cast<double>(r->expert_bytes)};
}

// The model cases of one benchmark: inputs made once, each case timed per round.
class ModelCases {
 public:
  ModelCases(const BenchOptions& o, LanguageModel& model, Communicator& comm)
      : o_(o), model_(model), comm_(comm) {
    const int V = model.config().vocab_size;
    prompt_ = bench_tokens(std::max(o.context, o.prefill), V, 1);
    steps_ids_ = bench_tokens(o.steps * o.batch, V, 2);
    verify_ids_ = bench_tokens(o.verify_k + 1, V, 3);
    const int need = std::max(o.context + std::max(o.steps, o.verify_k + 1), o.prefill);
    single_ = model.new_cache(need + 1);
    fill(*single_);
    if (wants(o, "batch"))
      for (int b = 0; b < o.batch; ++b) {
        caches_.push_back(model.new_cache(o.context + o.steps + 1));
        fill(*caches_.back());
      }
    chunks_.resize(o.batch);
  }

  // Whether the model routes its tokens to experts (known after the constructor's passes).
  bool moe() const { return model_.routing() != nullptr; }

  void round(bool record, CaseTimes& t) {
    if (wants(o_, "decode")) {
      timed(
          record, o_.steps, t.decode, t.c_decode, [&] { single_->truncate(o_.context); },
          [&](int s) {
            SeqChunk c{single_.get(), &steps_ids_[s], 1};
            model_.forward({&c, 1}, ForwardRequest{});
          });
      experts(record, t.e_decode);
    }
    if (wants(o_, "verify")) {
      timed(
          record, o_.steps, t.verify, t.c_verify, [] {},
          [&](int) {
            single_->truncate(o_.context);
            SeqChunk c{single_.get(), verify_ids_.data(), o_.verify_k + 1};
            model_.forward({&c, 1}, ForwardRequest{true, {}});
          });
      experts(record, t.e_verify);
    }
    if (wants(o_, "prefill")) {
      timed(
          record, 1, t.prefill, t.c_prefill, [&] { single_->truncate(0); },
          [&](int) {
            SeqChunk c{single_.get(), prompt_.data(), o_.prefill};
            model_.forward({&c, 1}, ForwardRequest{});
          });
      experts(record, t.e_prefill);
    }
    if (wants(o_, "batch")) {
      timed(
          record, o_.steps, t.batch, t.c_batch,
          [&] {
            for (auto& c : caches_) c->truncate(o_.context);
          },
          [&](int s) {
            for (int b = 0; b < o_.batch; ++b)
              chunks_[b] = SeqChunk{caches_[b].get(), &steps_ids_[s * o_.batch + b], 1};
            model_.forward(chunks_, ForwardRequest{});
          });
      experts(record, t.e_batch);
    }
    // The experts case: verify passes of w = 1 .. k+1 tokens (the same tokens every step, so
    // the last pass's experts are every pass's).
    if (!moe() || !wants(o_, "experts")) return;
    const std::size_t points = static_cast<std::size_t>(o_.verify_k + 1);
    for (auto* v : {&t.sweep, &t.c_sweep, &t.sweep_unique, &t.sweep_bytes}) v->resize(points);
    for (int w = 1; w <= o_.verify_k + 1; ++w) {
      const std::size_t i = static_cast<std::size_t>(w - 1);
      timed(
          record, o_.steps, t.sweep[i], t.c_sweep[i], [] {},
          [&](int) {
            single_->truncate(o_.context);
            SeqChunk c{single_.get(), verify_ids_.data(), w};
            model_.forward({&c, 1}, ForwardRequest{true, {}});
          });
      if (!record) continue;
      const auto [unique, bytes] = last_pass_experts(model_, counts_);
      t.sweep_unique[i].push_back(unique);
      t.sweep_bytes[i].push_back(bytes);
    }
  }

 private:
  void fill(KvCache& cache) {
    cache.truncate(0);
    SeqChunk c{&cache, prompt_.data(), o_.context};
    model_.forward({&c, 1}, ForwardRequest{});
  }
  // steps calls of step(s) after setup(), between barriers; the device is waited for before
  // the clock stops (one synchronisation per round, none per step).
  template <class Setup, class Step>
  void timed(bool record, int steps, std::vector<double>& t, std::vector<double>& c, Setup setup,
             Step step) {
    setup();
    comm_.barrier();
    comm_.reset_timing();
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) step(s);
    model_.synchronize();
    if (record) {
      t.push_back(seconds_since(t0) / steps);
      c.push_back(comm_.comm_seconds() / steps);
    }
  }

  // The expert bytes of the case's last pass (recorded rounds, mixture-of-experts models).
  void experts(bool record, std::vector<double>& bytes) {
    if (record && moe()) bytes.push_back(last_pass_experts(model_, counts_).second);
  }

  const BenchOptions& o_;
  LanguageModel& model_;
  Communicator& comm_;
  PassExpertCounts counts_;
  std::vector<std::int32_t> prompt_, steps_ids_, verify_ids_;
  std::unique_ptr<KvCache> single_;
  std::vector<std::unique_ptr<KvCache>> caches_;
  std::vector<SeqChunk> chunks_;
};

// The engine's phase timing alone: `steps` speculative-shaped steps (draft, verify, sample,
// other, draft) with nothing in their phases, then the batch's device read, as BatchDecoder
// does. Seconds per step; `threads`: the threads whose run-queue wait a step reads.
double timing_step_s(Communicator& comm, DeviceTimeline* device, int steps, int* threads) {
  ThreadWaitClock wait;
  *threads = wait.threads();
  DevicePhaseLog log(device);
  log.reserve(static_cast<std::size_t>(steps), 5);
  std::vector<float> rows, cpu, device_rows;
  rows.reserve(static_cast<std::size_t>(steps) * kNumPhases);
  cpu.reserve(static_cast<std::size_t>(steps) * kNumCpuColumns);
  device_rows.reserve(static_cast<std::size_t>(steps) * kNumDeviceColumns);
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    StepTimer timer(comm, &wait, &log);
    for (Phase p : {kPhaseDraft, kPhaseVerify, kPhaseSample, kPhaseOther, kPhaseDraft}) {
      timer.begin(p);
      timer.end();
    }
    timer.finish(rows, cpu);
  }
  if (log.on()) log.resolve(device_rows);
  return seconds_since(t0) / steps;
}

// The experts case's points from its rounds.
std::vector<ExpertSweepPoint> sweep_points(const CaseTimes& t) {
  std::vector<ExpertSweepPoint> out;
  for (std::size_t i = 0; i < t.sweep.size(); ++i) {
    if (t.sweep[i].empty()) continue;
    const BenchCase c = summarize("experts", static_cast<int>(i) + 1, 0, t.sweep[i]);
    ExpertSweepPoint p;
    p.w = static_cast<int>(i) + 1;
    p.ms_median = c.ms_median;
    p.ms_min = c.ms_min;
    p.ms_max = c.ms_max;
    p.over_decode = c.ms_median / (median_of(t.sweep[0]) * 1e3);
    p.unique_per_layer = median_of(t.sweep_unique[i]);
    p.expert_mb = median_of(t.sweep_bytes[i]) / 1e6;
    out.push_back(p);
  }
  return out;
}

void add_ratios(BenchReport& rep) {
  const double bw = rep.cases.front().gb_per_s;
  for (BenchCase& c : rep.cases) c.pct_bandwidth = 100.0 * c.gb_per_s / bw;
  auto find = [&](const char* name) -> const BenchCase* {
    for (const BenchCase& c : rep.cases)
      if (c.name == name) return &c;
    return nullptr;
  };
  if (const BenchCase* d = find("decode")) {
    if (const BenchCase* v = find("verify")) rep.verify_over_decode = v->ms_median / d->ms_median;
    if (const BenchCase* p = find("prefill"))
      rep.prefill_over_decode = p->tokens_per_s / d->tokens_per_s;
    if (const BenchCase* b = find("batch"))
      rep.batch_over_decode = b->tokens_per_s / d->tokens_per_s;
  }
}

}  // namespace

std::vector<ExpertSweepPoint> run_expert_sweep(const BenchOptions& options, LanguageModel& model,
                                               Communicator& comm) {
  BenchOptions o = options;
  o.cases = {"experts"};
  check_options(o);
  ModelCases cases(o, model, comm);
  CaseTimes t;
  for (int round = 0; round < o.warmup + o.repeats; ++round) cases.round(round >= o.warmup, t);
  return sweep_points(t);
}

BenchReport run_bench(const BenchOptions& o, ModelFactory& factory, Communicator& comm) {
  check_options(o);
  if (o.model_dir.empty()) validate(o.spec);
  const bool root = comm.rank() == 0;
  const int tp = comm.size();

  ModelDir dir(o, comm);
  Checkpoint ckpt(dir.path());
  std::unique_ptr<LanguageModel> model = factory.load(ckpt, /*sharded=*/true);
  const ModelConfig& cfg = model->config();
  const int need = std::max(o.context + std::max(o.steps, o.verify_k + 1), o.prefill);
  SPEC_INPUT_CHECK(need <= cfg.max_position_embeddings,
                   "the benchmark needs " << need << " positions but the model's context is "
                                          << cfg.max_position_embeddings
                                          << ": lower --context, --steps or --prefill");

  BenchReport rep;
  rep.cpu_model = cpu::cpu_model_name();
  rep.kernels = factory.kernel_description();
  rep.date = utc_timestamp();
  // The float dtype (the embedding's) and how the Linears are stored.
  rep.dtype = dtype_name(ckpt.tensor(embedding_tensor(ckpt.config())).dtype);
  rep.quantization = quantization_summary(ckpt.config());
  rep.weight_bytes = decode_weight_bytes(ckpt);
  rep.parameters = parameter_count(ckpt);
  rep.tp = tp;
  rep.threads = o.threads;
  rep.repeats = o.repeats;

  BandwidthProbes probes(factory, static_cast<std::size_t>(rep.weight_bytes / tp), o.threads);
  ModelCases cases(o, *model, comm);
  CaseTimes t;
  std::vector<double> timing_s;
  constexpr int kTimingSteps = 2000;
  for (int round = 0; round < o.warmup + o.repeats; ++round) {
    const bool record = round >= o.warmup;
    if (root)
      std::cerr << "bench: round " << round + 1 << "/" << o.warmup + o.repeats
                << (record ? "" : " (warm-up)") << std::endl;
    probes.round(comm, record);
    cases.round(record, t);
    if (wants(o, "timing")) {
      const double s =
          timing_step_s(comm, factory.device_timeline(), kTimingSteps, &rep.timing_threads);
      if (record) timing_s.push_back(s);
    }
  }
  if (!timing_s.empty()) {
    rep.timing_us = 1e6 * median_of(timing_s);
    rep.timing_us_min = 1e6 * *std::min_element(timing_s.begin(), timing_s.end());
    rep.timing_us_max = 1e6 * *std::max_element(timing_s.begin(), timing_s.end());
    rep.timing_device = factory.device_timeline() != nullptr;
  }

  probes.report(rep, tp);
  // A mixture-of-experts model's case reads its dense weights and the experts it routed to.
  double dense_bytes = rep.weight_bytes;
  if (const ExpertRouting* r = cases.moe() ? model->routing() : nullptr) {
    rep.moe_experts = r->n_experts;
    rep.moe_top_k = r->top_k;
    rep.moe_layers = static_cast<int>(r->layers.size());
    rep.expert_bytes = static_cast<double>(r->expert_bytes);
    dense_bytes =
        std::max(0.0, rep.weight_bytes - rep.expert_bytes * rep.moe_experts * rep.moe_layers);
  }
  auto bytes_of = [&](const std::vector<double>& expert_bytes) {
    if (expert_bytes.empty()) return rep.weight_bytes;
    double sum = 0;
    for (double b : expert_bytes) sum += b;
    return dense_bytes + sum / static_cast<double>(expert_bytes.size());
  };
  if (wants(o, "decode"))
    rep.cases.push_back(summarize("decode", 1, bytes_of(t.e_decode), t.decode, t.c_decode));
  if (wants(o, "verify"))
    rep.cases.push_back(
        summarize("verify", o.verify_k + 1, bytes_of(t.e_verify), t.verify, t.c_verify));
  if (wants(o, "prefill"))
    rep.cases.push_back(
        summarize("prefill", o.prefill, bytes_of(t.e_prefill), t.prefill, t.c_prefill));
  if (wants(o, "batch"))
    rep.cases.push_back(summarize("batch", o.batch, bytes_of(t.e_batch), t.batch, t.c_batch));
  rep.expert_sweep = sweep_points(t);
  add_ratios(rep);
  rep.step_graphs = factory.step_graph_report();
  return rep;
}

std::string format_table(const BenchReport& r) {
  std::ostringstream out;
  out << std::fixed;
  out << "model: " << std::setprecision(1) << r.parameters / 1e6 << "M parameters, " << r.dtype
      << ", decode reads " << std::setprecision(1) << r.weight_bytes / 1e6 << " MB/token; tp "
      << r.tp << ", threads " << r.threads << ", " << r.repeats << " repeats\n";
  if (!r.quantization.empty() && r.quantization != "none")
    out << "quantized: " << r.quantization << "\n";
  out << "cpu: " << r.cpu_model << "; kernels: " << r.kernels << "\n";
  out << "bandwidth probes, GB/s (median of the rounds; the best is the bandwidth row):\n";
  for (std::size_t i = 0; i < r.probes.size(); ++i) {
    const BandwidthProbe& p = r.probes[i];
    if (i == 0 || p.isa != r.probes[i - 1].isa) out << "  " << std::left << std::setw(10) << p.isa;
    out << std::right << " " << p.kernel << " " << std::setprecision(2) << p.gb_per_s;
    if (i + 1 == r.probes.size() || r.probes[i + 1].isa != p.isa) out << "\n";
  }
  out << std::left << std::setw(10) << "case" << std::right << std::setw(7) << "tokens"
      << std::setw(11) << "ms/step" << std::setw(20) << "(min - max)" << std::setw(11) << "tokens/s"
      << std::setw(9) << "GB/s" << std::setw(9) << "% bw";
  if (r.tp > 1) out << std::setw(10) << "comm ms";
  out << "\n";
  for (const BenchCase& c : r.cases) {
    std::ostringstream spread;
    spread << std::fixed << std::setprecision(3) << "(" << c.ms_min << " - " << c.ms_max << ")";
    out << std::left << std::setw(10) << c.name << std::right << std::setw(7) << c.tokens_per_step
        << std::setw(11) << std::setprecision(3) << c.ms_median << std::setw(20) << spread.str()
        << std::setw(11) << std::setprecision(1) << c.tokens_per_s << std::setw(9)
        << std::setprecision(2) << c.gb_per_s << std::setw(9) << std::setprecision(1)
        << c.pct_bandwidth;
    if (r.tp > 1) out << std::setw(10) << std::setprecision(3) << c.comm_ms;
    out << "\n";
  }
  out << std::setprecision(2);
  if (r.verify_over_decode > 0)
    out << "verify / decode time: " << r.verify_over_decode << " (target <= 1.3)\n";
  if (r.prefill_over_decode > 0)
    out << "prefill / decode tokens/s: " << r.prefill_over_decode << " (target >= 8)\n";
  if (r.batch_over_decode > 0)
    out << "batch / decode tokens/s: " << r.batch_over_decode << " (target >= 4)\n";
  if (!r.expert_sweep.empty()) {
    out << "experts (" << r.moe_experts << " experts, top-" << r.moe_top_k << ", " << r.moe_layers
        << " MoE layers, " << std::setprecision(3) << r.expert_bytes / 1e6
        << " MB per expert): verify of w tokens against decode (w = 1)\n"
        << "     w    ms/step  T_verify(w)/T_decode  unique experts/layer  expert MB/step\n";
    for (const ExpertSweepPoint& p : r.expert_sweep)
      out << std::setw(6) << p.w << std::setprecision(3) << std::setw(11) << p.ms_median
          << std::setprecision(2) << std::setw(22) << p.over_decode << std::setw(22)
          << p.unique_per_layer << std::setprecision(3) << std::setw(16) << p.expert_mb << "\n";
  }
  if (r.timing_us > 0) {
    out << "phase timing: " << std::setprecision(2) << r.timing_us << " us per step ("
        << r.timing_us_min << " - " << r.timing_us_max << "; " << r.timing_threads
        << " threads' run-queue wait" << (r.timing_device ? ", device marks" : "") << ")";
    for (const BenchCase& c : r.cases)
      if (c.name == "decode")
        out << ", " << std::setprecision(2) << 100.0 * r.timing_us / (1e3 * c.ms_median)
            << "% of a decode step (target < 1%)";
    out << "\n";
  }
  if (!r.step_graphs.empty()) out << r.step_graphs << " (rank 0, every case)\n";
  return out.str();
}

std::string to_json(const BenchReport& r, const std::string& command_line) {
  nlohmann::json j;
  j["command"] = command_line;
  j["cpu_model"] = r.cpu_model;
  j["kernels"] = r.kernels;
  j["date"] = r.date;
  j["dtype"] = r.dtype;
  j["quantization"] = r.quantization;
  j["parameters"] = r.parameters;
  j["decode_weight_bytes"] = r.weight_bytes;
  j["tp"] = r.tp;
  j["threads"] = r.threads;
  j["repeats"] = r.repeats;
  nlohmann::json cases = nlohmann::json::array();
  for (const BenchCase& c : r.cases)
    cases.push_back({{"name", c.name},
                     {"tokens_per_step", c.tokens_per_step},
                     {"ms_median", c.ms_median},
                     {"ms_min", c.ms_min},
                     {"ms_max", c.ms_max},
                     {"tokens_per_s", c.tokens_per_s},
                     {"gb_per_s", c.gb_per_s},
                     {"pct_bandwidth", c.pct_bandwidth},
                     {"comm_ms", c.comm_ms}});
  j["cases"] = cases;
  nlohmann::json probes = nlohmann::json::array();
  for (const BandwidthProbe& p : r.probes)
    probes.push_back({{"isa", p.isa},
                      {"kernel", p.kernel},
                      {"gb_per_s", p.gb_per_s},
                      {"gb_per_s_min", p.gb_per_s_min},
                      {"gb_per_s_max", p.gb_per_s_max}});
  j["bandwidth_probes"] = probes;
  j["verify_over_decode"] = r.verify_over_decode;
  j["prefill_over_decode"] = r.prefill_over_decode;
  j["batch_over_decode"] = r.batch_over_decode;
  j["timing"] = {{"us_per_step", r.timing_us},
                 {"us_per_step_min", r.timing_us_min},
                 {"us_per_step_max", r.timing_us_max},
                 {"threads", r.timing_threads},
                 {"device_marks", r.timing_device}};
  if (!r.step_graphs.empty()) j["step_graphs"] = r.step_graphs;
  if (!r.expert_sweep.empty()) {
    nlohmann::json sweep = nlohmann::json::array();
    for (const ExpertSweepPoint& p : r.expert_sweep)
      sweep.push_back({{"w", p.w},
                       {"ms_median", p.ms_median},
                       {"ms_min", p.ms_min},
                       {"ms_max", p.ms_max},
                       {"verify_over_decode", p.over_decode},
                       {"unique_per_layer", p.unique_per_layer},
                       {"expert_mb", p.expert_mb}});
    j["experts"] = {{"experts", r.moe_experts},
                    {"top_k", r.moe_top_k},
                    {"moe_layers", r.moe_layers},
                    {"expert_bytes", r.expert_bytes},
                    {"verify_sweep", sweep}};
  }
  return j.dump(2);
}

}  // namespace specrun
