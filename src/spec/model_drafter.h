// draft.kind = "model": a small language model of the target's vocabulary drafts a chain of up
// to k tokens autoregressively (greedy: its argmax; sampling: a sample of its transformed
// distribution, kept for lossless verification). Its KV caches follow the committed sequence:
// each step it first feeds what it has not seen (usually the last emitted token, two after a
// step that accepted every draft), and after verification it rolls back to the accepted prefix.
//
// Placement: replicated (a whole copy on every rank, no communication: every rank computes the
// same proposals) or sharded like the target (its ranks agree through tp rank 0).
#pragma once

#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "model/language_model.h"
#include "spec/drafter.h"
#include "spec/sampling.h"
#include "spec/token_ops.h"

namespace specrun {

class ModelDrafter final : public Drafter {
 public:
  // draft: the draft model (its vocabulary must be the target's: target_vocab; shared, so that
  // tests can run several drafters on one loaded model); ops: the
  // decisions of its backend; agree: the tp communicator when the draft is sharded, nullptr when
  // replicated. max_draft: the longest chain asked for (sizes the kept distributions). All of
  // them must outlive the drafter.
  ModelDrafter(std::shared_ptr<LanguageModel> draft, int target_vocab, TokenOps& ops,
               Communicator* agree, const SamplingParams& sampling, int max_draft);

  void begin_batch(std::span<const DraftSequence> seqs) override;
  void propose(std::span<const int> active, std::span<const int> max_nodes,
               std::span<DraftTree> out) override;
  void accepted(std::span<const int> active, std::span<const int> accepted) override;
  void end_batch() override;

 private:
  struct Seq {
    DraftSequence seq;
    std::unique_ptr<KvCache> cache;
    int base = 0;  // tokens committed when the last proposal was made
  };

  std::shared_ptr<LanguageModel> draft_;
  TokenOps& ops_;
  Communicator* agree_;
  SamplingParams sampling_;
  int max_draft_;
  std::vector<Seq> seqs_;
  // Per-step scratch (grown, never shrunk).
  std::vector<SeqChunk> chunks_;
  std::vector<int> drafting_, rows_, keep_at_;
  std::vector<double> u_;
  std::vector<std::int32_t> picked_;
};

}  // namespace specrun
