// The interface the decoding engine sees: one model (target or draft) on one rank, whatever the
// backend. The CPU Transformer implements it; a CUDA implementation keeps its caches and weights
// on the device and returns logits in host memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/model_config.h"

namespace specrun {

// One sequence's new tokens in a forward call. Its start position is cache->length().
struct SeqChunk {
  KvCache* cache;
  const std::int32_t* tokens;
  int n_tokens;  // >= 1
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual const ModelConfig& config() const = 0;
  // A cache for one sequence of at most `capacity` tokens, owned by the caller.
  virtual std::unique_ptr<KvCache> new_cache(int capacity) const = 0;
  // Prefill, decode and verify are one call: appends every chunk's tokens to its cache and
  // writes float32 logits (full vocabulary, host memory) for every new token (all_logits) or for
  // each chunk's last token, chunk by chunk. All ranks of the model's tp group call it with the
  // same inputs.
  virtual void forward(std::span<const SeqChunk> batch, bool all_logits,
                       std::vector<float>& logits) = 0;
};

// Checks a forward call's batch before any cache changes, for a model with `config` whose caches
// hold `kv_heads` kv heads in host memory (device_caches false) or device memory (true): every
// entry has a cache of that shape and kind, at least one new token and room for them
// (KvCache::check_append), and every token id lies in [0, vocab_size). Throws naming the batch
// entry, or the sequence, index and id (exit code 2: prompts tokenized for another model).
// `model` names the backend in the error ("this model", "this CUDA model"). Returns the number
// of new tokens in the batch.
int check_batch(std::span<const SeqChunk> batch, const ModelConfig& config, int kv_heads,
                bool device_caches, const std::string& model);

}  // namespace specrun
