#include "model/kv_cache.h"

#include <string>
#include <utility>

#include "common/error.h"

namespace specrun {

KvCache::KvCache(int n_layers, int capacity, int n_kv_heads, int head_dim, int max_positions)
    : n_layers_(n_layers),
      capacity_(capacity),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      max_positions_(max_positions) {
  SPEC_CHECK(n_layers > 0 && capacity > 0 && n_kv_heads > 0 && head_dim > 0,
             "KV cache needs positive sizes, got layers " << n_layers << ", capacity " << capacity
                                                          << ", kv heads " << n_kv_heads
                                                          << ", head_dim " << head_dim);
  data_.resize(static_cast<std::size_t>(n_layers) * 2 * static_cast<std::size_t>(capacity) *
               static_cast<std::size_t>(row_floats()));
}

KvCache::KvCache(int n_layers, int capacity, int n_kv_heads, int head_dim, int max_positions,
                 std::shared_ptr<float> storage)
    : n_layers_(n_layers),
      capacity_(capacity),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      max_positions_(max_positions),
      external_(std::move(storage)) {
  SPEC_CHECK(n_layers > 0 && capacity > 0 && n_kv_heads > 0 && head_dim > 0,
             "KV cache needs positive sizes, got layers " << n_layers << ", capacity " << capacity
                                                          << ", kv heads " << n_kv_heads
                                                          << ", head_dim " << head_dim);
  SPEC_CHECK(external_ != nullptr, "KV cache given no storage");
}

void KvCache::truncate(int len) {
  SPEC_CHECK(len >= 0 && len <= length_,
             "cannot truncate a KV cache of length " << length_ << " to " << len);
  length_ = len;
}

void KvCache::check_append(int n_new, int batch_index) const {
  const std::string who = sequence_id_ >= 0 ? "sequence " + std::to_string(sequence_id_)
                          : batch_index >= 0
                              ? "sequence at batch index " + std::to_string(batch_index)
                              : std::string("a sequence");
  const std::int64_t new_length = static_cast<std::int64_t>(length_) + n_new;
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
