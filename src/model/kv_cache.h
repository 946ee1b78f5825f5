// One sequence's key/value cache in one model, as the engine holds it: a handle. The keys and
// values live in the model's backend (host or device memory) and only the model that made the
// handle reads or writes them; the handle carries the bookkeeping every backend shares: how many
// positions are filled, the capacity, the model's context, the id used in error messages.
// Speculative decoding rolls back with truncate().
#pragma once

#include <cstdint>

namespace specrun {

// Owner of the storage behind KvCache handles (a model). release() frees a handle's storage.
class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual void release(int slot) = 0;
};

class KvCache {
 public:
  // Made by a model's new_cache: `slot` of `store`, which must outlive the handle.
  KvCache(KvStore* store, int slot, int capacity, int max_positions);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int length() const { return length_; }
  int capacity() const { return capacity_; }
  int max_positions() const { return max_positions_; }

  // The id used in error messages ("sequence 3 ..."); -1 (default) means unnamed.
  void set_sequence_id(std::int64_t id) { sequence_id_ = id; }
  std::int64_t sequence_id() const { return sequence_id_; }

  // Forgets every position >= len (speculative rollback). 0 <= len <= length().
  void truncate(int len);
  // Throws a clear error when appending n_new tokens would exceed the capacity or the model's
  // context. `batch_index` names the sequence when it has no id.
  void check_append(int n_new, int batch_index = -1) const;
  // Marks n_new more positions as filled (the model, after writing their keys and values).
  void advance(int n_new);

  // The model that owns the storage, and the slot in it.
  const KvStore* store() const { return store_; }
  int slot() const { return slot_; }

 private:
  KvStore* store_;
  int slot_;
  int capacity_, max_positions_;
  int length_ = 0;
  std::int64_t sequence_id_ = -1;
};

}  // namespace specrun
