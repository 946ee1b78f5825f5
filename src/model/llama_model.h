// The Llama-family decoder (Llama, Mistral, Qwen2, Qwen3), one tensor-parallel rank's share of
// it, written once against the backend interface (backend/backend.h) and compiled for every
// backend: embedding, per layer RMSNorm -> attention (RoPE, GQA, KV cache; Qwen3: per-head
// RMSNorm of q and k before RoPE) -> residual -> RMSNorm -> SwiGLU MLP -> residual, final norm,
// lm_head. The sharding is the weight schema's (weight_schema.h).
//
// The graph in brief (n new tokens of all sequences, H hidden, one rank's heads):
//   x = embed(tokens)                         [n, H]  (vocab-parallel: summed over the group)
//   per layer: xn = rmsnorm(x, input norm); q, k, v = xn Wq, xn Wk, xn Wv (+ biases)
//              [q/k norms]; RoPE(q, k); attn = attention(q, cache + k, v)
//              x += allreduce(attn Wo) (+ o bias)
//              xn = rmsnorm(x, post-attention norm); x += allreduce(swiglu(xn Wgate, xn Wup) Wdown)
//   logits = gather_vocab(rmsnorm(x, final norm) Wlm_head)
// o_proj and down_proj go to the residual stream through linear_residual (one rank; with tp > 1
// the all-reduce sits after the projection), which either adds to x at once (the CUDA backend,
// in the GEMV's epilogue) or leaves its output as x's pending delta (the CPU backend); the next
// op on x, a norm with the projections after it (add_rmsnorm_linear_multi, add_rmsnorm_swiglu;
// the final add_rmsnorm), adds a pending delta in the norm's pass. With nothing pending the CUDA
// backend normalises inside the projections' launch: a layer is then four projections, RoPE with
// the KV append, and attention.
// When only each sequence's last logits are wanted, the last layer computes keys and values for
// every token (the cache needs them) and everything else for the wanted rows only: rows are
// independent and attention's result for a query does not depend on the window it is in, so the
// logits are bitwise those of the full computation.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"
#include "dist/communicator.h"
#include "model/checkpoint.h"
#include "model/graph_base.h"
#include "model/language_model.h"
#include "model/model_weights.h"

namespace specrun {

template <class B>
class LlamaModel final : public LanguageModel, private GraphBase<B> {
  using Base = GraphBase<B>;
  using Base::b_;
  using Base::seqs_;
  using typename Base::CF;
  using typename Base::F;
  using typename Base::Weight;

 public:
  // Loads this rank's shard of `checkpoint` onto `backend` (the checkpoint is not needed
  // afterwards). tp_comm: the tensor-parallel group (size tp, this rank's index in it), which
  // must outlive the model and take the backend's buffers (MPI on host memory, NCCL on device
  // memory). Throws naming the config.json field when tp does not fit the model's shapes.
  LlamaModel(const Checkpoint& checkpoint, B backend, Communicator& tp_comm)
      : Base(std::move(backend)),
        config_(checkpoint.config()),
        comm_(tp_comm),
        tp_(tp_comm.size()),
        inv_freq_(config_.rope_inv_freq()) {
    SPEC_CHECK(static_cast<int>(inv_freq_.size()) == config_.head_dim / 2,
               "rope_inv_freq returned " << inv_freq_.size() << " values for head_dim "
                                         << config_.head_dim);
    const HostWeights host = load_host_weights(checkpoint, tp_, tp_comm.rank());
    // A tied lm_head is the embedding's rows: counted once.
    const std::size_t bytes =
        host.bytes() -
        (config_.tie_word_embeddings ? host.model[static_cast<int>(Role::kEmbed)].bytes() : 0);
    b_.check_fits(bytes, host.plan.tp_rank, host.plan.tp, checkpoint.dir());
    weights_ = prepare_weights(b_, host, config_);
    inv_freq_dev_ = b_.upload_floats(inv_freq_);
  }

