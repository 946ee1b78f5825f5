// The DeepSeek-V3 family's decoder (DeepSeek-V3, Kimi-K2, the text model of Kimi-K2.5), one
// tensor-parallel rank's share of it, written once against the backend interface and compiled
// for every backend. Its own graph (not a branch of llama_model.h) because its attention is
// another block with another cache: the layers are a table of kinds (ModelConfig::layer_kind:
// MLA attention, then a dense SwiGLU MLP below first_k_dense_replace or a mixture of experts),
// and the blocks it shares with the Llama family (the residual stream, the logits, MoeBlock) are
// GraphBase's and moe_block.h's. The layers themselves are MlaDecoder<B>, which the target
// (DeepseekModel: embedding in, final norm and lm_head out) and its multi-token-prediction module
// (MtpModel, model/mtp_model.h: eh_proj in, shared_head out) both run.
//
// Multi-head latent attention (MLA), per layer on its n rows (H hidden, Hl = this rank's heads,
// R = kv_lora_rank, dn/dr = qk_nope/qk_rope_head_dim, dv = v_head_dim):
//   xn = rmsnorm(x, input norm)
//   q = q_b(rmsnorm(q_a(xn), q_a_layernorm)), or q_proj(xn)       [n, Hl * (dn + dr)]
//   [c ; k_pe] = kv_a_proj_with_mqa(xn)                            [n, R + dr]
//   latent row = [rmsnorm(c, kv_a_layernorm) ; rope(k_pe)]         -> the KV cache, R + dr floats
//   per head h: q_h' = [W_uk_h^T q_nope_h ; rope(q_pe_h)]          [R + dr]  (absorbed query)
//   o_lat_h = softmax(scale * q_h' . rows) . c_kv of the rows      [R]
//   attn_h = W_uv_h o_lat_h                                        [dv]
//   x += o_proj(attn)   (row-parallel: summed over the tp group)
// with kv_b_proj = [W_uk_h ; W_uv_h] per head ([dn + dv, R]), so that q_nope . (W_uk c) =
// (W_uk^T q_nope) . c: the absorbed form, which never expands keys or values per head. The
// cache holds one latent row per token and layer (kv_lora_rank + qk_rope_head_dim floats,
// not per head), attended as one kv head whose values are the first R floats of its keys
// (AttentionHeads::values_in_keys) with the softmax scale of the expanded heads
// (ModelConfig::attention_softmax_scale: qk_head_dim^-0.5, times YaRN's mscale(factor,
// mscale_all_dim)^2). Trees and keep move the latent rows like any cache rows.
// At load (prepare_mla): W_uk_h^T and W_uv_h become per-head weights (Role::kMlaKeyAbsorb,
// kMlaValueAbsorb; kv_b_proj itself is not kept); with rope_interleave the rope rows of q and
// of kv_a are de-interleaved (pairs (2i, 2i+1) -> (i, i + dr/2), which is what Hugging Face's
// apply_rotary_pos_emb_interleave does to q and k before rotate_half: the same rows, permuted
// alike in q and k, so every score is unchanged) and multiplied by YaRN's cos/sin magnitude
// (ModelConfig::rope_attention_scaling; RoPE is linear, so scaling its input is scaling the
// table). Those tensors are copied to float32 for it; a quantized q_b/q, kv_a or kv_b
// (DeepSeek-V3's FP8 attention) by its exact dequantized W' (backend.h dequantized), W_uv too: the
// one place quantized weights are widened at load (docs/quantization-design.md 3.3.1).
// Mixture-of-experts layers run MoeBlock with the config's router rule (router_rule: DeepSeek-V3's
// noaux_tc over the float32 e_score_correction_bias, kept on the host) and the shared experts.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"
#include "dist/communicator.h"
#include "model/checkpoint.h"
#include "model/graph_base.h"
#include "model/language_model.h"
#include "model/model_weights.h"
#include "model/moe_block.h"

