// The Llama-family decoder (Llama, Mistral-style, Qwen2) on the CPU backend, one tensor-parallel
// rank's share of it: embedding, per layer RMSNorm -> attention (RoPE, GQA, KV cache) -> residual
// -> RMSNorm -> SwiGLU MLP -> residual, final norm, lm_head. See weights.h for the sharding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/language_model.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace specrun {

class Checkpoint;
class Communicator;

class Transformer final : public LanguageModel {
 public:
  // Loads this rank's shard of `checkpoint` (which must outlive the Transformer: weights view
  // its mapped files). tp_comm is the tensor-parallel group (size tp, this rank = tp_rank); it
  // must outlive the Transformer too. threads: OpenMP threads used by this model's ops.
  // Throws, naming the config.json field, when tp does not fit the model's shapes.
  Transformer(const Checkpoint& checkpoint, Communicator& tp_comm, int tp_rank, int tp,
              int threads);

  const ModelConfig& config() const override { return config_; }
  const ShardPlan& plan() const { return weights_.plan; }
  int vocab_size() const { return config_.vocab_size; }

  // A cache for one sequence of at most `capacity` tokens (this rank's kv heads).
  std::unique_ptr<KvCache> new_cache(int capacity) const override;

  // Prefill, decode and verify in one call: runs every sequence's new tokens at its positions,
  // appends their keys and values to its cache and advances it. Returns float32 logits over the
  // full vocabulary in `logits` (resized): [total new tokens, vocab] in batch order when
  // all_logits, else [batch size, vocab] for each sequence's last new token.
  // All ranks of the tp group must call it with the same inputs. Throws before touching any
  // cache when a token id is outside the vocabulary or a sequence would exceed its cache or
  // the model's context.
  void forward(std::span<const SeqChunk> batch, bool all_logits,
               std::vector<float>& logits) override;

 private:
  // One layer's blocks over the n tokens of the batch. last_only: keys and values for all of
  // them, everything else for each sequence's last token only, whose rows then lead the
  // residual stream (the last layer of a pass that wants only those logits).
  void attention_block(int layer, std::span<const SeqChunk> batch, int n, bool last_only);
  void mlp_block(int layer, int n);

  ModelConfig config_;
  Communicator& comm_;
  int tp_;
  int threads_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;

  // Scratch reused across calls (grown, never shrunk): no allocation per step once warm.
  std::vector<float> x_, xn_, q_, k_, v_, attn_, proj_, act_, local_logits_, rope_;
  std::vector<std::int32_t> tokens_, positions_;
  std::vector<int> offsets_;    // first token of each batch entry
  std::vector<int> last_rows_;  // last token of each batch entry
};

}  // namespace specrun