  const ModelConfig& config() const override { return config_; }
  BackendKind backend() const override { return B::kKind; }
  const ShardPlan& plan() const { return weights_.plan; }
  int vocab_size() const { return config_.vocab_size; }
  int kv_heads() const override { return weights_.plan.kv_heads; }
  B& backend_ops() { return b_; }
  void synchronize() override { b_.synchronize(); }

  std::unique_ptr<KvCache> new_cache(int capacity) override {
    return Base::make_cache(capacity,
                            KvShape{config_.num_layers, weights_.plan.kv_heads * config_.head_dim},
                            config_.max_position_embeddings);
  }

  ForwardResult forward(std::span<const SeqChunk> batch, const ForwardRequest& request) override;

  void keep(KvCache& cache, int first, std::span<const int> rows) override {
    Base::keep_path(cache, config_.num_layers, first, rows);
  }
  void read(const RowsView& view, int first, int count, float* host) override {
    Base::read_rows(view, first, count, host);
  }
  void read_kv(const KvCache& cache, int layer, int which, float* host) override {
    Base::read_cache(cache, layer, which, host);
  }

 private:
  // Each block takes the residual stream's pending delta (a null pointer: none) and returns the
  // one it leaves.
  CF attention_block(int layer, int n, bool last_only, CF pending);
  CF mlp_block(int layer, int n, CF pending);
  // GraphBase::add_projection and norm_into on x_ with this model's group and sizes.
  CF add_projection(CF in, int m, const Weight& w, const Weight* bias) {
    return Base::add_projection(tp_ > 1 ? &comm_ : nullptr, in, m, config_.hidden_size, w, bias,
                                proj_.grow(0), x_.grow(0));
  }
  void norm_into(CF pending, int n, const Weight& norm, F xn) {
    Base::norm_into(x_.grow(0), pending, n, config_.hidden_size, norm, config_.rms_norm_eps, xn);
  }
  void capture(int slot, int n);

  ModelConfig config_;
  Communicator& comm_;
  int tp_;
  ModelWeights<B> weights_;
  std::vector<float> inv_freq_;
  typename B::Floats inv_freq_dev_;

