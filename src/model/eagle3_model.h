// The EAGLE-3 draft head (SafeAILab/EAGLE cnets.py `Model`, one midlayer; SGLang
// llama_eagle3.py), written once against the backend interface like the target's graph:
//
//   hin = fc(cat(f_low, f_mid, f_high))        the target's features (3 x H_t)
//       | the head's previous output h          (width H: fc skipped)
//   x   = cat(input_layernorm(embed(token)), hidden_norm(hin))    [n, 2H], embedding first
//   h   = residual + o_proj(attn(q_proj(x), k_proj(x), v_proj(x)))  residual = hin, or
//                                               hidden_norm(hin) with norm_before_residual
//   h   = h + down(silu(gate(n)) * up(n)),  n = post_attention_layernorm(h)
//   out = h (the next input);  logits = lm_head(norm(h)) over the draft vocabulary
//
// RoPE, GQA and the KV cache (token trees included) as in the Llama graph, at the head's own
// positions and rope settings. The embedding is the target's (its model.embed_tokens.weight,
// whole, on this backend). Under tensor parallelism the head is either replicated (every rank
// holds all of it and the target's features at full width, so it never communicates), or
// sharded like the target: each rank has its query / kv heads, an intermediate slice and a
// slice of the draft vocabulary; o_proj and down_proj are summed across the group and the
// logits gathered, so every rank gets the same full-width outputs. fc and the norms are whole
// on every rank.
#pragma once

#include <vector>

#include "backend/default_ops.h"
#include "dist/communicator.h"
#include "model/checkpoint.h"
#include "model/draft_head.h"
#include "model/graph_base.h"
#include "model/model_weights.h"

namespace specrun {

template <class B>
class Eagle3Model final : public DraftHead, private GraphBase<B> {
  using Base = GraphBase<B>;
  using Base::b_;
  using Base::seqs_;
  using typename Base::CF;
  using typename Base::F;
  using typename Base::Weight;

 public:
  // head: the head's directory, opened with Eagle3Config's reader; target: the target's
  // checkpoint (its embedding is read); config: the parsed head config; tp_comm: the
  // tensor-parallel group to shard over (it must outlive the head), or nullptr for a whole head
  // on this rank. Neither checkpoint is needed afterwards.
  Eagle3Model(const Checkpoint& head, const Checkpoint& target, const Eagle3Config& config,
              B backend, Communicator* tp_comm)
      : Base(std::move(backend)),
        config_(config),
        comm_(tp_comm),
        tp_(tp_comm != nullptr ? tp_comm->size() : 1),
        inv_freq_(config.head.rope_inv_freq()),
        residual_(b_) {
    const ModelConfig& c = config_.head;
    HostWeights host =
        load_host_weights(head, tp_, tp_comm != nullptr ? tp_comm->rank() : 0, eagle3_schema());
    // The target's embedding, whole (replicated).
    const TensorView& embed =
        target.tensor(embedding_tensor(target.config()), {config_.target_vocab, c.hidden_size});
    const HostTensor embed_host{embed.data, embed.dtype, static_cast<int>(embed.dim(0)),
                                static_cast<int>(embed.dim(1))};
    host.model[static_cast<int>(Role::kEmbed)] = embed_host;
    b_.check_fits(host.bytes(), host.plan.tp_rank, host.plan.tp, head.dir());
    weights_ = prepare_weights(b_, host, c, with_embedding());
    inv_freq_dev_ = b_.upload_floats(inv_freq_);
    load_d2t(head);
    check_config_ = c;
    check_config_.vocab_size = config_.target_vocab;  // inputs are target ids
  }

  const Eagle3Config& config() const { return config_; }
  HeadKind kind() const override { return HeadKind::kEagle3; }
  BackendKind backend() const override { return B::kKind; }
  std::span<const int> target_capture() const override { return config_.capture; }

  std::unique_ptr<KvCache> new_cache(int capacity) override {
    const AttentionHeads heads = attention_heads();
    return Base::make_cache(capacity, KvShape{1, heads.key_floats(), heads.value_floats()},
                            config_.head.max_position_embeddings);
  }
  void keep(KvCache& cache, int first, std::span<const int> rows) override {
    Base::keep_path(cache, 1, first, rows);
  }
  std::span<const std::int32_t> draft_to_target() const override { return d2t_; }

  ForwardResult forward(std::span<const SeqChunk> batch, const RowsView& source,
                        std::span<const int> rows, bool all_logits) override;

 private:
  // The schema plus the target's embedding (kEmbed), prepared row-major.
  static std::span<const TensorSpec> with_embedding() {
    static const std::vector<TensorSpec> table = [] {
      std::vector<TensorSpec> t(eagle3_schema().begin(), eagle3_schema().end());
      t.push_back(TensorSpec{Role::kEmbed, "model.embed_tokens.weight (target)", Scope::model(),
                             Dim::kVocab, Dim::kHidden, Split::kReplicated, Part::kNone,
                             Presence::kAlways, WeightUse::kEmbedding, false});
      return t;
    }();
    return table;
  }

  // This rank's attention heads (one head_dim for queries, keys and values).
  AttentionHeads attention_heads() const {
    return AttentionHeads{weights_.plan.q_heads, weights_.plan.kv_heads, config_.head.head_dim,
                          config_.head.head_dim};
  }

