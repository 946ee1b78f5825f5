// The Llama-family decoder (Llama, Mistral, Qwen2, Qwen3, and with mixture-of-experts MLPs
// Qwen3-MoE and Mixtral), one tensor-parallel rank's share of it, written once against the
// backend interface (backend/backend.h) and compiled for every backend: embedding, per layer
// RMSNorm -> attention (RoPE, GQA, KV cache; Qwen3: per-head RMSNorm of q and k before RoPE) ->
// residual -> RMSNorm -> SwiGLU MLP or mixture of experts -> residual, final norm, lm_head. The
// sharding is the weight schema's (weight_schema.h).
//
// The graph in brief (n new tokens of all sequences, H hidden, one rank's heads):
//   x = embed(tokens)                         [n, H]  (vocab-parallel: summed over the group)
//   per layer: xn = rmsnorm(x, input norm); q, k, v = xn Wq, xn Wk, xn Wv (+ biases)
//              [q/k norms]; RoPE(q, k); attn = attention(q, cache + k, v)
//              x += allreduce(attn Wo) (+ o bias)
//              xn = rmsnorm(x, post-attention norm); x += allreduce(swiglu(xn Wgate, xn Wup) Wdown)
//   logits = gather_vocab(rmsnorm(x, final norm) Wlm_head)
// The residual stream x is GraphBase's ResidualStream: o_proj and down_proj go into it with
// add_projection (with tp > 1 the all-reduce after the projection), the norms of it come with
// the projections after them (q/k/v, gate/up), and a backend that fuses them adds each
// projection in the next norm's pass or in its own epilogue (backend/default_ops.h). With
// nothing pending the CUDA backend normalises inside the projections' launch: a layer is then
// four projections, RoPE with the KV append, and attention.
// Each layer's kind (ModelConfig::layer_kind) picks its blocks: GQA attention
// (gqa_attention_block), then a dense SwiGLU MLP (dense_swiglu_block) or a mixture of experts
// (MoeBlock, model/moe_block.h); the constructor refuses a config.json whose table has any
// other kind.
// When only each sequence's last logits are wanted, the last layer computes keys and values for
// every token (the cache needs them) and everything else for the wanted rows only: rows are
// independent and attention's result for a query does not depend on the window it is in, so the
// logits are bitwise those of the full computation. (Not when the last layer is MoE: its routing
// of every token is part of the pass's ExpertRouting, so it runs on all rows.)
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "backend/default_ops.h"
#include "common/error.h"
#include "dist/communicator.h"
#include "model/checkpoint.h"
#include "model/graph_base.h"
#include "model/language_model.h"
#include "model/model_weights.h"
#include "model/moe_block.h"

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
  // memory). ep: expert parallelism of MoE layers (0: the default, tp; or 1 or tp:
  // weight_schema.h). Throws naming the config.json field when tp or ep does not fit the
  // model's shapes.
  LlamaModel(const Checkpoint& checkpoint, B backend, Communicator& tp_comm, int ep = 0)
      : Base(std::move(backend)),
        config_(checkpoint.config()),
        comm_(tp_comm),
        tp_(tp_comm.size()),
        inv_freq_(config_.rope_inv_freq()),
        residual_(b_) {
    for (int layer = 0; layer < config_.num_layers; ++layer) {
      const LayerKind kind = config_.layer_kind(layer);
      SPEC_INPUT_CHECK(kind == kLlamaLayer || kind == kMoeLayer,
                       checkpoint.dir()
                           << "/config.json: layer " << layer << " is " << layer_kind_name(kind)
                           << "; the Llama-family graph has " << layer_kind_name(kLlamaLayer)
                           << " and " << layer_kind_name(kMoeLayer) << " layers only");
      if (kind == kMoeLayer) routing_.layers.push_back(layer);
    }
    SPEC_CHECK(static_cast<int>(inv_freq_.size()) == config_.head_dim / 2,
               "rope_inv_freq returned " << inv_freq_.size() << " values for head_dim "
                                         << config_.head_dim);
    const HostWeights host = load_host_weights(checkpoint, tp_, tp_comm.rank(), llama_schema(), ep);
    // A tied lm_head is the embedding's rows: counted once.
    weight_bytes_ =
        host.bytes() -
        (config_.tie_word_embeddings ? host.model[static_cast<int>(Role::kEmbed)].bytes() : 0);
    b_.check_fits(weight_bytes_, host.plan.tp_rank, host.plan.tp, checkpoint.dir());
    weights_ = prepare_weights(b_, host, config_);
    inv_freq_dev_ = b_.upload_floats(inv_freq_);
    moe_ = make_moe_block(b_, config_, host, routing_);
  }

  const ModelConfig& config() const override { return config_; }
  BackendKind backend() const override { return B::kKind; }
  const ShardPlan& plan() const { return weights_.plan; }
  int vocab_size() const { return config_.vocab_size; }
  int kv_heads() const override { return weights_.plan.kv_heads; }
  void synchronize() override { b_.synchronize(); }

  const ExpertRouting* routing() const override {
    return routing_.layers.empty() ? nullptr : &routing_;
  }
  std::size_t weight_bytes() const override { return weight_bytes_; }
  std::size_t kv_bytes_per_token() const override {
    const AttentionHeads heads = attention_heads();
    return static_cast<std::size_t>(config_.num_layers) *
           (heads.key_floats() + heads.value_floats()) * sizeof(float);
  }

  std::unique_ptr<KvCache> new_cache(int capacity) override {
    const AttentionHeads heads = attention_heads();
    return Base::make_cache(capacity,
                            KvShape{config_.num_layers, heads.key_floats(), heads.value_floats()},
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
  // The layer kinds of this family: GQA attention with a dense or a mixture-of-experts MLP.
  static constexpr LayerKind kLlamaLayer{AttentionKind::kGqa, MlpKind::kDenseSwiGlu};
  static constexpr LayerKind kMoeLayer{AttentionKind::kGqa, MlpKind::kMoe};
  // This rank's attention heads (one head_dim for queries, keys and values).
  AttentionHeads attention_heads() const {
    return AttentionHeads{weights_.plan.q_heads, weights_.plan.kv_heads, config_.head_dim,
                          config_.head_dim};
  }
  // The blocks of a layer, on the residual stream residual_ (n rows, or each sequence's last).
  void gqa_attention_block(int layer, int n, bool last_only);
  void dense_swiglu_block(int layer, int n);
  // moe_index: the layer's place among the MoE layers (its rows of routing_).
  void moe_block(int layer, int moe_index, int n);
  Communicator* group() { return tp_ > 1 ? &comm_ : nullptr; }

  ModelConfig config_;
  Communicator& comm_;
  int tp_;
  ModelWeights<B> weights_;
  std::vector<float> inv_freq_;
  typename B::Floats inv_freq_dev_;
  std::size_t weight_bytes_ = 0;
  std::unique_ptr<MoeBlock<B>> moe_;  // MoE layers only
  ExpertRouting routing_;             // the last forward's (layers empty: a dense model)

  // Per-call state and scratch (grown, never shrunk: no allocation per step once warm).
  ResidualStream<B> residual_;
  HiddenCapture<B> capture_;
  typename B::Scratch xn_, q_, attn_, act_, rope_;
};

template <class B>
ForwardResult LlamaModel<B>::forward(std::span<const SeqChunk> batch,
                                     const ForwardRequest& request) {
  const ShardPlan& plan = weights_.plan;
  // Validate everything before any cache changes.
  const int n = check_batch(batch, config_, static_cast<const KvStore*>(this));
  const int L = config_.num_layers, H = config_.hidden_size;
  capture_.begin(request.capture, L, n, H);

  // Every op of the pass, collectives included, is the backend's: it may run as one graph (CUDA).
  Base::stage_batch(batch, n);

  // One cos/sin table per forward: every layer rotates q and k at the same positions.
  b_.rope_table(inv_freq_dev_, config_.head_dim,
                rope_.grow(static_cast<std::size_t>(n) * config_.head_dim));

  F x = residual_.begin(n, H, config_.rms_norm_eps, group());
  b_.embed(weights_.get(Role::kEmbed), plan.vocab_begin, x);
  if (tp_ > 1) b_.all_reduce_sum(comm_, x, static_cast<std::size_t>(n) * H);

  // The normalised rows of every block (xn).
  xn_.grow(static_cast<std::size_t>(n) * H);
  // Rows whose logits are wanted: all, or each sequence's last token (the final norm's output
  // captured for every token, or a last layer whose MoE routing is recorded for every token,
  // needs all rows).
  const bool last_moe = !routing_.layers.empty() && routing_.layers.back() == L - 1;
  const bool all_rows = request.all_logits || capture_.wants(L) || last_moe;
  const int rows = all_rows ? n : static_cast<int>(batch.size());
  if (!routing_.layers.empty()) {
    routing_.n_tokens = n;
    routing_.experts.resize(routing_.layers.size() * static_cast<std::size_t>(n) * routing_.top_k);
  }
  for (int layer = 0, moe_index = 0; layer < L; ++layer) {
    if (capture_.wants(layer))  // the residual stream as it enters the layer
      capture_.copy(b_, layer, residual_.settle(n), n);
    const bool trim = rows < n && layer + 1 == L;
    // The blocks of the layer's kind.
    gqa_attention_block(layer, n, trim);
    if (moe_index < static_cast<int>(routing_.layers.size()) && routing_.layers[moe_index] == layer)
      moe_block(layer, moe_index++, n);  // (never trimmed: see last_moe)
    else
      dense_swiglu_block(layer, trim ? rows : n);
  }
  for (const SeqChunk& s : batch) s.cache->advance(s.n_tokens, s.parents);

  // The residual stream now holds `rows` rows (and the last delta, if pending); normed into xn.
  F xn = xn_.grow(0);
  residual_.norm(rows, weights_.get(Role::kFinalNorm), xn);
  capture_.copy(b_, L, xn, n);
  if (request.all_logits == false && all_rows) b_.keep_last_rows(xn, H);
  const int out_rows = request.all_logits ? n : static_cast<int>(batch.size());
  ForwardResult result;
  result.logits =
      Base::logits(xn, out_rows, weights_.get(Role::kLmHead), config_.vocab_size, group());
  b_.end_forward();
  result.hidden = capture_.view(n);
  return result;
}

template <class B>
void LlamaModel<B>::gqa_attention_block(int layer, int n, bool last_only) {
  const int H = config_.hidden_size, hd = config_.head_dim;
  const AttentionHeads heads = attention_heads();
  const float eps = config_.rms_norm_eps;
  F xn = xn_.grow(0);  // rmsnorm(x) with input_norm (the fused op may never write it)
  const Weight& input_norm = weights_.at(layer, Role::kInputNorm);
  const int n_seqs = static_cast<int>(seqs_.size());
  F q = q_.grow(static_cast<std::size_t>(n) * heads.q_width());
  const typename B::KvRows kv = b_.kv_rows(layer, heads);
  F attn = attn_.grow(static_cast<std::size_t>(n) * heads.out_width());
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
    residual_.norm_linear_multi(n, input_norm, xn, qkv);
  } else {  // xn is needed again below
    residual_.norm(n, input_norm, xn);
    fused::linear_multi(b_, xn, n, std::span<const typename B::LinearOut>(qkv).subspan(1, 2));
  }
  const Weight* q_norm = weights_.maybe(layer, Role::kQNorm);  // Qwen3: per head
  if (const Weight* k_norm = weights_.maybe(layer, Role::kKNorm))
    b_.rmsnorm(kv.k, n * heads.kv_heads, hd, *k_norm, eps, kv.k);
  if (!last_only) {
    // RoPE of q and k, the append of each sequence's keys and values to its cache, attention:
    // one fused op (the CUDA backend rotates on the way; backend/default_ops.h).
    if (q_norm != nullptr) b_.rmsnorm(q, n * heads.heads, hd, *q_norm, eps, q);
    fused::rope_attend(b_, layer, kv, q, n, rope, attn, heads);
  } else {
    // The keys of all n rows are rotated before the table keeps the last rows only.
    b_.rope_apply(kv.k, n, heads.kv_heads, hd, heads.key_floats(), rope);
    b_.keep_last_rows(xn, H);
    residual_.keep_last_rows();
    b_.keep_last_rows(rope, hd);
    fused::linear_multi(b_, xn, m, std::span<const typename B::LinearOut>(qkv, 1));
    if (q_norm != nullptr) b_.rmsnorm(q, m * heads.heads, hd, *q_norm, eps, q);
    b_.rope_apply(q, m, heads.heads, hd, heads.q_width(), rope);
    b_.attend(layer, q, m, true, attn, heads);
  }

  residual_.add_projection(attn, m, weights_.at(layer, Role::kO),
                           weights_.maybe(layer, Role::kOBias));
}

template <class B>
void LlamaModel<B>::moe_block(int layer, int moe_index, int n) {
  std::int32_t* chosen =
      routing_.experts.data() + static_cast<std::size_t>(moe_index) * n * routing_.top_k;
  moe_->run(residual_, n, config_.hidden_size, weights_.at(layer, Role::kPostAttentionNorm),
            weights_.at(layer, Role::kRouter), {}, weights_.stack(layer, Role::kExpertGate),
            weights_.stack(layer, Role::kExpertDown), {}, xn_.grow(0), chosen);
}

template <class B>
void LlamaModel<B>::dense_swiglu_block(int layer, int n) {
  residual_.dense_swiglu(n, weights_.at(layer, Role::kPostAttentionNorm), xn_.grow(0),
                         weights_.at(layer, Role::kGate), weights_.at(layer, Role::kDown),
                         act_.grow(static_cast<std::size_t>(n) * weights_.plan.intermediate));
}

}  // namespace specrun