namespace specrun {

// The weights derived at load that prepare_weights prepares with the checkpoint's (one per
// local head in the layer's stack: hence the "{e}" of a per-expert row; never read from a
// checkpoint).
// clang-format off
inline constexpr TensorSpec kMlaDerivedSchema[] = {
  {Role::kMlaKeyAbsorb,   "self_attn.kv_b_proj.key_absorb.{e}",   Scope::in(AttentionKind::kMla), Dim::kKvLoraRank, Dim::kNone, Split::kReplicated, Part::kNone, Presence::kAlways, WeightUse::kLinear, false},
  {Role::kMlaValueAbsorb, "self_attn.kv_b_proj.value_absorb.{e}", Scope::in(AttentionKind::kMla), Dim::kKvLoraRank, Dim::kNone, Split::kReplicated, Part::kNone, Presence::kAlways, WeightUse::kLinear, false},
};
// clang-format on

// Host-side preparation of one rank's MLA weights (deepseek_model.cpp): the per-head absorbed
// projections from kv_b_proj, the rope rows of q_b_proj / q_proj and kv_a_proj_with_mqa
// de-interleaved and scaled. The copies are owned by `owned` (which must outlive `host`'s use).
void prepare_mla(HostWeights& host, const ModelConfig& config,
                 std::vector<std::vector<float>>& owned);
// The schema prepare_weights walks for an MLA model: deepseek_schema() without kv_b_proj, plus
// kMlaDerivedSchema.
std::vector<TensorSpec> mla_prepared_schema();

// The decoder layers of the family, run on a residual stream: what DeepseekModel (the target)
// and MtpModel (its multi-token-prediction module, model/mtp_model.h) share. `host` is this
// rank's shard, loaded by the caller (per-layer rows of deepseek_schema(), and the model-level
// rows of `model_rows`); its MLA weights are prepared here. tp_comm: the tensor-parallel group
// (nullptr or of size 1: the whole layers on this rank).
template <class B>
class MlaDecoder : protected GraphBase<B> {
 protected:
  using Base = GraphBase<B>;
  using Base::b_;
  using typename Base::CF;
  using typename Base::F;
  using typename Base::Weight;

  MlaDecoder(B backend, const ModelConfig& config, Communicator* tp_comm, HostWeights host,
             std::span<const TensorSpec> model_rows, const std::string& source)
      : Base(std::move(backend)),
        config_(config),
        comm_(tp_comm),
        tp_(tp_comm != nullptr ? tp_comm->size() : 1),
        inv_freq_(config_.rope_inv_freq()),
        residual_(b_) {
    SPEC_CHECK(config_.is_mla(), "the DeepSeek-V3 layers need an MLA config");
    for (int layer = 0; layer < config_.num_layers; ++layer) {
      const LayerKind kind = config_.layer_kind(layer);
      SPEC_INPUT_CHECK(kind == kDenseLayer || kind == kMoeLayer,
                       source << "/config.json: layer " << layer << " is " << layer_kind_name(kind)
                              << "; the DeepSeek-V3 graph has " << layer_kind_name(kDenseLayer)
                              << " and " << layer_kind_name(kMoeLayer) << " layers only");
      if (kind == kMoeLayer) routing_.layers.push_back(layer);
    }
    // A tied embedding is lm_head's: counted once.
    weight_bytes_ =
        host.bytes() -
        (config_.tie_word_embeddings ? host.model[static_cast<int>(Role::kEmbed)].bytes() : 0);
    b_.check_fits(weight_bytes_, host.plan.tp_rank, host.plan.tp, source);
    std::vector<std::vector<float>> derived;
    prepare_mla(host, config_, derived);
    std::vector<TensorSpec> schema(model_rows.begin(), model_rows.end());
    for (const TensorSpec& s : mla_prepared_schema())
      if (s.per_layer()) schema.push_back(s);
    weights_ = prepare_weights(b_, host, config_, schema);
    inv_freq_dev_ = b_.upload_floats(inv_freq_);
    moe_ = make_moe_block(b_, config_, host, routing_);
    // The routers' e_score_correction_bias stays on the host (the router decides there).
    router_bias_.resize(config_.num_layers);
    for (int layer : routing_.layers) {
      const HostTensor& bias = host.layers[layer][static_cast<int>(Role::kRouterBias)];
      if (bias.data == nullptr) continue;  // a softmax router has none
      router_bias_[layer].resize(static_cast<std::size_t>(bias.cols));
      std::memcpy(router_bias_[layer].data(), bias.data,
                  router_bias_[layer].size() * sizeof(float));
    }
  }