  // d2t (I64 offsets) as target ids, checked; the identity without one.
  void load_d2t(const Checkpoint& head) {
    const int draft_vocab = config_.head.vocab_size;
    d2t_.resize(draft_vocab);
    if (!head.has("d2t")) {
      SPEC_INPUT_CHECK(draft_vocab == config_.target_vocab,
                       head.dir() << ": no d2t tensor, but draft_vocab_size " << draft_vocab
                                  << " differs from vocab_size " << config_.target_vocab);
      for (int i = 0; i < draft_vocab; ++i) d2t_[i] = i;
      return;
    }
    const TensorView& t = head.file_of("d2t").get_other("d2t", "I64");
    SPEC_INPUT_CHECK(
        t.shape == std::vector<std::int64_t>{draft_vocab},
        head.dir() << ": d2t has " << t.numel() << " entries, draft_vocab_size is " << draft_vocab);
    for (int i = 0; i < draft_vocab; ++i) {
      std::int64_t offset;
      std::memcpy(&offset, t.data + 8 * static_cast<std::size_t>(i), 8);
      const std::int64_t id = i + offset;
      SPEC_INPUT_CHECK(id >= 0 && id < config_.target_vocab,
                       head.dir() << ": d2t[" << i << "] = " << offset << " maps draft id " << i
                                  << " to " << id << ", outside the target vocabulary");
      d2t_[i] = static_cast<std::int32_t>(id);
    }
  }

  Eagle3Config config_;
  Communicator* comm_;  // nullptr: replicated
  int tp_;
  ModelConfig check_config_;
  std::vector<float> inv_freq_;
  typename B::Floats inv_freq_dev_;
  ModelWeights<B> weights_;
  std::vector<std::int32_t> d2t_;
  ResidualStream<B> residual_;
  typename B::Scratch in_, hin_, e_, a_, tmp_, q_, attn_, act_, xn_;
};

template <class B>
ForwardResult Eagle3Model<B>::forward(std::span<const SeqChunk> batch, const RowsView& source,
                                      std::span<const int> rows, bool all_logits) {
  const ModelConfig& c = config_.head;
  const ShardPlan& plan = weights_.plan;
  const int n = check_batch(batch, check_config_, static_cast<const KvStore*>(this));
  const int H = c.hidden_size, hd = c.head_dim;
  const bool from_target = source.width == 3 * c.target_hidden_size;
  SPEC_CHECK(source.backend == B::kKind && (from_target || source.width == H) &&
                 static_cast<int>(rows.size()) == n,
             "EAGLE-3 head: hidden inputs of width " << source.width << " for " << rows.size()
                                                     << " of " << n << " tokens");
  for (int r : rows)
    SPEC_CHECK(r >= 0 && r < source.rows, "EAGLE-3 head: input row " << r << " of " << source.rows);
  // As a step graph, collectives included (like the target): the input rows' indices travel
  // with the staged inputs (CudaBackend::gather_rows).
  Base::stage_batch(batch, n);
  const float eps = c.rms_norm_eps;
  const std::size_t N = static_cast<std::size_t>(n);

  // The hidden inputs (gathered first: `source` may be this head's previous output).
  F in = in_.grow(N * source.width);
  b_.gather_rows(CF(source.data), source.width, rows, in);
  F hin = in;
  if (from_target) b_.linear(in, n, weights_.get(Role::kFc), nullptr, hin = hin_.grow(N * H));
  // x = cat(input_layernorm(embed(token)), hidden_norm(hin)).
  F a = a_.grow(N * 2 * H), tmp = tmp_.grow(N * H);
  Base::embedding_beside_hidden(weights_.get(Role::kEmbed), weights_.get(Role::kInputNorm), hin,
                                weights_.get(Role::kHiddenNorm), n, H, eps, e_.grow(N * H), tmp, a);
  // The residual stream starts as hin (or its norm). o_proj and down_proj go into it
  // (ResidualStream::add_projection: when sharded, partial sums summed across the group).
  Communicator* group = tp_ > 1 ? comm_ : nullptr;
  F x = residual_.begin(n, H, eps, group);
  b_.copy_rows(x, H, config_.norm_before_residual ? CF(tmp) : CF(hin), H, n, H);

  // Attention over 2H inputs, one layer (layer 0 of the head's cache).
  const AttentionHeads heads = attention_heads();
  F rope = tmp_.grow(std::max(N * H, N * hd));
  b_.rope_table(inv_freq_dev_, hd, rope);
  F q = q_.grow(N * heads.q_width());
  const typename B::KvRows kv = b_.kv_rows(0, heads);
  const typename B::LinearOut qkv[3] = {{&weights_.get(Role::kQ), nullptr, q},
                                        {&weights_.get(Role::kK), nullptr, kv.k},
                                        {&weights_.get(Role::kV), nullptr, kv.v}};
  fused::linear_multi(b_, a, n, qkv);
  F attn = attn_.grow(N * heads.out_width());
  fused::rope_attend(b_, 0, kv, q, n, rope, attn, heads);
  residual_.add_projection(attn, n, weights_.get(Role::kO), nullptr);
  F xn = xn_.grow(N * H), act = act_.grow(N * plan.intermediate);
  residual_.norm_swiglu(n, weights_.get(Role::kPostAttentionNorm), xn, weights_.get(Role::kGate),
                        act);
  residual_.add_projection(act, n, weights_.get(Role::kDown), nullptr);
  for (const SeqChunk& s : batch) s.cache->advance(s.n_tokens, s.parents);

  // Logits over the draft vocabulary: every token's, or each sequence's last (x, the head's
  // output, complete once the norm has added the last delta).
  residual_.norm(n, weights_.get(Role::kFinalNorm), xn);
  if (!all_logits) b_.keep_last_rows(xn, H);
  const int out_rows = all_logits ? n : static_cast<int>(batch.size());
  ForwardResult result;
  result.logits = Base::logits(xn, out_rows, weights_.get(Role::kLmHead), c.vocab_size, group);
  b_.end_forward();
  result.hidden = RowsView{B::kKind, residual_.x().get(), n, H};
  return result;
}

}  // namespace specrun
