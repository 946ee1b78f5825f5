// The DeepSeek-V3 multi-token-prediction (MTP) module as a draft head (docs/mtp-design.md),
// written once against the backend interface. Per token, with h its hidden input (the target's
// final norm output at the position, or this head's own output for the parent token):
//
//   x   = eh_proj(cat(enorm(embed(token)), hnorm(h)))     [2H] -> [H], embedding first
//   y   = the module's decoder layer (MLA over its own latent cache, dense or MoE MLP:
//         MlaDecoder, the target's layers' code) at the position
//   logits = shared_head.head(shared_head.norm(y))
//   out = y ("pre_norm", vLLM), or shared_head.norm(y) ("shared_head_norm", SGLang): the next
//         step's h (MtpConfig::chain_shared_head_norm)
//
// The module is checkpoint layer MtpConfig::layer (model.layers.{num_hidden_layers + j} of the
// target's checkpoint, or layer 0 of a NextN checkpoint). Its embedding and head are the
// layer's own embed_tokens / shared_head.head when the checkpoint has them, else the target's
// model.embed_tokens / lm_head (read from the target's checkpoint, never copied on the host).
// Under tensor parallelism the head is replicated (tp_comm nullptr: every rank holds all of it)
// or sharded like the target (heads, intermediate, experts and vocabulary split; o_proj / down
// summed, logits gathered); eh_proj, the norms and the embedding are whole on every rank.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/communicator.h"
#include "model/checkpoint.h"
#include "model/deepseek_model.h"
#include "model/draft_head.h"
#include "model/mtp_config.h"
#include "model/quant_weights.h"

namespace specrun {

template <class B>
class MtpModel final : public DraftHead, private MlaDecoder<B> {
  using Decoder = MlaDecoder<B>;
  using Base = GraphBase<B>;
  using Base::b_;
  using Decoder::config_;
  using Decoder::residual_;
  using Decoder::weights_;
  using Decoder::xn_;
  using typename Base::CF;
  using typename Base::F;

 public:
  // head: the directory holding the module (opened with config.head); target: the target's
  // checkpoint (the embedding and head when the module has none of its own).
  MtpModel(const Checkpoint& head, const Checkpoint& target, const MtpConfig& config, B backend,
           Communicator* tp_comm)
      : Decoder(std::move(backend), config.head, tp_comm, load(head, target, config, tp_comm),
                model_rows(), head.dir()),
        mtp_(config) {
    check_config_ = config_;
    d2t_.resize(config_.vocab_size);
    for (int i = 0; i < config_.vocab_size; ++i) d2t_[i] = i;
  }

  HeadKind kind() const override { return HeadKind::kMtp; }
  BackendKind backend() const override { return B::kKind; }
  std::span<const int> target_capture() const override { return mtp_.capture; }
  std::unique_ptr<KvCache> new_cache(int capacity) override {
    return Decoder::new_latent_cache(capacity);
  }
  void keep(KvCache& cache, int first, std::span<const int> rows) override {
    Base::keep_path(cache, 1, first, rows);
  }
  std::span<const std::int32_t> draft_to_target() const override { return d2t_; }
  const ExpertRouting* routing() const override { return Decoder::layer_routing(); }

  ForwardResult forward(std::span<const SeqChunk> batch, const RowsView& source,
                        std::span<const int> rows, bool all_logits) override;

