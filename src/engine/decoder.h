// Decoding of one batch of prompts in one mode: `baseline` (target only) or `speculative`
// (a Drafter proposes, the target verifies). All ranks of a tensor-parallel group call the same
// functions with the same prompts; tp rank 0's token decisions are broadcast, so the ranks never
// diverge even if their logits differed in the last bit.
//
// The speculative step, in the phases it is timed by:
//   draft:  Drafter::propose (a chain of up to k tokens per sequence; fewer near max_new_tokens)
//   verify: one target forward over every sequence's uncommitted tokens and its proposal
//   sample: verification on the backend (TokenOps), rank 0's outcome broadcast
//   other:  commit (append, roll the target cache back to the accepted prefix), tell the drafter
// The engine knows no drafter kind; a new one plugs in through spec/drafter_registry.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "dist/communicator.h"
#include "io/prompt_file.h"
#include "io/records.h"
#include "model/language_model.h"
#include "spec/drafter.h"
#include "spec/sampling.h"
#include "spec/token_ops.h"

namespace specrun {

struct DecodeOptions {
  int max_new_tokens = 64;
  int draft_len = 4;        // k
  SamplingParams sampling;  // temperature <= 0: greedy
  bool stop_at_eos = true;
  std::uint64_t seed = 0;
  // Test-only: sleep this long in `inject_phase` ("draft", "verify", "sample") every step.
  double inject_delay_ms = 0;
  std::string inject_phase = "none";
};

class BatchDecoder {
 public:
  // target: sharded over `tp_comm`; drafter: nullptr for baseline-only jobs; ops: the token
  // decisions of the target's backend. All must outlive the decoder.
  BatchDecoder(LanguageModel& target, Drafter* drafter, TokenOps& ops, Communicator& tp_comm,
               const DecodeOptions& options);
  ~BatchDecoder();

  // Decodes `prompts` in `mode` (kModeBaseline or kModeSpeculative). Returns this rank's records;
  // timings hold this rank's row only (n_ranks = 1); the caller gathers them.
  BatchResult run(const std::string& mode, std::int64_t batch, const std::vector<Prompt>& prompts);

 private:
  struct Sequence;

  // Sequences for `prompts` with their target caches; checks every prompt against the model.
  void start_batch(const std::vector<Prompt>& prompts);
  // Target prefill and the first generated token of each sequence.
  void first_tokens();
  // The sequences still decoding, as indices (active_); false when none is left.
  bool collect_active();
  // The next token of each active sequence from logits row r (greedy or sampled at its next
  // position), agreed through tp rank 0, into decided_.
  void decide_next(const RowsView& logits);
  void baseline_step(std::int64_t batch, std::int32_t step, BatchResult& result);
  void speculative_step(std::int64_t batch, std::int32_t step, BatchResult& result);
  // Moves the sequences' records into `result`.
  void finish_batch(BatchResult& result);
  // Appends emitted tokens to sequence i, stopping at EOS and max_new_tokens.
  void append_tokens(Sequence& s, const std::int32_t* emitted, int count);
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

  // Per-step scratch (grown, never shrunk: no allocation per step once warm).
  std::vector<int> active_, rows_, max_nodes_, accepted_;
  std::vector<SeqChunk> chunks_;
  std::vector<std::int32_t> decided_, verify_tokens_, emitted_;
  std::vector<double> u_;
  std::vector<DraftTree> trees_;
  std::vector<ChainToVerify> chains_;
  std::vector<VerifyResult> verdicts_;
};

}  // namespace specrun