  // Per-call state and scratch (grown, never shrunk: no allocation per step once warm).
  std::vector<int> capture_slot_;  // per layer id 0..num_layers: column block, or -1
  int n_capture_ = 0;
  typename B::Scratch x_, xn_, q_, attn_, proj_, act_, rope_, logits_, local_logits_, hidden_;
};

template <class B>
ForwardResult LlamaModel<B>::forward(std::span<const SeqChunk> batch,
                                     const ForwardRequest& request) {
  const ShardPlan& plan = weights_.plan;
  // Validate everything before any cache changes.
  const int n = check_batch(batch, config_, static_cast<const KvStore*>(this));
  const int L = config_.num_layers, H = config_.hidden_size;
  capture_slot_.assign(L + 1, -1);
  n_capture_ = static_cast<int>(request.capture.size());
  for (int c = 0; c < n_capture_; ++c) {
    const int id = request.capture[c];
    SPEC_CHECK(id >= 0 && id <= L && capture_slot_[id] < 0,
               "capture: layer id " << id << " is outside 0.." << L << " or given twice");
    capture_slot_[id] = c;
  }

  // Every op of the pass, collectives included, is the backend's: it may run as one graph (CUDA).
  Base::stage_batch(batch, n);

  // One cos/sin table per forward: every layer rotates q and k at the same positions.
  b_.rope_table(inv_freq_dev_, config_.head_dim,
                rope_.grow(static_cast<std::size_t>(n) * config_.head_dim));

  F x = x_.grow(static_cast<std::size_t>(n) * H);
  b_.embed(weights_.get(Role::kEmbed), plan.vocab_begin, x);
  if (tp_ > 1) b_.all_reduce_sum(comm_, x, static_cast<std::size_t>(n) * H);
  if (n_capture_ > 0) hidden_.grow(static_cast<std::size_t>(n) * n_capture_ * H);

  // Scratch of every block: the normalised rows (xn), the row-parallel projections' output
  // (proj, which may be the pending delta between blocks: grown here, before any points into it).
  xn_.grow(static_cast<std::size_t>(n) * H);
  proj_.grow(static_cast<std::size_t>(n) * H);
  CF pending;
  // Rows whose logits are wanted: all, or each sequence's last token (the final norm's output
  // captured for every token needs all rows).
  const bool all_rows = request.all_logits || capture_slot_[L] >= 0;
  const int rows = all_rows ? n : static_cast<int>(batch.size());
  for (int layer = 0; layer < L; ++layer) {
    if (capture_slot_[layer] >= 0) {  // the residual stream as it enters the layer
      if (pending.get() != nullptr) b_.add_inplace(x, pending, static_cast<std::size_t>(n) * H);
      pending = CF();
      capture(capture_slot_[layer], n);
    }
    const bool trim = rows < n && layer + 1 == L;
    pending = attention_block(layer, n, trim, pending);
    pending = mlp_block(layer, trim ? rows : n, pending);
  }
  for (const SeqChunk& s : batch) s.cache->advance(s.n_tokens, s.parents);

  // The residual stream now holds `rows` rows (and the last delta, if pending); normed into xn.
  F xn = xn_.grow(0);
  norm_into(pending, rows, weights_.get(Role::kFinalNorm), xn);
  if (capture_slot_[L] >= 0) {
    b_.copy_rows(hidden_.grow(0) + static_cast<std::ptrdiff_t>(capture_slot_[L]) * H,
                 static_cast<std::size_t>(n_capture_) * H, xn, H, n, H);
  }
  if (request.all_logits == false && all_rows) b_.keep_last_rows(xn, H);
  const int out_rows = request.all_logits ? n : static_cast<int>(batch.size());
  const int V = config_.vocab_size, v_local = plan.vocab;
  F logits = logits_.grow(static_cast<std::size_t>(out_rows) * V);
  if (tp_ == 1) {
    b_.linear(xn, out_rows, weights_.get(Role::kLmHead), nullptr, logits);
  } else {
    // Vocab-parallel lm_head: local [rows, V/tp], gathered to [tp][rows][V/tp], reordered.
    const std::size_t local = static_cast<std::size_t>(out_rows) * v_local;
    F mine = local_logits_.grow(local * (tp_ + 1));
    F gathered = mine + static_cast<std::ptrdiff_t>(local);
    b_.linear(xn, out_rows, weights_.get(Role::kLmHead), nullptr, mine);
    b_.all_gather(comm_, mine, gathered, local);
    b_.unshard_vocab(gathered, out_rows, tp_, v_local, logits);
  }
  b_.end_forward();
  ForwardResult result;
  result.logits = RowsView{B::kKind, logits.get(), out_rows, V};
  if (n_capture_ > 0) result.hidden = RowsView{B::kKind, hidden_.grow(0).get(), n, n_capture_ * H};
  return result;
}

template <class B>
void LlamaModel<B>::capture(int slot, int n) {
  const int H = config_.hidden_size;
  b_.copy_rows(hidden_.grow(0) + static_cast<std::ptrdiff_t>(slot) * H,
               static_cast<std::size_t>(n_capture_) * H, x_.grow(0), H, n, H);
}

template <class B>
typename LlamaModel<B>::CF LlamaModel<B>::attention_block(int layer, int n, bool last_only,
                                                          CF pending) {
  const ShardPlan& plan = weights_.plan;
  const int H = config_.hidden_size, hd = config_.head_dim;
  const std::int64_t q_width = static_cast<std::int64_t>(plan.q_heads) * hd;
  const std::int64_t kv_width = static_cast<std::int64_t>(plan.kv_heads) * hd;
  const float eps = config_.rms_norm_eps;
  F x = x_.grow(0);
  F xn = xn_.grow(0);  // rmsnorm(x) with input_norm (the fused op may never write it)
  const Weight& input_norm = weights_.at(layer, Role::kInputNorm);
  const int n_seqs = static_cast<int>(seqs_.size());
  F q = q_.grow(static_cast<std::size_t>(n) * q_width);
  const typename B::KvRows kv = b_.kv_rows(layer, static_cast<int>(kv_width));
  F attn = attn_.grow(static_cast<std::size_t>(n) * q_width);
  F rope = rope_.grow(0);

  // q, k and v in one pass over the three weight matrices. last_only: keys and values for all
  // n tokens, then q and the rest for each sequence's last token only, moved to row b (of xn,
  // the residual stream x and the RoPE table; none of them is read at the other rows again in
  // this forward pass).
  const typename B::LinearOut qkv[3] = {
      {&weights_.at(layer, Role::kQ), weights_.maybe(layer, Role::kQBias), q},
      {&weights_.at(layer, Role::kK), weights_.maybe(layer, Role::kKBias), kv.k},
      {&weights_.at(layer, Role::kV), weights_.maybe(layer, Role::kVBias), kv.v}};
  const int m = last_only ? n_seqs : n;  // rows from q on
  if (!last_only) {
    b_.add_rmsnorm_linear_multi(x, pending, n, H, input_norm, eps, xn, qkv);
  } else {  // xn is needed again below
    norm_into(pending, n, input_norm, xn);
    b_.linear_multi(xn, n, std::span<const typename B::LinearOut>(qkv).subspan(1, 2));
  }
  const Weight* q_norm = weights_.maybe(layer, Role::kQNorm);  // Qwen3: per head
  if (const Weight* k_norm = weights_.maybe(layer, Role::kKNorm))
    b_.rmsnorm(kv.k, n * plan.kv_heads, hd, *k_norm, eps, kv.k);
  if (!last_only) {
    // RoPE of q and k, the append of each sequence's keys and values to its cache, attention:
    // one fused op (the CUDA backend rotates on the way; backend/default_ops.h).
    if (q_norm != nullptr) b_.rmsnorm(q, n * plan.q_heads, hd, *q_norm, eps, q);
    b_.rope_attend(layer, kv, q, n, rope, attn, plan.q_heads, plan.kv_heads, hd);
  } else {
    // The keys of all n rows are rotated before the table keeps the last rows only.
    b_.rope_apply(kv.k, n, plan.kv_heads, hd, kv_width, rope);
    b_.keep_last_rows(xn, H);
    b_.keep_last_rows(x, H);
    b_.keep_last_rows(rope, hd);
    b_.linear_multi(xn, m, std::span<const typename B::LinearOut>(qkv, 1));
    if (q_norm != nullptr) b_.rmsnorm(q, m * plan.q_heads, hd, *q_norm, eps, q);
    b_.rope_apply(q, m, plan.q_heads, hd, q_width, rope);
    b_.attend(layer, q, m, true, attn, plan.q_heads, plan.kv_heads, hd);
  }

  return add_projection(attn, m, weights_.at(layer, Role::kO), weights_.maybe(layer, Role::kOBias));
}

template <class B>
typename LlamaModel<B>::CF LlamaModel<B>::mlp_block(int layer, int n, CF pending) {
  const int H = config_.hidden_size, I = weights_.plan.intermediate;
  F act = act_.grow(static_cast<std::size_t>(n) * I);

  // The pending delta added and the post-attention norm, then silu(gate) * up in one pass over
  // the paired gate/up weights where the backend fuses them.
  b_.add_rmsnorm_swiglu(x_.grow(0), pending, n, H, weights_.at(layer, Role::kPostAttentionNorm),
                        config_.rms_norm_eps, xn_.grow(0), weights_.at(layer, Role::kGate), act);
  return add_projection(act, n, weights_.at(layer, Role::kDown), nullptr);
}

}  // namespace specrun