 private:
  // The module's rows beside its decoder layer's, model-level in the prepared weights: enorm
  // (kInputNorm), hnorm (kHiddenNorm), eh_proj (kFc), shared_head.norm (kFinalNorm), the head
  // (kLmHead, split by vocabulary) and the embedding (kEmbed, whole).
  static std::span<const TensorSpec> model_rows() {
    // clang-format off
    static constexpr TensorSpec kRows[] = {
      {Role::kInputNorm,  "enorm.weight",            Scope::model(), Dim::kHidden, Dim::kNone,      Split::kReplicated, Part::kNone,  Presence::kAlways, WeightUse::kVector,    false},
      {Role::kHiddenNorm, "hnorm.weight",            Scope::model(), Dim::kHidden, Dim::kNone,      Split::kReplicated, Part::kNone,  Presence::kAlways, WeightUse::kVector,    false},
      {Role::kFc,         "eh_proj.weight",          Scope::model(), Dim::kHidden, Dim::kTwoHidden, Split::kReplicated, Part::kNone,  Presence::kAlways, WeightUse::kLinear,    false},
      {Role::kFinalNorm,  "shared_head.norm.weight", Scope::model(), Dim::kHidden, Dim::kNone,      Split::kReplicated, Part::kNone,  Presence::kAlways, WeightUse::kVector,    false},
      {Role::kLmHead,     "shared_head.head.weight", Scope::model(), Dim::kVocab,  Dim::kHidden,    Split::kRows,       Part::kVocab, Presence::kAlways, WeightUse::kLinear,    false},
      {Role::kEmbed,      "embed_tokens.weight",     Scope::model(), Dim::kVocab,  Dim::kHidden,    Split::kReplicated, Part::kNone,  Presence::kAlways, WeightUse::kEmbedding, false},
    };
    // clang-format on
    return kRows;
  }

  // This rank's shard: the decoder layer's rows (checkpoint layer config.layer) and the rows of
  // model_rows(), each read from layer config.layer or, for the embedding and the head when the
  // layer has none, from the target.
  static HostWeights load(const Checkpoint& head, const Checkpoint& target, const MtpConfig& config,
                          Communicator* tp_comm) {
    const int tp = tp_comm != nullptr ? tp_comm->size() : 1;
    std::vector<TensorSpec> layer_rows;
    for (const TensorSpec& s : deepseek_schema())
      if (s.per_layer()) layer_rows.push_back(s);
    HostWeights host = load_host_weights(head, tp, tp_comm != nullptr ? tp_comm->rank() : 0,
                                         layer_rows, 0, config.layer);
    const ModelConfig& c = config.head;
    const std::int64_t H = c.hidden_size, V = c.vocab_size;
    const std::string layer =
        c.tensor_prefix + "model.layers." + std::to_string(config.layer) + ".";
    auto whole = [](const TensorView& t) {
      return HostTensor{t.data, t.dtype, static_cast<int>(t.dim(0)),
                        t.shape.size() > 1 ? static_cast<int>(t.dim(1)) : 1};
    };
    auto set = [&](Role role, const HostTensor& t) { host.model[static_cast<int>(role)] = t; };
    // A Linear of the module as its config.json's quantization_config and the file agree
    // (quant_weights.h): float, or kept packed; rows [begin, begin + count) of it.
    auto linear = [&](const Checkpoint& ckpt, const TensorSpec& spec, const std::string& name,
                      std::vector<std::int64_t> shape, std::int64_t begin,
                      std::int64_t count) -> std::optional<HostTensor> {
      const QuantDecision d = resolve_storage(ckpt, spec, name, ModuleClass::kLinear);
      if (d.kind == QuantKind::kNone) return std::nullopt;
      const std::string why =
          "[" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]";
      return load_quantized(ckpt, name, d, shape, why,
                            count == shape[0] ? Split::kReplicated : Split::kRows, begin, count, tp,
                            host.owned);
    };
    set(Role::kInputNorm, whole(head.tensor(layer + "enorm.weight", {H})));
    set(Role::kHiddenNorm, whole(head.tensor(layer + "hnorm.weight", {H})));
    const std::string eh = layer + "eh_proj.weight";
    const std::optional<HostTensor> eh_packed = linear(head, model_rows()[2], eh, {H, 2 * H}, 0, H);
    set(Role::kFc, eh_packed ? *eh_packed : whole(head.tensor(eh, {H, 2 * H})));
    set(Role::kFinalNorm, whole(head.tensor(layer + "shared_head.norm.weight", {H})));
    // The embedding: the layer's own copy, else the target's (whole on every rank).
    const std::string own_embed = layer + "embed_tokens.weight";
    set(Role::kEmbed,
        whole(head.has(own_embed) ? head.tensor(own_embed, {V, H})
                                  : target.tensor(embedding_tensor(target.config()), {V, H})));
    // The head: the layer's shared_head.head, else the target's lm_head (its embedding when
    // tied); this rank's rows of the vocabulary.
    const std::string own_head = layer + "shared_head.head.weight";
    const bool own = head.has(own_head) || head.has(layer + "shared_head.head.weight_packed");
    const std::string target_head = target.config().tensor_prefix + "lm_head.weight";
    const std::optional<HostTensor> packed =
        own ? linear(head, model_rows()[4], own_head, {V, H}, host.plan.vocab_begin,
                     host.plan.vocab)
        : target.config().tie_word_embeddings ? std::nullopt
                                              : linear(target, model_rows()[4], target_head, {V, H},
                                                       host.plan.vocab_begin, host.plan.vocab);
    if (packed) {
      set(Role::kLmHead, *packed);
      return host;
    }
    const TensorView& lm = head.has(own_head) ? head.tensor(own_head, {V, H})
                           : target.config().tie_word_embeddings
                               ? target.tensor(embedding_tensor(target.config()), {V, H})
                               : target.tensor(target_head, {V, H});
    HostTensor rows = whole(lm);
    rows.data += static_cast<std::size_t>(host.plan.vocab_begin) * H * dtype_size(lm.dtype);
    rows.rows = host.plan.vocab;
    set(Role::kLmHead, rows);
    return host;
  }

