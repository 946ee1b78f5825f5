// The interface the decoding engine sees: one model (target or draft) on one rank, whatever its
// backend. LlamaModel<B> (llama_model.h) implements it for every backend B; the engine never
// knows which one runs.
//
// Outputs stay where they were computed: forward() leaves the logits (and any captured hidden
// states) in the backend's memory and returns views of them. Token decisions run on that
// backend too (spec/token_ops.h); a host copy is made only on request (read, or the forward
// overload that fills a std::vector, for tools and tests).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/expert_routing.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

namespace specrun {

// One sequence's new tokens in a forward call, appended at slots cache->length().. . parents:
// nullptr for a chain (positions continue the cache's), or one entry per token: kChainParent,
// or the cache slot of its parent (a token tree, kv_cache.h: a node sits at its parent's
// position + 1 and attends to the chain and its own ancestors only).
struct SeqChunk {
  KvCache* cache;
  const std::int32_t* tokens;
  int n_tokens;  // >= 1
  const std::int32_t* parents = nullptr;
};

// float32 rows [rows, width] in a backend's memory (a host pointer on the CPU, a device pointer
// on CUDA), valid until the producing model's next forward call.
struct RowsView {
  BackendKind backend = BackendKind::kCpu;
  const float* data = nullptr;
  int rows = 0;
  int width = 0;
  const float* row(int r) const { return data + static_cast<std::size_t>(r) * width; }
};

struct ForwardRequest {
  // Logits of every new token (all_logits, in batch order), or of each sequence's last one.
  bool all_logits = false;
  // Hidden states to capture, by layer id: i < num_layers is the residual stream at the input
  // of layer i (Hugging Face hidden_states[i], the convention EAGLE-3 uses; 0 = the embeddings),
  // num_layers is the final norm's output. Captured for every new token, full width on every
  // tensor-parallel rank.
  std::span<const int> capture;
};

struct ForwardResult {
  RowsView logits;  // [rows, vocab_size]
  RowsView hidden;  // [new tokens, capture.size() * hidden_size] (width 0 when none asked)
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual BackendKind backend() const = 0;
  // A cache for one sequence of at most `capacity` tokens. The model must outlive it.
  virtual std::unique_ptr<KvCache> new_cache(int capacity) = 0;

  // Prefill, decode and verify are one call: appends every chunk's tokens to its cache and
  // computes the requested logits and hidden states (see ForwardRequest). All ranks of the
  // model's tp group call it with the same inputs. Throws before touching any cache when a
  // token id is outside the vocabulary, a cache belongs to another model, or a sequence would
  // exceed its cache or the model's context.
  virtual ForwardResult forward(std::span<const SeqChunk> batch, const ForwardRequest& request) = 0;

  // Keeps the slots [0, first) of `cache` and, of the slots after them, first + rows[j] as
  // first + j (their keys and values move): the accepted path of a verified token tree, or of
  // a drafted one. rows: ascending, a path (KvCache::keep). The tree, if any, is gone after.
  virtual void keep(KvCache& cache, int first, std::span<const int> rows) = 0;

  // Host copy of rows [first, first + count) of a view this model returned.
  virtual void read(const RowsView& view, int first, int count, float* host) = 0;
  // Host copy of one layer's keys (which = 0) or values (1) of a cache, positions
  // [0, cache.length()), [length, kv heads of this rank * head_dim].
  virtual void read_kv(const KvCache& cache, int layer, int which, float* host) = 0;
  // kv heads this rank holds (the width of read_kv rows is that * head_dim).
  virtual int kv_heads() const = 0;

  // Waits until every forward call made so far has finished on the device (a no-op on the CPU;
  // on CUDA with the communicator's deadline). For timing; decisions synchronise by themselves.
  virtual void synchronize() = 0;

  // Mixture-of-experts models: the routing of the last forward call (every token's experts in
  // every MoE layer), on the host, valid until the next forward call; nullptr for a dense model.
  virtual const ExpertRouting* routing() const { return nullptr; }

  // Bytes of this rank's share of the weights as loaded from the checkpoint (its shard, in the
  // stored dtype; a tied lm_head counted once): what the job log reports per rank.
  virtual std::size_t weight_bytes() const { return 0; }
  // Bytes of one token's KV cache rows on this rank, all layers (GQA: its kv heads' keys and
  // values; MLA: one latent row of kv_lora_rank + qk_rope_head_dim floats per layer): what the
  // job log reports per rank. 0 when the model does not say.
  virtual std::size_t kv_bytes_per_token() const { return 0; }

  // forward() with the logits copied to `logits` (resized): [rows, vocab_size].
  void forward(std::span<const SeqChunk> batch, bool all_logits, std::vector<float>& logits);
};

// Checks a forward call's batch before any cache changes, for a model with `config` that owns
// the caches' storage (`store`): every entry has a cache made by that model, at least one new
// token and room for them (KvCache::check_append), and every token id lies in [0, vocab_size).
// Throws naming the batch entry, or the sequence, index and id (exit code 2: prompts tokenized
// for another model). Returns the number of new tokens in the batch.
int check_batch(std::span<const SeqChunk> batch, const ModelConfig& config, const KvStore* store);

}  // namespace specrun
