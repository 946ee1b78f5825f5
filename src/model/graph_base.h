// What every model graph on a backend shares (LlamaModel, Eagle3Model): the backend, the KV
// storage behind the KvCache handles it gives out (KvStore), the staging of a forward call for
// the backend (tokens, positions, token-tree paths, per-sequence spans), and the blocks every
// family has: the residual stream (ResidualStream: projections into it and the norms of it, the
// fused ops' pending delta kept inside) and the vocab-parallel logits (GraphBase::logits).
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/default_ops.h"
#include "common/error.h"
#include "dist/communicator.h"
#include "model/kv_cache.h"
#include "model/language_model.h"

namespace specrun {

// The residual stream x [rows, dim] of a forward pass, and the delta not yet added to it.
//
// A row-parallel projection (o_proj, down_proj) goes into the stream with add_projection, a
// block's own output (a mixture-of-experts layer's weighted sum of its experts) with delta +
// add_delta; where
// the backend can, it adds in the projection's epilogue (CUDA's GEMV path), else its output
// stays pending (fused::linear_residual; with tp > 1 the projection summed across the group) and
// the next norm of the stream adds it in the norm's pass (fused::add_rmsnorm_*). Blocks call
// add_projection and the norms; none of them sees the pending delta. Reading x directly (a
// captured hidden state, the stream as a head's output) needs settle() first.
//
// Owns the stream's storage and the projections' scratch (grown, never shrunk). Not thread-safe;
// the backend must outlive it.
template <class B>
class ResidualStream {
  using F = typename B::F;
  using CF = typename B::CF;
  using Weight = typename B::Weight;
  using LinearOut = typename B::LinearOut;

 public:
  explicit ResidualStream(B& b) : b_(b) {}
  ResidualStream(const ResidualStream&) = delete;
  ResidualStream& operator=(const ResidualStream&) = delete;

  // Starts a pass of `rows` rows of width dim (x and the projection scratch grown to them,
  // nothing pending) and returns x for the caller to fill (the embedding). eps: the norms'
  // epsilon; group: the tensor-parallel group that sums the projections' partial outputs, or
  // nullptr (one rank, or a replicated graph).
  F begin(int rows, int dim, float eps, Communicator* group) {
    dim_ = dim;
    eps_ = eps;
    group_ = group;
    pending_ = CF();
    pending_rows_ = 0;
    const std::size_t floats = static_cast<std::size_t>(rows) * dim;
    proj_.grow(floats);  // grown before any pending delta points into it
    return x_.grow(floats);
  }

  // x += in W^T (+ bias) for m rows: in [m, w's inputs] is this rank's share of the columns
  // (with a group: partial sums, summed across it, the bias once after the sum). Adds what was
  // pending first (a pending delta and this projection share the scratch).
  void add_projection(CF in, int m, const Weight& w, const Weight* bias) {
    settle(pending_rows_);
    const F proj = proj_.grow(0);
    if (group_ == nullptr) {
      pending_ = fused::linear_residual(b_, in, m, w, bias, proj, x());
    } else {
      b_.linear(in, m, w, nullptr, proj);
      b_.all_reduce_sum(*group_, proj, static_cast<std::size_t>(m) * dim_);
      if (bias != nullptr) b_.add_bias(proj, *bias, m, dim_);
      pending_ = proj;
    }
    pending_rows_ = m;
  }

  // A block's own delta: delta() gives the scratch to write its rows into (as many as the
  // stream has; what was pending is added to x first), then add_delta(m) puts m rows of it into
  // the stream like a projection (with a group: each rank's partial delta summed across it),
  // pending until the next norm or settle.
  F delta() {
    settle(pending_rows_);
    return proj_.grow(0);
  }
  void add_delta(int m) {
    const F proj = proj_.grow(0);
    if (group_ != nullptr) b_.all_reduce_sum(*group_, proj, static_cast<std::size_t>(m) * dim_);
    pending_ = proj;
    pending_rows_ = m;
  }

  // x += pending, then xn = rmsnorm(x) with `norm`, for the first n rows.
  void norm(int n, const Weight& norm, F xn) {
    check_rows(n);
    if (pending_.get() != nullptr)
      fused::add_rmsnorm(b_, x(), pending_, n, dim_, norm, eps_, xn);
    else
      b_.rmsnorm(x(), n, dim_, norm, eps_, xn);
    pending_ = CF();
  }
  // The same, then fused::linear_multi(xn, outs) (a layer's q, k and v). xn holds unspecified
  // values afterwards (a fused kernel normalises on the way).
  void norm_linear_multi(int n, const Weight& norm, F xn, std::span<const LinearOut> outs) {
    check_rows(n);
    fused::add_rmsnorm_linear_multi(b_, x(), pending_, n, dim_, norm, eps_, xn, outs);
    pending_ = CF();
  }
  // The same with swiglu(xn) of a gate/up pair into y (an MLP's input).
  void norm_swiglu(int n, const Weight& norm, F xn, const Weight& gate_up, F y) {
    check_rows(n);
    fused::add_rmsnorm_swiglu(b_, x(), pending_, n, dim_, norm, eps_, xn, gate_up, y);
    pending_ = CF();
  }
  // A dense SwiGLU MLP block on the first n rows: the pending delta added and the norm, then
  // silu(gate) * up into act (one pass over the paired gate/up weights where the backend fuses
  // them) and down into the stream.
  void dense_swiglu(int n, const Weight& norm, F xn, const Weight& gate_up, const Weight& down,
                    F act) {
    norm_swiglu(n, norm, xn, gate_up, act);
    add_projection(act, n, down, nullptr);
  }

