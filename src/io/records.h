// The records a run produces, as plain structs (no HDF5 here): the engine fills them at batch
// boundaries, rank 0 hands them to ResultWriter::append_batch, and ResultReader gives them back
// to report/compare/--resume. docs/file-formats.md documents how each field is stored.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/host_stats.h"

namespace specrun {

// Decoding modes, which are also the result file's top-level group names.
inline constexpr const char* kModeBaseline = "baseline";
inline constexpr const char* kModeSpeculative = "speculative";
// A generation job's only mode (engine/dataset_job.h): writes a dataset, not a result file.
inline constexpr const char* kModeDataset = "dataset";

// True for "baseline" and "speculative".
inline bool is_known_mode(const std::string& mode) {
  return mode == kModeBaseline || mode == kModeSpeculative;
}

// Phases of a decoding step, in the order of the timings array's last axis.
//   draft:  the draft model proposing tokens (0 in baseline mode)
//   verify: the target model's forward pass (in baseline mode: its one-token forward)
//   comm:   communicator calls (all-reduce, all-gather, broadcast, barrier)
//   sample: sampling and acceptance/rejection
//   other:  everything else inside the step (bookkeeping, KV rollback)
//   total:  wall time of the whole step (>= the sum of the others when timed without overlap)
inline constexpr std::array<const char*, 6> kPhaseNames = {"draft",  "verify", "comm",
                                                           "sample", "other",  "total"};
inline constexpr int kNumPhases = static_cast<int>(kPhaseNames.size());
enum Phase : int { kPhaseDraft, kPhaseVerify, kPhaseComm, kPhaseSample, kPhaseOther, kPhaseTotal };

// Columns of a step's CPU row (the cpu_timings array's last axis): the rank's main thread's CPU
// time in each phase of kPhaseNames ("comm": the step's CPU time outside the other phases;
// "total": the whole step's), then "run_queue_wait": how long the process's threads were
// runnable but waiting for a CPU since the previous step (the scheduler's schedstat; NaN where the
// kernel does not keep it). Wall time a phase took beyond its CPU time was spent blocked or
// descheduled; run-queue wait that grows between two runs means something else took the CPUs.
inline constexpr std::array<const char*, 7> kCpuColumns = {
    "draft", "verify", "comm", "sample", "other", "total", "run_queue_wait"};
inline constexpr int kNumCpuColumns = static_cast<int>(kCpuColumns.size());
inline constexpr int kCpuRunQueueWait = kNumPhases;

// Columns of a step's device row (the device_timings array's last axis, result schema 5): the
// device time of each phase, measured on the device's own queue (common/device_timeline.h) from
// the phase's start to the next phase's start, and of the whole step. The collectives a phase
// enqueues run inside it on the device, so there is no comm column: the timings row's comm
// holds their device time on the CUDA backend (NCCL's events). NaN where the rank has no
// device (the CPU backend). Device time well below the wall time of the same phase means the
// host, not the device, set the pace (launches, a slow CPU); device time that grew means the
// kernels or the collectives got slower.
inline constexpr std::array<const char*, 5> kDeviceColumns = {"draft", "verify", "sample", "other",
                                                              "total"};
inline constexpr int kNumDeviceColumns = static_cast<int>(kDeviceColumns.size());
// The device row's column of a phase of kPhaseNames (-1 for comm).
inline constexpr int device_column(int phase) {
  return phase == kPhaseDraft    ? 0
         : phase == kPhaseVerify ? 1
         : phase == kPhaseSample ? 2
         : phase == kPhaseOther  ? 3
         : phase == kPhaseTotal  ? 4
                                 : -1;
}

// Columns of a step's pass row (the device_passes array's last axis, result schema 6): how the
// forward passes of the step's draft phase and of its verify phase were issued on the device
// (common/device_timeline.h DevicePasses): replayed as a kept CUDA graph, captured into a new
// one, or launched one kernel at a time, recorded first (eager) or not (unrecorded). Counts
// (passes of the sample and other phases, none in today's steps, count with verify); NaN where
// the rank has no device. A verify phase whose passes moved from replayed to eager or
// unrecorded is the step that lost its graph: slower on the host (one launch per kernel), the
// same on the device.
inline constexpr std::array<const char*, 8> kPassColumns = {
    "draft_replayed",  "draft_captured",  "draft_eager",  "draft_unrecorded",
    "verify_replayed", "verify_captured", "verify_eager", "verify_unrecorded"};
inline constexpr int kNumPassColumns = static_cast<int>(kPassColumns.size());
inline constexpr int kPassKinds = 4;  // replayed, captured, eager, unrecorded per phase
// The first column of a phase's four (draft: 0; verify and the rest: 4).
inline constexpr int pass_column(int phase) {
  return phase == kPhaseDraft ? 0 : kPassKinds;
}

// Why a sequence stopped.
enum FinishReason : int8_t { kFinishLength = 0, kFinishEos = 1 };

// One prompt's outcome in one mode.
struct SequenceRecord {
  int64_t prompt_index = 0;  // row of the prompt in the prompt file
  std::string prompt_id;     // the prompt file's id (or the index as text when it has none)
  std::string category;      // "" when the prompt file has none
  int32_t prompt_len = 0;    // prompt tokens
  int32_t generated = 0;     // tokens emitted after the prompt (== output_tokens.size())
  int32_t verify_steps = 0;  // decoding steps after the prefill (baseline: generated - 1)
  int64_t drafted = 0;       // draft tokens proposed, summed over steps (baseline: 0)
  int64_t accepted = 0;      // draft tokens accepted, summed over steps (baseline: 0)
  int8_t finish_reason = kFinishLength;
  double wall_s = 0;                   // seconds from the sequence's first step to its last
  std::vector<int32_t> output_tokens;  // generated token ids, prompt excluded
};

// One sequence in one decoding step of a batch.
struct StepRecord {
  int64_t batch = 0;         // batch number (BatchResult::batch)
  int32_t step = 0;          // step within the batch, from 0
  int64_t prompt_index = 0;  // which sequence
  int32_t active = 0;        // sequences still decoding in this step (batch occupancy)
  int32_t drafted = 0;       // draft tokens (tree nodes, root excluded) proposed in this step
  int32_t accepted = 0;      // of those, accepted: the accepted path's length (0..depth)
  int32_t depth = 0;         // the proposal's deepest path (a chain of k: k; baseline: 0)
  int8_t bonus = 0;          // 1: the accepted path ends at a leaf, so the emitted token is the
                             // bonus sample (0: a correction, or no proposal)
  int32_t emitted = -1;      // tokens appended to the output (accepted + 1, fewer when EOS or
                             // max_new_tokens cut the step; -1: unknown, result schema 1)
};

// Everything one batch produced in one mode, gathered to rank 0.
struct BatchResult {
  int64_t batch = 0;  // global batch number (prompts [batch*B, batch*B + B) of the shard rule)
  std::vector<SequenceRecord> sequences;
  std::vector<StepRecord> steps;
  int32_t n_steps = 0;  // decoding steps of this batch (rows of timings)
  int32_t n_ranks = 0;  // world size
  // [n_steps x n_ranks x kNumPhases] milliseconds, row-major: timings_ms[(s*n_ranks + r)*6 + p].
  std::vector<float> timings_ms;
  // [n_steps x n_ranks x kNumCpuColumns] milliseconds, the same rows: CPU time and run-queue
  // wait of each step (kCpuColumns).
  std::vector<float> cpu_ms;
  // [n_steps x n_ranks x kNumDeviceColumns] milliseconds, the same rows: each step's device time
  // per phase (kDeviceColumns); empty when no rank has a device (written as NaN).
  std::vector<float> device_ms;
  // [n_steps x n_ranks x kNumPassColumns] counts, the same rows: how each step's forward passes
  // were issued on the device (kPassColumns); empty when no rank has a device (written as NaN).
  std::vector<float> device_passes;
  // [n_ranks x kNumHostFields]: each rank's host snapshot after the batch (common/host_stats.h
  // kHostFields; NaN for what a rank could not read, and for ranks of other dp groups), and per
  // rank the busy processes named ("name (pid) 97%; ...", busiest first).
  std::vector<float> host;
  std::vector<std::string> host_busy;
  // Length max_depth (draft_len for chains, tree_depth for trees; empty in baseline mode):
  // element i-1 counts the verify steps of this batch (over all sequences) in which at least i
  // draft tokens were accepted.
  std::vector<int64_t> accepted_per_position;
};

}  // namespace specrun
