// What every model graph on a backend shares (LlamaModel, Eagle3Model): the backend, the KV
// storage behind the KvCache handles it gives out (KvStore), and the staging of a forward call
// for the backend (tokens, positions, token-tree paths, per-sequence spans).
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "common/error.h"
#include "dist/communicator.h"
#include "model/kv_cache.h"
#include "model/language_model.h"

namespace specrun {

template <class B>
class GraphBase : protected KvStore {
 protected:
  using F = typename B::F;
  using CF = typename B::CF;
  using Weight = typename B::Weight;

  explicit GraphBase(B backend) : b_(std::move(backend)) {}
  ~GraphBase() override { b_.finish(); }

  // A cache of `capacity` slots for `shape`; positions limited to max_positions.
  std::unique_ptr<KvCache> make_cache(int capacity, const KvShape& shape, int max_positions) {
    int slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      blocks_[slot] = b_.new_kv_block(shape, capacity);
    } else {
      slot = static_cast<int>(blocks_.size());
      blocks_.push_back(b_.new_kv_block(shape, capacity));
    }
    return std::make_unique<KvCache>(static_cast<KvStore*>(this), slot, capacity, max_positions);
  }

  void keep_path(KvCache& cache, int layers, int first, std::span<const int> rows) {
    SPEC_CHECK(cache.store() == this, "keep: the cache was not made by this model");
    cache.check_keep(first, rows);
    b_.kv_keep(blocks_[cache.slot()], layers, first, rows);
    cache.keep(first, rows);
  }

  void read_rows(const RowsView& view, int first, int count, float* host) {
    SPEC_CHECK(view.backend == B::kKind && first >= 0 && first + count <= view.rows,
               "read: rows " << first << ".." << first + count << " of a view of " << view.rows);
    b_.read(CF(view.row(first)), static_cast<std::size_t>(count) * view.width, host);
  }

  void read_cache(const KvCache& cache, int layer, int which, float* host) {
    SPEC_CHECK(cache.store() == this, "read_kv: the cache was not made by this model");
    b_.read_kv(blocks_[cache.slot()], layer, which, cache.length(), host);
  }

  // x += in W^T (+ bias) for m rows of width dim: a row-parallel projection into the residual
  // stream (o_proj, down_proj). group: the tensor-parallel group when it has several ranks (`in`
  // is this rank's share of the columns: partial sums, summed across it, the bias once after
  // the sum), else nullptr. Returns the delta left pending: with one rank linear_residual's
  // (null where the backend adds in the projection's epilogue), with several the summed
  // projection. proj: its scratch.
  CF add_projection(Communicator* group, CF in, int m, int dim, const Weight& w, const Weight* bias,
                    F proj, F x) {
    if (group == nullptr) return b_.linear_residual(in, m, w, bias, proj, x);
    b_.linear(in, m, w, nullptr, proj);
    b_.all_reduce_sum(*group, proj, static_cast<std::size_t>(m) * dim);
    if (bias != nullptr) b_.add_bias(proj, *bias, m, dim);
    return proj;
  }

  // x += pending (a null pointer: nothing to add), then xn = rmsnorm(x) with norm; x [n, dim].
  void norm_into(F x, CF pending, int n, int dim, const Weight& norm, float eps, F xn) {
    if (pending.get() != nullptr)
      b_.add_rmsnorm(x, pending, n, dim, norm, eps, xn);
    else
      b_.rmsnorm(x, n, dim, norm, eps, xn);
  }

  // Tokens, positions and the backend's view of every sequence, then begin_forward. Chain
  // tokens sit at their slot; a tree node at its parent's position + 1 (kv_cache.h).
  // tree_parents_ holds, per sequence, the parents of its whole tree region (nodes of earlier
  // calls, then this call's).
  void stage_batch(std::span<const SeqChunk> batch, int n) {
    tokens_.resize(n);
    positions_.resize(n);
    seqs_.resize(batch.size());
    tree_parents_.clear();
    tree_positions_.clear();
    for (int off = 0, b = 0; const SeqChunk& s : batch) {
      std::copy(s.tokens, s.tokens + s.n_tokens, tokens_.begin() + off);
      const KvCache& cache = *s.cache;
      const int start = cache.length();
      int base = cache.tree_base();                     // chain tokens move it, nodes keep it
      const std::size_t region = tree_parents_.size();  // this sequence's entries start here
      for (int slot = base; slot < start; ++slot) {
        tree_parents_.push_back(cache.parent_of(slot));
        tree_positions_.push_back(cache.position_of(slot));
      }
      for (int i = 0; i < s.n_tokens; ++i) {
        const int slot = start + i;
        const int parent = s.parents == nullptr ? kChainParent : s.parents[i];
        if (parent == kChainParent) {
          positions_[off + i] = slot;
          base = slot + 1;
          continue;
        }
        const int position =
            (parent < base ? parent : tree_positions_[region + (parent - base)]) + 1;
        tree_parents_.push_back(parent);
        tree_positions_.push_back(position);
        positions_[off + i] = position;
      }
      seqs_[b++] = SeqSpan<typename B::KvBlock>{
          &blocks_[cache.slot()], start, s.n_tokens, off, base, nullptr};
      off += s.n_tokens;
    }
    // Pointers into tree_parents_ once it has stopped growing: a sequence's region has
    // start + n_tokens - tree_base entries (none for a chain).
    for (std::size_t b = 0, region = 0; b < seqs_.size(); ++b) {
      SeqSpan<typename B::KvBlock>& span = seqs_[b];
      if (!span.has_tree()) continue;
      span.tree_parents = tree_parents_.data() + region;
      region += static_cast<std::size_t>(span.start + span.n_tokens - span.tree_base);
    }
    b_.begin_forward(seqs_, tokens_.data(), positions_.data(), n);
  }

  B b_;
  std::vector<SeqSpan<typename B::KvBlock>> seqs_;

 private:
  void release(int slot) override {
    blocks_[slot] = typename B::KvBlock();
    free_slots_.push_back(slot);
  }

  std::vector<typename B::KvBlock> blocks_;  // by KvCache slot
  std::vector<int> free_slots_;
  std::vector<std::int32_t> tokens_, positions_, tree_parents_, tree_positions_;
};

}  // namespace specrun
