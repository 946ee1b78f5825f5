#include "model/language_model.h"

#include "common/error.h"

namespace specrun {

void LanguageModel::forward(std::span<const SeqChunk> batch, bool all_logits,
                            std::vector<float>& logits) {
  const ForwardResult out = forward(batch, ForwardRequest{all_logits, {}});
  logits.resize(static_cast<std::size_t>(out.logits.rows) * out.logits.width);
  read(out.logits, 0, out.logits.rows, logits.data());
}

int check_batch(std::span<const SeqChunk> batch, const ModelConfig& config, const KvStore* store) {
  SPEC_CHECK(!batch.empty(), "forward called with an empty batch");
  int n = 0;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const SeqChunk& s = batch[b];
    SPEC_CHECK(s.cache != nullptr && s.n_tokens >= 1,
               "batch entry " << b << " needs a cache and at least one new token");
    SPEC_CHECK(s.cache->store() == store,
               "batch entry " << b << ": KV cache was not made by this model (use new_cache)");
    s.cache->check_append(s.n_tokens, static_cast<int>(b));
    s.cache->check_parents(s.parents, s.n_tokens, static_cast<int>(b));
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
