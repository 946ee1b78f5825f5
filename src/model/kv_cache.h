// Per-sequence key/value cache of one model on one rank.
//
// For every layer, K and V are float32 [capacity, n_kv_heads, head_dim] (n_kv_heads is this
// rank's share of the kv heads). length() positions are filled; the transformer appends the new
// tokens of each forward call and speculative decoding rolls back with truncate().
#pragma once

#include <cstdint>
#include <vector>

namespace specrun {

class KvCache {
 public:
  // capacity: most tokens this sequence may ever hold; max_positions: the model's context
  // (max_position_embeddings). Allocates 2 * n_layers * capacity * n_kv_heads * head_dim floats.
  KvCache(int n_layers, int capacity, int n_kv_heads, int head_dim, int max_positions);

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
  float* keys(int layer) { return data_.data() + layer_offset(layer, 0); }
  float* values(int layer) { return data_.data() + layer_offset(layer, 1); }
  const float* keys(int layer) const { return data_.data() + layer_offset(layer, 0); }
  const float* values(int layer) const { return data_.data() + layer_offset(layer, 1); }
  std::int64_t row_floats() const { return static_cast<std::int64_t>(n_kv_heads_) * head_dim_; }

 private:
  std::size_t layer_offset(int layer, int which) const {
    return (static_cast<std::size_t>(layer) * 2 + which) * static_cast<std::size_t>(capacity_) *
           static_cast<std::size_t>(row_floats());
  }

  int n_layers_, capacity_, n_kv_heads_, head_dim_, max_positions_;
  int length_ = 0;
  std::int64_t sequence_id_ = -1;
  std::vector<float> data_;
};

}  // namespace specrun