  // The latent cache's shape (one row per token and layer) and its bytes per token.
  std::unique_ptr<KvCache> new_latent_cache(int capacity) {
    return Base::make_cache(capacity, KvShape{config_.num_layers, config_.mla.cache_floats(), 0},
                            config_.max_position_embeddings);
  }
  const ExpertRouting* layer_routing() const {
    return routing_.layers.empty() ? nullptr : &routing_;
  }

  // Every layer over the n staged rows of the residual stream (begun by the caller), capturing
  // the stream before layer l when capture->wants(l).
  void run_layers(int n, HiddenCapture<B>* capture) {
    const int dr = config_.mla.qk_rope_head_dim;
    b_.rope_table(inv_freq_dev_, dr, rope_.grow(static_cast<std::size_t>(n) * dr));
    xn_.grow(static_cast<std::size_t>(n) * config_.hidden_size);
    if (!routing_.layers.empty()) {
      routing_.n_tokens = n;
      routing_.experts.resize(routing_.layers.size() * static_cast<std::size_t>(n) *
                              routing_.top_k);
    }
    for (int layer = 0, moe_index = 0; layer < config_.num_layers; ++layer) {
      if (capture != nullptr && capture->wants(layer))
        capture->copy(b_, layer, residual_.settle(n), n);
      mla_attention_block(layer, n);
      if (moe_index < static_cast<int>(routing_.layers.size()) &&
          routing_.layers[moe_index] == layer)
        moe_block(layer, moe_index++, n);
      else
        dense_swiglu_block(layer, n);
    }
  }
  Communicator* group() { return tp_ > 1 ? comm_ : nullptr; }

  ModelConfig config_;
  Communicator* comm_;  // nullptr: the whole layers on this rank
  int tp_;
  ModelWeights<B> weights_;
  std::vector<float> inv_freq_;
  typename B::Floats inv_freq_dev_;
  std::size_t weight_bytes_ = 0;
  ResidualStream<B> residual_;
  typename B::Scratch xn_;

 private:
  static constexpr LayerKind kDenseLayer{AttentionKind::kMla, MlpKind::kDenseSwiGlu};
  static constexpr LayerKind kMoeLayer{AttentionKind::kMla, MlpKind::kMoe};

  // The absorbed attention's heads: this rank's query heads over one latent kv head.
  AttentionHeads latent_heads() const {
    const MlaConfig& m = config_.mla;
    return AttentionHeads{weights_.plan.q_heads,
                          1,
                          m.cache_floats(),
                          m.kv_lora_rank,
                          static_cast<float>(config_.attention_softmax_scale()),
                          true};
  }
  void mla_attention_block(int layer, int n);
  void dense_swiglu_block(int layer, int n);
  void moe_block(int layer, int moe_index, int n);

  std::unique_ptr<MoeBlock<B>> moe_;
  std::vector<std::vector<float>> router_bias_;  // per layer: its router's bias, host, or empty
  ExpertRouting routing_;
  typename B::Scratch qa_, q_, kva_, ckv_, qabs_, head_in_, head_out_, olat_, attn_, act_, rope_;
};

template <class B>
class DeepseekModel final : public LanguageModel, private MlaDecoder<B> {
  using Decoder = MlaDecoder<B>;
  using Base = GraphBase<B>;
  using Base::b_;
  using Decoder::comm_;
  using Decoder::config_;
  using Decoder::residual_;
  using Decoder::tp_;
  using Decoder::weights_;
  using Decoder::xn_;
  using typename Base::F;

 public:
  // As LlamaModel's constructor. Throws naming config.json when a layer is of a kind this graph
  // has not.
  DeepseekModel(const Checkpoint& checkpoint, B backend, Communicator& tp_comm, int ep = 0)
      : Decoder(
            std::move(backend), checkpoint.config(), &tp_comm,
            load_host_weights(checkpoint, tp_comm.size(), tp_comm.rank(), deepseek_schema(), ep),
            model_rows(), checkpoint.dir()) {}

  const ModelConfig& config() const override { return config_; }
  BackendKind backend() const override { return B::kKind; }
  const ShardPlan& plan() const { return weights_.plan; }
  // The latent cache is one row per token: read_kv gives [length, kv_lora_rank +
  // qk_rope_head_dim] (which = 0; which = 1, the values, are inside those rows).
  int kv_heads() const override { return 1; }
  void synchronize() override { b_.synchronize(); }
  const ExpertRouting* routing() const override { return Decoder::layer_routing(); }
  std::size_t weight_bytes() const override { return Decoder::weight_bytes_; }
  std::size_t kv_bytes_per_token() const override {
    return static_cast<std::size_t>(config_.num_layers) * config_.mla.cache_floats() *
           sizeof(float);
  }

