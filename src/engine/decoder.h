// Decoding of one batch of prompts in one mode: `baseline` (target only) or `speculative`
// (draft proposes, target verifies). All ranks of a tensor-parallel group call the same
// functions with the same prompts; tp rank 0 makes every token decision and broadcasts it, so the
// ranks never diverge even if their logits differed in the last bit.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "io/prompt_file.h"
#include "io/records.h"
#include "model/language_model.h"
#include "spec/sampling.h"

namespace specrun {

struct DecodeOptions {
  int max_new_tokens = 64;
  int draft_len = 4;        // k
  SamplingParams sampling;  // temperature <= 0: greedy
  bool stop_at_eos = true;
  std::uint64_t seed = 0;
  // The draft shares the target's tp communicator (sharded); false: replicated on every rank.
  bool draft_sharded = false;
  // Test-only: sleep this long in `inject_phase` ("draft", "verify", "sample") every step.
  double inject_delay_ms = 0;
  std::string inject_phase = "none";
};

class BatchDecoder {
 public:
  // target: sharded over `tp_comm`. draft: nullptr for baseline-only jobs; sharded over
  // `tp_comm` or replicated (then it runs on its own and needs no communication).
  BatchDecoder(LanguageModel& target, LanguageModel* draft, Communicator& tp_comm,
               const DecodeOptions& options);

  // Decodes `prompts` in `mode` (kModeBaseline or kModeSpeculative). Returns this rank's records;
  // timings hold this rank's row only (n_ranks = 1); the caller gathers them.
  BatchResult run(const std::string& mode, std::int64_t batch, const std::vector<Prompt>& prompts);

 private:
  struct Sequence;
  BatchResult run_baseline(std::int64_t batch, const std::vector<Prompt>& prompts);
  BatchResult run_speculative(std::int64_t batch, const std::vector<Prompt>& prompts);

  // Sequences for `prompts` with their caches; checks every prompt against the model first.
  std::vector<Sequence> start_batch(const std::vector<Prompt>& prompts, bool with_draft);
  // Prefill (target, and draft when with_draft) and the first generated token of each sequence.
  void first_tokens(std::vector<Sequence>& seqs, bool with_draft,
                    std::chrono::steady_clock::time_point t_batch);
  // Moves the finished sequences' records into `result`.
  void finish_batch(std::vector<Sequence>& seqs, BatchResult& result);
  // Prefill of the prompts in `model`; returns last-position logits [n, vocab] when wanted.
  void prefill(LanguageModel& model, std::vector<Sequence>& seqs, bool draft, bool want_logits);
  // Picks the token for one position from full logits (greedy argmax or sampling with purpose).
  int choose(const float* logits, const Sequence& seq, std::int64_t position, int purpose);
  // Broadcasts `values` from tp rank 0 so every rank holds the same decisions.
  void agree(std::vector<std::int32_t>& values);
  void inject(const char* phase);
  double comm_seconds() const;

  LanguageModel& target_;
  LanguageModel* draft_;
  Communicator& tp_comm_;
  DecodeOptions options_;
  int vocab_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::vector<float> draft_logits_;
  std::vector<float> probs_;
};

}  // namespace specrun
