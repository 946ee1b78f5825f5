#include "model/kv_cache.h"

#include <string>

#include "common/error.h"

namespace specrun {

KvCache::KvCache(KvStore* store, int slot, int capacity, int max_positions)
    : store_(store), slot_(slot), capacity_(capacity), max_positions_(max_positions) {
  SPEC_CHECK(store != nullptr && capacity > 0,
             "a KV cache needs an owning model and a positive capacity, got " << capacity);
}

KvCache::~KvCache() {
  store_->release(slot_);
}

void KvCache::truncate(int len) {
  SPEC_CHECK(len >= 0 && len <= length_,
             "cannot truncate a KV cache of length " << length_ << " to " << len);
  length_ = len;
}

void KvCache::check_append(int n_new, int batch_index) const {
  const std::int64_t new_length = static_cast<std::int64_t>(length_) + n_new;
  if ((max_positions_ <= 0 || new_length <= max_positions_) && new_length <= capacity_) return;
  // Only now the message (a step must not allocate when all is well).
  const std::string who = sequence_id_ >= 0 ? "sequence " + std::to_string(sequence_id_)
                          : batch_index >= 0
                              ? "sequence at batch index " + std::to_string(batch_index)
                              : std::string("a sequence");
  SPEC_INPUT_CHECK(max_positions_ <= 0 || new_length <= max_positions_,
                   who << " would reach position " << new_length << " but the model's context is "
                       << max_positions_ << ": lower decode.max_new_tokens or use shorter prompts");
  SPEC_CHECK(new_length <= capacity_,
             who << " would hold " << new_length << " tokens but its KV cache was made for "
                 << capacity_
                 << ": make the cache as large as prompt length + max new tokens + draft length");
}

void KvCache::advance(int n_new) {
  check_append(n_new);
  length_ += n_new;
}

}  // namespace specrun