  MtpConfig mtp_;
  ModelConfig check_config_;
  std::vector<std::int32_t> d2t_;  // the identity: the module drafts over the target's vocabulary
  typename B::Scratch in_, e_, a_, tmp_, out_;
};

template <class B>
ForwardResult MtpModel<B>::forward(std::span<const SeqChunk> batch, const RowsView& source,
                                   std::span<const int> rows, bool all_logits) {
  const int n = check_batch(batch, check_config_, static_cast<const KvStore*>(this));
  const int H = config_.hidden_size;
  SPEC_CHECK(source.backend == B::kKind && source.width == H && static_cast<int>(rows.size()) == n,
             "MTP head: hidden inputs of width " << source.width << " for " << rows.size() << " of "
                                                 << n << " tokens");
  for (int r : rows)
    SPEC_CHECK(r >= 0 && r < source.rows, "MTP head: input row " << r << " of " << source.rows);
  Base::stage_batch(batch, n);
  const float eps = config_.rms_norm_eps;
  const std::size_t N = static_cast<std::size_t>(n);

  // The hidden inputs (gathered first: `source` may be this head's previous output).
  F in = in_.grow(N * H);
  b_.gather_rows(CF(source.data), source.width, rows, in);
  // x = eh_proj(cat(enorm(embed(token)), hnorm(h))), the residual stream's start.
  F a = a_.grow(N * 2 * H), tmp = tmp_.grow(N * H);
  Base::embedding_beside_hidden(weights_.get(Role::kEmbed), weights_.get(Role::kInputNorm), in,
                                weights_.get(Role::kHiddenNorm), n, H, eps, e_.grow(N * H), tmp, a);
  b_.linear(a, n, weights_.get(Role::kFc), nullptr, tmp);
  F x = residual_.begin(n, H, eps, Decoder::group());
  b_.copy_rows(x, H, tmp, H, n, H);

  Decoder::run_layers(n, nullptr);
  for (const SeqChunk& s : batch) s.cache->advance(s.n_tokens, s.parents);

  // shared_head.norm(y) (y complete once the norm has added the last delta), then the logits.
  F xn = xn_.grow(0);
  residual_.norm(n, weights_.get(Role::kFinalNorm), xn);
  RowsView hidden{B::kKind, residual_.x().get(), n, H};
  if (mtp_.chain_shared_head_norm) {
    F out = out_.grow(N * H);
    b_.copy_rows(out, H, xn, H, n, H);
    hidden.data = out.get();
  }
  if (!all_logits) b_.keep_last_rows(xn, H);
  const int out_rows = all_logits ? n : static_cast<int>(batch.size());
  ForwardResult result;
  result.logits =
      Base::logits(xn, out_rows, weights_.get(Role::kLmHead), config_.vocab_size, Decoder::group());
  b_.end_forward();
  result.hidden = hidden;
  return result;
}

}  // namespace specrun
