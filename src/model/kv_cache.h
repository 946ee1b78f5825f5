// One sequence's key/value cache in one model, as the engine holds it: a handle. The keys and
// values live in the model's backend (host or device memory) and only the model that made the
// handle reads or writes them; the handle carries the bookkeeping every backend shares: how many
// slots are filled, the capacity, the model's context, the id used in error messages, and the
// shape of a token tree appended for verification.
//
// Slots and positions: slots [0, tree_base()) hold a chain, slot = position. A forward call may
// append tree nodes (SeqChunk::parents): each has a parent slot and the position of its parent
// plus one, so siblings share a position; the first of them starts the tree region at
// tree_base(), and every node's parent is tree_base() - 1 (the last chain token, the tree's
// root) or a node of the region. Attention of a node sees the chain and its own ancestors only.
// Speculative decoding then keeps the accepted path (LanguageModel::keep: the path's keys and
// values move to consecutive slots and become chain) or rolls back with truncate().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

  // Forgets every slot >= len (speculative rollback). 0 <= len <= length().
  void truncate(int len);
  // Throws a clear error when appending n_new tokens would exceed the capacity or the model's
  // context. `batch_index` names the sequence when it has no id.
  void check_append(int n_new, int batch_index = -1) const;
  // Throws (naming the sequence) unless n_new tokens with these parents may be appended:
  // parents == nullptr or parents[i] == kChainParent: a chain token (only while no tree node
  // precedes it); parents[i] >= 0: a tree node whose parent slot is that value, at least
  // tree_base() - 1 (the region's start, counting this call's nodes) and below its own slot.
  void check_parents(const std::int32_t* parents, int n_new, int batch_index = -1) const;
  // Marks n_new more slots as filled (the model, after writing their keys and values), with
  // their parents as check_parents takes them.
  void advance(int n_new, const std::int32_t* parents = nullptr);

  // The token tree, if any. tree_base() == length() when there is none.
  int tree_base() const { return tree_base_; }
  // Position of a filled slot (slot < length()): the slot itself in the chain.
  int position_of(int slot) const {
    return slot < tree_base_ ? slot : tree_position_[static_cast<std::size_t>(slot - tree_base_)];
  }
  // Parent slot of a tree slot (tree_base() <= slot < length()).
  int parent_of(int slot) const {
    return tree_parent_[static_cast<std::size_t>(slot - tree_base_)];
  }
  // The bookkeeping of LanguageModel::keep: slots [0, first) stay, slot first + rows[j] becomes
  // slot first + j, the length first + rows.size(), and they are all chain. rows must be a path
  // (ascending; each kept slot's parent the previously kept one, the first's first - 1).
  void keep(int first, std::span<const int> rows);
  // Throws unless keep(first, rows) is valid.
  void check_keep(int first, std::span<const int> rows) const;

  // The model that owns the storage, and the slot in it.
  const KvStore* store() const { return store_; }
  int slot() const { return slot_; }

 private:
  KvStore* store_;
  int slot_;
  int capacity_, max_positions_;
  int length_ = 0;
  std::int64_t sequence_id_ = -1;
  int tree_base_ = 0;
  std::vector<int> tree_parent_, tree_position_;  // of slots tree_base_.. (grown, kept)
};

// SeqChunk::parents value of a chain token.
inline constexpr std::int32_t kChainParent = -1;

}  // namespace specrun
