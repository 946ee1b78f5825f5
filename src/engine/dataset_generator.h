// Target-only decoding with continuous batching, keeping what draft training needs: a fixed
// number of slots decode together; when a sequence finishes (EOS or max_new_tokens), its slot
// takes the next prompt of the stream in the same step (its prefill rides along with the other
// slots' decode tokens in one forward), so the batch stays full. Every forward captures the
// requested layers' hidden states of the tokens it reads (and, with top-k, every row's logits);
// the stored positions' rows are copied to the host as they are computed.
//
// Outputs do not depend on which sequences share a step: the CPU kernels are batch-invariant
// bit for bit (tests: test_transformer) and sampling uses counter-based uniforms keyed by
// (seed, prompt, position), the same as baseline mode's. So a resumed job regenerates exactly
// the sequences an uninterrupted one would (io/dataset_file.h relies on it).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dist/communicator.h"
#include "io/dataset_file.h"
#include "io/prompt_file.h"
#include "model/language_model.h"
#include "spec/sampling.h"
#include "spec/token_ops.h"

namespace specrun {

struct GenerateOptions {
  int slots = 8;  // sequences decoded together (data.batch_size)
  int max_new_tokens = 64;
  SamplingParams sampling;  // temperature <= 0: greedy
  bool stop_at_eos = true;
  // Stop tokens besides the target's EOS ids (decode.stop_tokens, engine/stop_tokens.h).
  std::vector<int> extra_stop_ids;
  std::uint64_t seed = 0;
  std::vector<int> capture;       // layer ids (LanguageModel ForwardRequest::capture)
  std::string positions = "all";  // which tokens' rows are kept: all | prompt | generated
  int topk = 0;                   // keep the target's top-k next tokens and probabilities
  bool continuous = true;         // false: static batches (refill once every slot is done)
};

// Rows a sequence stores: the states after reading tokens [first, first + count) of the final
// sequence of `total` tokens (the last token is never read). prompt: rows predicting prompt
// tokens, [0, prompt_len - 1); generated: rows predicting generated tokens,
// [prompt_len - 1, total - 1); all: [0, total - 1).
struct StoredRange {
  int first = 0, count = 0;
};
StoredRange stored_range(const std::string& positions, int prompt_len, int total);

class DatasetGenerator {
 public:
  // All references must outlive the generator. tp_comm: the target's tensor-parallel group
  // (decisions are agreed through its rank 0).
  DatasetGenerator(LanguageModel& target, TokenOps& ops, Communicator& tp_comm,
                   const GenerateOptions& options);
  ~DatasetGenerator();

  struct Stats {
    std::int64_t sequences = 0, generated = 0;         // finished sequences, their generated tokens
    std::int64_t steps = 0;                            // forward passes
    std::int64_t slot_steps = 0, busy_slot_steps = 0;  // slots x steps, and those decoding
    double seconds = 0;
  };

  // Pulls prompts with `next` (false: the stream is exhausted) and hands every finished sequence
  // to `done`, in the order they finish (hidden states and top-k filled only when
  // keep_outputs: the rank that writes). `stop` is asked before each step and must answer the
  // same on every tp rank; when it says stop, the unfinished sequences are dropped. Returns the
  // run's statistics.
  Stats run(const std::function<bool(Prompt&)>& next,
            const std::function<void(DatasetSequence&&)>& done, const std::function<bool()>& stop,
            bool keep_outputs);

 private:
  struct Slot;
  void start(Slot& s, Prompt&& prompt);
  void finish(Slot& s, const std::function<void(DatasetSequence&&)>& done, bool keep_outputs);

  LanguageModel& target_;
  TokenOps& ops_;
  Communicator& tp_comm_;
  GenerateOptions options_;
  std::vector<Slot> slots_;
  // Per-step scratch.
  std::vector<SeqChunk> chunks_;
  std::vector<int> busy_, rows_, last_rows_;
  std::vector<std::int32_t> decided_, topk_ids_;
  std::vector<float> topk_lp_, host_;
  std::vector<double> u_;
};

}  // namespace specrun
