// `specrun bench`: how close decoding comes to the machine's memory bandwidth (CPU or GPU).
//
// One run builds a synthetic Llama model (make_model_pair into a temporary directory, or an
// existing make-model directory), then, round after round so that a noisy machine affects every
// case alike, measures:
//   bandwidth  the backend's memory probes over a buffer as large as this rank's weights
//              (backend/memory_probe.h: on the CPU every read kernel of every kernel variant this
//              CPU supports, on CUDA a device-to-device copy), the best of them being the bound
//              that the other cases' "% bw" divide by;
//   decode     batch 1, one new token per forward;
//   verify     batch 1, k+1 new tokens scored in one forward (all logits), then rolled back;
//   prefill    batch 1, a prompt of `prefill` tokens from an empty cache;
//   batch      `batch` sequences, one new token each, in one forward;
//   experts    (mixture-of-experts models only) verify passes of w = 1 .. k+1 tokens, each timed
//              like verify, beside the unique experts per MoE layer the pass read
//              (engine/expert_accounting.h): T_verify(w) / T_decode with T_decode = the w = 1
//              pass, and the expert bytes of each w. On such a model every case's GB/s counts
//              the bytes it read: the dense weights plus its unique experts' (its last pass of
//              each round, averaged), not every expert's;
//   timing     the engine's per-step phase timing alone (engine/step_timer.h: clocks, CPU rows,
//              the run-queue wait of every thread, and on a device its marks, read once per
//              batch): a speculative step's five phases with nothing in them, microseconds per
//              step and its share of a decode step.
// Every case starts from a cache of `context` tokens (prefill: empty) so that attention stays
// short and equal across rounds. Round 0 .. warmup-1 are not recorded. Figures are medians with
// min/max over the recorded rounds of each round's mean step time.
//
// Under mpirun the ranks form one tensor-parallel group (tp = world size); every rank must call
// run_bench with the same options. Timings are rank 0's; the model and bandwidth figures count
// the bytes of all ranks together.
#pragma once

#include <string>
#include <vector>

#include "model/synthetic.h"

namespace specrun {

class Communicator;
class LanguageModel;
class ModelFactory;

struct BenchOptions {
  SyntheticSpec spec;     // the synthetic model (ignored when model_dir is set)
  std::string model_dir;  // an existing make-model target directory; empty: make one
  int threads = 2;        // OpenMP threads per rank
  int repeats = 5;        // recorded rounds
  int warmup = 1;         // rounds run first and discarded
  int steps = 16;         // forward calls per round for decode, verify and batch
  int context = 32;       // cache length every decode/verify/batch step starts from
  int verify_k = 4;       // verify scores k+1 tokens
  int prefill = 128;      // prompt length of the prefill case
  int batch = 8;          // sequences of the batched-decode case
  std::vector<std::string> cases = {"decode", "verify", "prefill", "batch", "experts", "timing"};
};

// One measured case.
struct BenchCase {
  std::string name;         // "bandwidth", "decode", "verify", "prefill", "batch"
  int tokens_per_step = 0;  // new tokens per forward (0 for bandwidth)
  double ms_median = 0, ms_min = 0, ms_max = 0;  // per step (bandwidth: per full read)
  double tokens_per_s = 0;                       // tokens_per_step / median step time
  double gb_per_s = 0;       // weight bytes (bandwidth: buffer bytes) / median step time
  double pct_bandwidth = 0;  // gb_per_s / the bandwidth case's median GB/s * 100
  // Rank 0's time inside collectives per step, waits for the other ranks included (median over
  // the rounds; 0 at tp 1).
  double comm_ms = 0;
};

// One point of the experts case: a verify pass of w tokens of a mixture-of-experts model.
struct ExpertSweepPoint {
  int w = 0;                                     // tokens in the pass
  double ms_median = 0, ms_min = 0, ms_max = 0;  // per pass
  double over_decode = 0;                        // ms_median / the w = 1 point's
  double unique_per_layer = 0;                   // the pass's unique experts per MoE layer
  double expert_mb = 0;                          // their bytes, all MoE layers (MB = 1e6 bytes)
};

// One read kernel of one kernel variant (the bandwidth probe's candidates).
struct BandwidthProbe {
  std::string isa;                                          // cpu::isa_name
  std::string kernel;                                       // cpu::read_kernel_name
  double gb_per_s = 0, gb_per_s_min = 0, gb_per_s_max = 0;  // over the recorded rounds
};

struct BenchReport {
  std::string cpu_model;     // /proc/cpuinfo "model name"
  std::string kernels;       // the kernel variant in use (cpu::describe_kernel_choice)
  std::string date;          // UTC, ISO 8601
  std::string dtype;         // weight dtype of the model
  std::string quantization;  // quantization_summary of the model ("none": float weights)
  double weight_bytes = 0;   // bytes one decode step reads (all ranks): layers, lm_head, norms
  double parameters = 0;     // all parameters (embedding included)
  int tp = 1, threads = 1, repeats = 0;
  std::vector<BenchCase> cases;        // bandwidth (the best probe) first
  std::vector<BandwidthProbe> probes;  // every probe, in variant then kernel order
  // The ratios (0 when a case was not run): verify ms / decode ms; prefill tokens/s /
  // decode tokens/s; batch tokens/s / decode tokens/s.
  double verify_over_decode = 0, prefill_over_decode = 0, batch_over_decode = 0;
  // The phase timing's cost per step (median over the rounds, rank 0), the threads whose
  // run-queue wait it reads, whether it marked a device; 0 when the case was not run.
  double timing_us = 0, timing_us_min = 0, timing_us_max = 0;
  int timing_threads = 0;
  bool timing_device = false;
  // Mixture-of-experts models (empty sweep for dense ones): the experts case, and the shape.
  std::vector<ExpertSweepPoint> expert_sweep;
  int moe_experts = 0, moe_top_k = 0, moe_layers = 0;
  double expert_bytes = 0;  // one expert's, all ranks
  // On a device: how the passes ran (ModelFactory::step_graph_report: replays, captures, launches
  // one by one), so that a tensor-parallel run shows whether its steps were graphs; empty on
  // the CPU.
  std::string step_graphs;
};

// Runs the benchmark on every rank of `tp_comm` (size = tp), with the model built by `factory`
// (the CPU or the CUDA backend; on CUDA the bandwidth reference is the device's copy bandwidth).
// Throws (exit code 2) for bad options, naming them. Progress lines go to stderr on rank 0.
BenchReport run_bench(const BenchOptions& options, ModelFactory& factory, Communicator& tp_comm);

// The experts case alone on `model` (warmup + repeats rounds, rank 0's times; every rank of
// `comm` calls): a verify pass of w = 1 .. verify_k+1 tokens each; empty for a dense model.
std::vector<ExpertSweepPoint> run_expert_sweep(const BenchOptions& options, LanguageModel& model,
                                               Communicator& comm);

// The table printed by `specrun bench`, and the same figures as JSON text.
std::string format_table(const BenchReport& report);
std::string to_json(const BenchReport& report, const std::string& command_line);

}  // namespace specrun
