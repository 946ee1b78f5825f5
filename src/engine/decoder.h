// Decoding of one batch of prompts in one mode: `baseline` (target only) or `speculative`
// (a Drafter proposes a token tree per sequence, the target verifies it). All ranks of a
// tensor-parallel group call the same functions with the same prompts; tp rank 0's decisions
// (each step's tokens, proposals and verdicts) are broadcast, so the ranks never diverge even if
// their logits, or their drafters' proposals, differed.
//
// The speculative step, in the phases it is timed by:
//   draft:  Drafter::propose: a token tree per sequence (a chain being one path) within
//           DraftShape::limit (fewer nodes near max_new_tokens), then tp rank 0's proposals
//           broadcast to the group (spec/drafter.h: the rank-agreement rule)
//   verify: one target forward over every sequence's uncommitted tokens and its tree (tree
//           attention: each node sees the committed tokens and its ancestors)
//   sample: verification on the backend (TokenOps: the accepted path through the tree and the
//           token after it), rank 0's verdicts broadcast
//   other:  commit: append the accepted path and that token, keep the path's keys and values in
//           the target's cache (LanguageModel::keep: the rejected nodes leave nothing behind),
//           record the step
//   draft:  tell the drafter what was accepted (with the target's features when it asked)
// The engine knows no drafter kind; a new one plugs in through spec/drafter_registry.h.
//
// Mixture-of-experts models: every forward pass of the target (the prefill, each baseline decode,
// each verify) is counted in BatchResult::target_experts from its routing
// (engine/expert_accounting.h; a verify's counts cover every node it computed and, apart, the
// kept tokens: the uncommitted ones and the accepted path), in the step's "other" phase; a draft
// model's passes go to BatchResult::draft_experts through a DraftExpertLog, never into the
// target's. The records of a batch are reserved at its prefill, so a warm step allocates nothing
// (the draft's for depth + 2 passes per step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/device_timeline.h"
#include "common/host_stats.h"
#include "dist/communicator.h"
#include "engine/expert_accounting.h"
#include "engine/step_timer.h"
#include "io/prompt_file.h"
#include "io/records.h"
#include "model/language_model.h"
#include "spec/drafter.h"
#include "spec/sampling.h"
#include "spec/synthetic_acceptance.h"
#include "spec/token_ops.h"

namespace specrun {

struct DecodeOptions {
  int max_new_tokens = 64;
  DraftShape shape;         // chain or tree, and their sizes (decode.draft_len, tree_*)
  SamplingParams sampling;  // temperature <= 0: greedy
  bool stop_at_eos = true;
  // Stop tokens besides the target's EOS ids (decode.stop_tokens, engine/stop_tokens.h).
  std::vector<int> extra_stop_ids;
  std::uint64_t seed = 0;
  // decode.acceptance: real, or a synthetic rule that overrides the verifier's verdicts.
  SyntheticAcceptance acceptance;
  // Test-only: spin (on the CPU, like slower code) this long in `inject_phase` ("draft",
  // "verify", "sample") every step.
  double inject_delay_ms = 0;
  std::string inject_phase = "none";

  // The options a drafter shares with the decoder.
  DraftOptions draft() const { return DraftOptions{sampling, shape}; }
};

// Throws (exit code 2, naming the prompt's index and id) when the prompt is empty, holds a token
// outside the vocabulary, or cannot grow by max_new_tokens within the model's context.
void check_prompt_fits(const Prompt& p, const ModelConfig& config, int max_new_tokens);

// Prompts [0, n) fit the context with max_new_tokens more, from the offsets alone (cheap: a
// prompt file declaring one huge prompt is refused before its tokens are read or hashed).
void check_prompt_lengths(const PromptReader& prompts, std::int64_t n, const ModelConfig& config,
                          int max_new_tokens);

// check_prompt_fits for prompts [0, n) of the prompt file, read in windows of a few thousand
// (bounded memory), before a job writes anything: a bad prompt stops the job at its start, not in
// the middle, and the message names the file.
void check_all_prompts(const PromptReader& prompts, std::int64_t n, const ModelConfig& config,
                       int max_new_tokens);

class BatchDecoder {
 public:
  // target: sharded over `tp_comm`; drafter: nullptr for baseline-only jobs; ops: the token
  // decisions of the target's backend; device: the rank's device clock, for the device rows of
  // the timings (nullptr: none, BatchResult::device_ms stays empty); draft_experts: the log the
  // draft model's routing goes to (the drafter registry's observer, DrafterContext; nullptr:
  // none). All must outlive the decoder.
  BatchDecoder(LanguageModel& target, Drafter* drafter, TokenOps& ops, Communicator& tp_comm,
               const DecodeOptions& options, DeviceTimeline* device = nullptr,
               DraftExpertLog* draft_experts = nullptr);
  ~BatchDecoder();

