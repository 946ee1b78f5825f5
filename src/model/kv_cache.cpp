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
  if (tree_base_ >= len) {
    tree_base_ = len;
  }
  tree_parent_.resize(static_cast<std::size_t>(length_ - tree_base_));
  tree_position_.resize(tree_parent_.size());
}

void KvCache::check_parents(const std::int32_t* parents, int n_new, int batch_index) const {
  const std::int64_t who = sequence_id_ >= 0 ? sequence_id_ : batch_index;
  // base: where the tree region starts (the chain's end while there is none).
  int base = tree_base_;
  for (int i = 0; i < n_new; ++i) {
    const int slot = length_ + i;
    const int parent = parents == nullptr ? kChainParent : parents[i];
    if (parent == kChainParent) {
      SPEC_CHECK(base == slot, "sequence " << who << ": chain token at slot " << slot
                                           << " after tree nodes (keep or truncate the tree "
                                              "first)");
      base = slot + 1;
      continue;
    }
    SPEC_CHECK(parent >= base - 1 && parent < slot,
               "sequence " << who << ": tree node at slot " << slot << " has parent slot " << parent
                           << ", outside " << base - 1 << ".." << slot - 1);
  }
}

void KvCache::keep(int first, std::span<const int> rows) {
  check_keep(first, rows);
  length_ = first + static_cast<int>(rows.size());
  tree_base_ = length_;
  tree_parent_.clear();
  tree_position_.clear();
}

void KvCache::check_keep(int first, std::span<const int> rows) const {
  const int n = static_cast<int>(rows.size());
  SPEC_CHECK(first >= 0 && first <= length_ && first + n <= length_,
             "keep: " << n << " slots from " << first << " of a cache of length " << length_);
  for (int j = 0; j < n; ++j) {
    const int slot = first + rows[j];
    const int want_parent = j == 0 ? first - 1 : first + rows[j - 1];
    const int parent = slot < tree_base_ ? slot - 1 : parent_of(slot);
    SPEC_CHECK(slot < length_ && (j == 0 || rows[j] > rows[j - 1]) && parent == want_parent,
               "keep: slot " << slot << " does not continue the path (its parent is " << parent
                             << ", the path's previous slot " << want_parent << ")");
  }
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

void KvCache::advance(int n_new, const std::int32_t* parents) {
  check_append(n_new);
  check_parents(parents, n_new);
  for (int i = 0; i < n_new; ++i) {
    const int slot = length_ + i;
    const int parent = parents == nullptr ? kChainParent : parents[i];
    if (parent == kChainParent && tree_base_ == slot) {
      ++tree_base_;
      continue;
    }
    tree_parent_.push_back(parent);
    tree_position_.push_back(position_of(parent) + 1);
  }
  length_ += n_new;
}

}  // namespace specrun