  // Adds what is pending (n rows): x then holds the stream.
  F settle(int n) {
    if (pending_.get() != nullptr) {
      check_rows(n);
      b_.add_inplace(x(), pending_, static_cast<std::size_t>(n) * dim_);
      pending_ = CF();
    }
    return x();
  }
  // Moves each sequence's last row to row b (backend keep_last_rows). Nothing may be pending.
  void keep_last_rows() {
    SPEC_CHECK(pending_.get() == nullptr, "keep_last_rows with a delta pending on the stream");
    b_.keep_last_rows(x(), static_cast<std::size_t>(dim_));
  }
  // The stream's storage: complete only when nothing is pending (settle).
  F x() { return x_.grow(0); }

 private:
  void check_rows(int n) const {
    SPEC_CHECK(pending_.get() == nullptr || n == pending_rows_,
               "a norm of " << n << " rows of the residual stream with " << pending_rows_
                            << " rows pending");
  }

  B& b_;
  typename B::Scratch x_, proj_;
  CF pending_;  // null: nothing to add
  int pending_rows_ = 0;
  int dim_ = 0;
  float eps_ = 0.0f;
  Communicator* group_ = nullptr;
};

// The hidden states a forward call captures (ForwardRequest::capture): per layer id 0..layers
// its column block of [n, ids x width] rows, or none. Owns the storage (grown, never shrunk).
template <class B>
class HiddenCapture {
  using F = typename B::F;
  using CF = typename B::CF;

 public:
  // Starts a pass of n rows of `width` floats: checks the ids (each in 0..layers, at most once)
  // and sizes the storage.
  void begin(std::span<const int> ids, int layers, int n, int width) {
    slot_.assign(layers + 1, -1);
    count_ = static_cast<int>(ids.size());
    width_ = width;
    for (int c = 0; c < count_; ++c) {
      const int id = ids[c];
      SPEC_CHECK(id >= 0 && id <= layers && slot_[id] < 0,
                 "capture: layer id " << id << " is outside 0.." << layers << " or given twice");
      slot_[id] = c;
    }
    if (count_ > 0) rows_.grow(static_cast<std::size_t>(n) * count_ * width);
  }
  bool wants(int id) const { return slot_[id] >= 0; }
  // Copies rows [n, width] into id's column block (when it is wanted).
  void copy(B& b, int id, CF rows, int n) {
    if (!wants(id)) return;
    const std::size_t stride = static_cast<std::size_t>(count_) * width_;
    b.copy_rows(rows_.grow(0) + static_cast<std::ptrdiff_t>(slot_[id]) * width_, stride, rows,
                width_, n, width_);
  }
  // The captured rows of the pass (width 0 when none was asked).
  RowsView view(int n) {
    return count_ == 0 ? RowsView{} : RowsView{B::kKind, rows_.grow(0).get(), n, count_ * width_};
  }

 private:
  std::vector<int> slot_;  // per layer id 0..layers: column block, or -1
  int count_ = 0, width_ = 0;
  typename B::Scratch rows_;
};

template <class B>
class GraphBase : protected KvStore {
 protected:
  using F = typename B::F;
  using CF = typename B::CF;
  using Weight = typename B::Weight;

  explicit GraphBase(B backend) : b_(std::move(backend)) {}
  ~GraphBase() override { b_.finish(); }

  // A draft head's input (EAGLE-3, MTP): a [n, 2H] = [rmsnorm(embed(tokens), embed_norm) ;
  // rmsnorm(hidden, hidden_norm)], embedding first (the staged tokens, a whole embedding); e and
  // tmp [n, H] are scratch, tmp holds rmsnorm(hidden) afterwards.
  void embedding_beside_hidden(const Weight& embed, const Weight& embed_norm, CF hidden,
                               const Weight& hidden_norm, int n, int H, float eps, F e, F tmp,
                               F a) {
    b_.embed(embed, 0, e);
    b_.rmsnorm(e, n, H, embed_norm, eps, tmp);
    b_.copy_rows(a, 2 * H, tmp, H, n, H);
    b_.rmsnorm(hidden, n, H, hidden_norm, eps, tmp);
    b_.copy_rows(a + H, 2 * H, tmp, H, n, H);
  }

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

  // The logits block: xn [rows, *] (the final norm's output) through lm_head, this rank's
  // vocab / tp rows of the vocabulary (vocab-parallel; group: the tensor-parallel group, or
  // nullptr for a whole lm_head): the local logits, gathered across the group as [tp][rows][vocab
  // / tp] and reordered to [rows, vocab]. The view is in this graph's scratch, valid until its
  // next forward.
  RowsView logits(CF xn, int rows, const Weight& lm_head, int vocab, Communicator* group) {
    F out = logits_.grow(static_cast<std::size_t>(rows) * vocab);
    if (group == nullptr || group->size() == 1) {
      b_.linear(xn, rows, lm_head, nullptr, out);
    } else {
      const int tp = group->size(), v_local = vocab / tp;
      const std::size_t local = static_cast<std::size_t>(rows) * v_local;
      F mine = local_logits_.grow(local * (tp + 1));
      F gathered = mine + static_cast<std::ptrdiff_t>(local);
      b_.linear(xn, rows, lm_head, nullptr, mine);
      b_.all_gather(*group, mine, gathered, local);
      b_.unshard_vocab(gathered, rows, tp, v_local, out);
    }
    return RowsView{B::kKind, out.get(), rows, vocab};
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

  typename B::Scratch logits_, local_logits_;
  std::vector<typename B::KvBlock> blocks_;  // by KvCache slot
  std::vector<int> free_slots_;
  std::vector<std::int32_t> tokens_, positions_, tree_parents_, tree_positions_;
};

}  // namespace specrun