  // Decodes `prompts` in `mode` (kModeBaseline or kModeSpeculative). Returns this rank's records;
  // timings hold this rank's row only (n_ranks = 1); the caller gathers them.
  BatchResult run(const std::string& mode, std::int64_t batch, const std::vector<Prompt>& prompts);

 private:
  struct Sequence;

  // Sequences for `prompts` with their target caches; checks every prompt against the model.
  void start_batch(const std::vector<Prompt>& prompts);
  // Target prefill and the first generated token of each sequence; returns the prompts'
  // captured hidden states (capture: the layer ids, may be empty).
  RowsView first_tokens(std::span<const int> capture);
  // KV cache room of a sequence: prompt, max new tokens, one proposal.
  int capacity_of(const Sequence& s) const;
  // The sequences still decoding, as indices (active_); false when none is left.
  bool collect_active();
  // The next token of each active sequence from logits row r (greedy or sampled at its next
  // position), agreed through tp rank 0, into decided_.
  void decide_next(const RowsView& logits);
  void baseline_step(std::int64_t batch, std::int32_t step, BatchResult& result);
  void speculative_step(std::int64_t batch, std::int32_t step, BatchResult& result);
  // The speculative step's parts: tp rank 0's proposals to every rank, the target's forward over
  // them, the verdicts (agreed through tp rank 0), the commit.
  void check_proposals(std::span<const DraftTree> trees) const;
  void agree_proposals(std::span<DraftTree> trees);
  ForwardResult verify_forward(std::span<const DraftTree> trees);
  void decide_verdicts(const RowsView& logits, std::span<const DraftTree> trees);
  void apply_synthetic_acceptance(std::span<const DraftTree> trees);
  void commit(std::int64_t batch, std::int32_t step, std::span<const DraftTree> trees,
              const RowsView& hidden, BatchResult& result);
  void tell_drafter(const RowsView& hidden);
  // The expert accounting of the target's last forward pass (chunks_ over the sequences
  // active_; verify: kept = the uncommitted tokens and the accepted paths of verdicts_), into
  // result.target_experts; nothing for a dense target.
  void record_target_pass(std::int64_t batch, std::int32_t step, PassKind kind,
                          std::span<const DraftTree> trees, BatchResult& result);
  // Tells the draft model's expert log which drafter call the next passes belong to.
  void draft_pass(std::int64_t batch, std::int32_t step, PassKind kind);
  // Moves the sequences' records into `result`.
  void finish_batch(BatchResult& result);
  // Appends emitted tokens to sequence i, stopping at EOS and max_new_tokens; returns how many
  // it appended.
  int append_tokens(Sequence& s, const std::int32_t* emitted, int count);
  // Broadcasts `values` from tp rank 0 so every rank holds the same decisions.
  void agree(std::vector<std::int32_t>& values);
  void inject(const char* phase);

  LanguageModel& target_;
  Drafter* drafter_;
  TokenOps& ops_;
  Communicator& tp_comm_;
  DecodeOptions options_;
  std::vector<Sequence> seqs_;
  SteadyClockPoint t_batch_;
  ThreadWaitClock wait_clock_;  // run-queue wait of this process's threads (the CPU rows)
  DevicePhaseLog device_log_;   // the device rows (engine/step_timer.h)
  DraftExpertLog* draft_experts_;

  // Per-step scratch (grown, never shrunk: no allocation per step once warm).
  std::vector<int> active_, rows_;
  std::vector<ProposalLimit> limits_;
  std::vector<SeqChunk> chunks_;
  std::vector<std::int32_t> decided_, proposals_, verify_tokens_, verify_parents_, emitted_;
  std::vector<int> path_rows_, feature_rows_, verify_start_;
  std::vector<std::int32_t> node_depth_;  // commit(): each proposal node's depth
  std::vector<double> u_;
  std::vector<DraftTree> trees_;
  std::vector<TreeToVerify> to_verify_;
  std::vector<TreeVerdict> verdicts_;
  std::vector<ChainToVerify> chains_;
  std::vector<VerifyResult> chain_results_;
  std::vector<SeqFeatures> features_;
  // The expert accounting's scratch (record_target_pass).
  PassExpertCounts expert_counts_;
  std::vector<int> expert_tokens_;
  std::vector<std::uint8_t> expert_kept_;
  std::vector<std::int64_t> expert_prompts_;
};

}  // namespace specrun