  std::unique_ptr<KvCache> new_cache(int capacity) override {
    return Decoder::new_latent_cache(capacity);
  }

  ForwardResult forward(std::span<const SeqChunk> batch, const ForwardRequest& request) override;

  void keep(KvCache& cache, int first, std::span<const int> rows) override {
    Base::keep_path(cache, config_.num_layers, first, rows);
  }
  void read(const RowsView& view, int first, int count, float* host) override {
    Base::read_rows(view, first, count, host);
  }
  void read_kv(const KvCache& cache, int layer, int which, float* host) override {
    SPEC_CHECK(which == 0, "read_kv: an MLA cache holds latent rows only (which = 0)");
    Base::read_cache(cache, layer, which, host);
  }

 private:
  // The model-level rows of the prepared schema (embedding, final norm, lm_head).
  static std::span<const TensorSpec> model_rows() {
    static const std::vector<TensorSpec> rows = [] {
      std::vector<TensorSpec> t;
      for (const TensorSpec& s : mla_prepared_schema())
        if (!s.per_layer()) t.push_back(s);
      return t;
    }();
    return rows;
  }
  HiddenCapture<B> capture_;
};

template <class B>
ForwardResult DeepseekModel<B>::forward(std::span<const SeqChunk> batch,
                                        const ForwardRequest& request) {
  const ShardPlan& plan = weights_.plan;
  const int n = check_batch(batch, config_, static_cast<const KvStore*>(this));
  const int L = config_.num_layers, H = config_.hidden_size;
  capture_.begin(request.capture, L, n, H);
  Base::stage_batch(batch, n);

  F x = residual_.begin(n, H, config_.rms_norm_eps, Decoder::group());
  b_.embed(weights_.get(Role::kEmbed), plan.vocab_begin, x);
  if (tp_ > 1) b_.all_reduce_sum(*comm_, x, static_cast<std::size_t>(n) * H);
  Decoder::run_layers(n, &capture_);
  for (const SeqChunk& s : batch) s.cache->advance(s.n_tokens, s.parents);

  F xn = xn_.grow(0);
  residual_.norm(n, weights_.get(Role::kFinalNorm), xn);
  capture_.copy(b_, L, xn, n);
  if (!request.all_logits) b_.keep_last_rows(xn, H);
  const int out_rows = request.all_logits ? n : static_cast<int>(batch.size());
  ForwardResult result;
  result.logits =
      Base::logits(xn, out_rows, weights_.get(Role::kLmHead), config_.vocab_size, Decoder::group());
  b_.end_forward();
  result.hidden = capture_.view(n);
  return result;
}

template <class B>
void MlaDecoder<B>::mla_attention_block(int layer, int n) {
  const MlaConfig& m = config_.mla;
  const int R = m.kv_lora_rank, dr = m.qk_rope_head_dim, dn = m.qk_nope_head_dim;
  const int dv = m.v_head_dim, qk = m.qk_head_dim(), row = m.cache_floats();
  const int heads = weights_.plan.q_heads;
  const std::size_t rows = static_cast<std::size_t>(n);
  const float eps = config_.rms_norm_eps;
  F xn = xn_.grow(0);
  residual_.norm(n, weights_.at(layer, Role::kInputNorm), xn);

  // Queries [n, heads * qk] (their rope parts de-interleaved at load).
  F q = q_.grow(rows * heads * qk);
  if (const Weight* q_proj = weights_.maybe(layer, Role::kQ)) {
    b_.linear(xn, n, *q_proj, nullptr, q);
  } else {
    const int qr = m.q_lora_rank;
    F qa = qa_.grow(rows * qr);
    b_.linear(xn, n, weights_.at(layer, Role::kQA), nullptr, qa);
    b_.rmsnorm(qa, n, qr, weights_.at(layer, Role::kQANorm), eps, qa);
    b_.linear(qa, n, weights_.at(layer, Role::kQB), nullptr, q);
  }
  // The latent rows [normed c_kv ; roped k_pe], written where the backend keeps this pass's
  // cache rows.
  const AttentionHeads latent = latent_heads();
  const typename B::KvRows kv = b_.kv_rows(layer, latent);
  F kva = kva_.grow(rows * row);
  F ckv = ckv_.grow(rows * R);
  F rope = rope_.grow(0);
  b_.linear(xn, n, weights_.at(layer, Role::kKvA), nullptr, kva);
  b_.copy_rows(ckv, R, kva, row, n, R);
  b_.rmsnorm(ckv, n, R, weights_.at(layer, Role::kKvANorm), eps, ckv);
  b_.copy_rows(kv.k, row, ckv, R, n, R);
  b_.copy_rows(kv.k + R, row, kva + R, row, n, dr);
  b_.rope_apply(kv.k + R, n, 1, dr, row, rope);

  // Absorbed queries [n, heads * row]: per head W_uk^T q_nope, then its roped q_pe.
  F qabs = qabs_.grow(rows * heads * row);
  F head_in = head_in_.grow(rows * std::max(dn, R));
  F head_out = head_out_.grow(rows * std::max(R, dv));
  const std::size_t q_stride = static_cast<std::size_t>(heads) * qk;
  const std::size_t abs_stride = static_cast<std::size_t>(heads) * row;
  const std::span<const Weight> key_absorb = weights_.stack(layer, Role::kMlaKeyAbsorb);
  const std::span<const Weight> value_absorb = weights_.stack(layer, Role::kMlaValueAbsorb);
  for (int h = 0; h < heads; ++h) {
    const std::ptrdiff_t qh = static_cast<std::ptrdiff_t>(h) * qk;
    const std::ptrdiff_t ah = static_cast<std::ptrdiff_t>(h) * row;
    b_.copy_rows(head_in, dn, q + qh, q_stride, n, dn);
    b_.linear(head_in, n, key_absorb[h], nullptr, head_out);
    b_.copy_rows(qabs + ah, abs_stride, head_out, R, n, R);
    b_.rope_apply(q + qh + dn, n, 1, dr, static_cast<std::int64_t>(q_stride), rope);
    b_.copy_rows(qabs + ah + R, abs_stride, q + qh + dn, q_stride, n, dr);
  }
  F olat = olat_.grow(rows * heads * R);
  b_.attend(layer, qabs, n, false, olat, latent);

  // Per head W_uv o_lat, then o_proj into the stream.
  F attn = attn_.grow(rows * heads * dv);
  const std::size_t olat_stride = static_cast<std::size_t>(heads) * R;
  const std::size_t attn_stride = static_cast<std::size_t>(heads) * dv;
  for (int h = 0; h < heads; ++h) {
    b_.copy_rows(head_in, R, olat + static_cast<std::ptrdiff_t>(h) * R, olat_stride, n, R);
    b_.linear(head_in, n, value_absorb[h], nullptr, head_out);
    b_.copy_rows(attn + static_cast<std::ptrdiff_t>(h) * dv, attn_stride, head_out, dv, n, dv);
  }
  residual_.add_projection(attn, n, weights_.at(layer, Role::kO), nullptr);
}

template <class B>
void MlaDecoder<B>::dense_swiglu_block(int layer, int n) {
  residual_.dense_swiglu(n, weights_.at(layer, Role::kPostAttentionNorm), xn_.grow(0),
                         weights_.at(layer, Role::kGate), weights_.at(layer, Role::kDown),
                         act_.grow(static_cast<std::size_t>(n) * weights_.plan.intermediate));
}

template <class B>
void MlaDecoder<B>::moe_block(int layer, int moe_index, int n) {
  std::int32_t* chosen =
      routing_.experts.data() + static_cast<std::size_t>(moe_index) * n * routing_.top_k;
  const typename MoeBlock<B>::Shared shared{weights_.maybe(layer, Role::kSharedGate),
                                            weights_.maybe(layer, Role::kSharedDown)};
  moe_->run(residual_, n, config_.hidden_size, weights_.at(layer, Role::kPostAttentionNorm),
            weights_.at(layer, Role::kRouter), router_bias_[layer],
            weights_.stack(layer, Role::kExpertGate), weights_.stack(layer, Role::kExpertDown),
            shared, xn_.grow(0), chosen);
}

}  // namespace specrun
