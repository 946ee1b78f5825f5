// Per-sequence key/value cache of one model on one rank.
//
// For every layer, K and V are float32 [capacity, n_kv_heads, head_dim] (n_kv_heads is this
// rank's share of the kv heads). length() positions are filled; the transformer appends the new
// tokens of each forward call and speculative decoding rolls back with truncate().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace specrun {

class KvCache {
 public:
  // capacity: most tokens this sequence may ever hold; max_positions: the model's context
  // (max_position_embeddings). Allocates 2 * n_layers * capacity * n_kv_heads * head_dim floats.
  KvCache(int n_layers, int capacity, int n_kv_heads, int head_dim, int max_positions);
  // The same cache over storage the caller allocated (the CUDA backend: device memory, freed by
  // the shared_ptr's deleter). `storage` holds storage_floats() floats in the layout above;
  // keys() and values() then point into it and must not be dereferenced on the host.
  KvCache(int n_layers, int capacity, int n_kv_heads, int head_dim, int max_positions,
          std::shared_ptr<float> storage);

  int length() const { return length_; }
  int capacity() const { return capacity_; }
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int max_positions() const { return max_positions_; }

  // The id used in error messages ("sequence 3 ..."); -1 (default) means unnamed.
  void set_sequence_id(std::int64_t id) { sequence_id_ = id; }
  std::int64_t sequence_id() const { return sequence_id_; }

  // Forgets every position >= len (speculative rollback). 0 <= len <= length().
  void truncate(int len);
  // Throws a clear error when appending n_new tokens would exceed the capacity or the model's
  // context. `batch_index` names the sequence when it has no id.
  void check_append(int n_new, int batch_index = -1) const;
  // Marks n_new more positions as filled (after their K and V rows were written).
  void advance(int n_new);

  // Layer `layer`'s K or V: [capacity, n_kv_heads, head_dim], position p at p * row_floats().
  float* keys(int layer) { return base() + layer_offset(layer, 0); }
  float* values(int layer) { return base() + layer_offset(layer, 1); }
  const float* keys(int layer) const { return base() + layer_offset(layer, 0); }
  const float* values(int layer) const { return base() + layer_offset(layer, 1); }
  std::int64_t row_floats() const { return static_cast<std::int64_t>(n_kv_heads_) * head_dim_; }
  // Floats of the whole cache: 2 * n_layers * capacity * row_floats().
  std::size_t storage_floats() const { return layer_offset(n_layers_, 0); }
  // True when the storage was given by the caller (e.g. device memory).
  bool external_storage() const { return external_ != nullptr; }

 private:
  std::size_t layer_offset(int layer, int which) const {
    return (static_cast<std::size_t>(layer) * 2 + which) * static_cast<std::size_t>(capacity_) *
           static_cast<std::size_t>(row_floats());
  }

  float* base() { return external_ ? external_.get() : data_.data(); }
  const float* base() const { return external_ ? external_.get() : data_.data(); }

  int n_layers_, capacity_, n_kv_heads_, head_dim_, max_positions_;
  int length_ = 0;
  std::int64_t sequence_id_ = -1;
  std::vector<float> data_;
  std::shared_ptr<float> external_;  // non-null: storage owned elsewhere, data_ unused
};

}  // namespace specrun
