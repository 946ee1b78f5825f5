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

// What a forward pass of the expert accounting was for (result schema 7, /<mode>/experts). The
// target's passes: prefill (the prompts, and each sequence's first token), decode (a baseline
// step: one token per sequence), verify (a speculative step: each sequence's uncommitted tokens
// and its proposal). A mixture-of-experts draft model's passes, recorded apart from the target's:
// draft_prefill (Drafter::begin_batch), propose (while it proposes), accepted (when it is told
// the verdicts). The names are the file's `kinds` attribute.
inline constexpr std::array<const char*, 6> kPassKindNames = {
    "prefill", "decode", "verify", "draft_prefill", "propose", "accepted"};
inline constexpr int kNumPassKinds = static_cast<int>(kPassKindNames.size());
enum PassKind : int8_t {
  kPassPrefill,
  kPassDecode,
  kPassVerify,
  kPassDraftPrefill,
  kPassPropose,
  kPassAccepted
};

// The models whose passes the expert accounting records, the /<mode>/experts/<model> groups.
inline constexpr const char* kExpertTarget = "target";
inline constexpr const char* kExpertDraft = "draft";

// The experts one model's forward passes read, per pass and MoE layer (engine/expert_accounting.h
// counts them from each pass's routing, model/expert_routing.h). A pass's tokens are its
// sequences' new tokens; "kept" tokens are those that stay in their sequence after the pass: every
// token but a verify's rejected proposal nodes (a verify keeps the uncommitted tokens and the
// accepted path). Empty (no passes, no layers) for a dense model.
struct ExpertRecords {
  // The model's shape: experts per token, routed experts per MoE layer, expert-parallel ranks
  // (expert e on rank e / (n_experts / ep)), one expert's bytes (gate, up, down, all ranks), and
  // the MoE layers' ids (L of them).
  int32_t top_k = 0;
  int32_t n_experts = 0;
  int32_t ep = 1;
  int64_t expert_bytes = 0;
  std::vector<int32_t> layers;

  // Per pass (P rows, in the order they ran):
  std::vector<int64_t> batch;        // batch number
  std::vector<int32_t> step;         // decoding step (-1: before the first, e.g. the prefill)
  std::vector<int8_t> kind;          // PassKind
  std::vector<int32_t> sequences;    // sequences in the pass (its per-sequence rows)
  std::vector<int32_t> tokens;       // tokens computed
  std::vector<int32_t> kept_tokens;  // of those, kept
  // Per pass and layer, [P x L]: experts with at least one token (the experts the pass read),
  // (token, expert) pairs (= tokens x top_k), the most tokens on one expert, and the unique
  // experts and pairs of the kept tokens alone.
  std::vector<int32_t> unique, pairs, max_load, kept_unique, kept_pairs;
  // Per pass, layer and expert-parallel rank, [P x L x ep]: the (token, expert) pairs of the
  // experts on that rank (the tokens its experts computed).
  std::vector<int32_t> rank_pairs;
  // Per pass and sequence (R rows: each pass's `sequences` rows, in batch order): the sequence
  // (prompt index; -1 where the model did not say), its tokens and kept tokens, and per layer
  // [R x L] its unique experts, all and kept.
  std::vector<int64_t> seq_prompt_index;
  std::vector<int32_t> seq_tokens, seq_kept_tokens;
  std::vector<int32_t> seq_unique, seq_kept_unique;

  int64_t passes() const { return static_cast<int64_t>(step.size()); }
  int64_t sequence_rows() const { return static_cast<int64_t>(seq_prompt_index.size()); }
  int n_layers() const { return static_cast<int>(layers.size()); }
  bool empty() const { return step.empty(); }
  // Bytes of expert weights pass p read in layer l: its unique experts x expert_bytes.
  int64_t bytes(int64_t p, int l) const {
    return static_cast<int64_t>(unique[static_cast<size_t>(p * n_layers() + l)]) * expert_bytes;
  }
  int64_t kept_bytes(int64_t p, int l) const {
    return static_cast<int64_t>(kept_unique[static_cast<size_t>(p * n_layers() + l)]) *
           expert_bytes;
  }
  // The same model shape (top_k, experts, ep, expert bytes, layers).
  bool same_shape(const ExpertRecords& o) const {
    return top_k == o.top_k && n_experts == o.n_experts && ep == o.ep &&
           expert_bytes == o.expert_bytes && layers == o.layers;
  }
  // Appends `o`'s passes (the same shape, or any shape when this holds none).
  void append(const ExpertRecords& o);
  // Keeps the shape, drops the passes (capacity stays).
  void clear_passes();
  bool operator==(const ExpertRecords&) const = default;
};

// What is wrong with `r`, or "" when nothing is: the shape (1 <= top_k <= n_experts, ep divides
// n_experts, layers ascending), the sizes of its tables, known kinds, and the identities of
// every pass: its sequence rows sum to its tokens and kept tokens (kept <= tokens), and per
// layer pairs == tokens x top_k, kept_pairs == kept_tokens x top_k, the ranks' pairs sum to
// pairs, kept_unique <= unique <= min(n_experts, pairs), max_load <= tokens, and every
// sequence's unique experts lie between top_k (if it has tokens) and min(unique, its pairs).
std::string expert_records_problem(const ExpertRecords& r);
// The shape's part of it alone (for records without passes).
std::string expert_shape_problem(const ExpertRecords& r);

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
  // The expert accounting of the batch's forward passes (result schema 7): the target's, and a
  // mixture-of-experts draft model's apart from it. Empty for dense models.
  ExpertRecords target_experts;
  ExpertRecords draft_experts;
  // Length max_depth (draft_len for chains, tree_depth for trees; empty in baseline mode):
  // element i-1 counts the verify steps of this batch (over all sequences) in which at least i
  // draft tokens were accepted.
  std::vector<int64_t> accepted_per_position;
};

}  // namespace specrun
