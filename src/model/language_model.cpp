#include "model/language_model.h"

#include "common/error.h"

namespace specrun {

int check_batch(std::span<const SeqChunk> batch, const ModelConfig& config, int kv_heads,
                bool device_caches, const std::string& model) {
  SPEC_CHECK(!batch.empty(), "forward called with an empty batch");
  int n = 0;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const SeqChunk& s = batch[b];
    SPEC_CHECK(s.cache != nullptr && s.n_tokens >= 1,
               "batch entry " << b << " needs a cache and at least one new token");
    SPEC_CHECK(s.cache->external_storage() == device_caches &&
                   s.cache->n_layers() == config.num_layers && s.cache->n_kv_heads() == kv_heads &&
                   s.cache->head_dim() == config.head_dim,
               "batch entry " << b << ": KV cache was not made by " << model << " (use new_cache)");
    s.cache->check_append(s.n_tokens, static_cast<int>(b));
    for (int i = 0; i < s.n_tokens; ++i) {
      const std::int32_t id = s.tokens[i];
      SPEC_INPUT_CHECK(id >= 0 && id < config.vocab_size,
                       "token id " << id << " at index " << i << " of sequence "
                                   << (s.cache->sequence_id() >= 0 ? s.cache->sequence_id()
                                                                   : static_cast<std::int64_t>(b))
                                   << " is outside the model's vocabulary [0, " << config.vocab_size
                                   << "): the prompts were tokenized for another model");
    }
    n += s.n_tokens;
  }
  return n;
}

}  // namespace specrun
