#include "model/transformer.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "dist/communicator.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"

namespace specrun {

namespace {

template <typename T>
T* sized(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

cpu::PackedWeights packed(const WeightMatrix& w) {
  SPEC_CHECK(w.packed, "weight matrix [" << w.rows << ", " << w.cols
                                         << "] is not packed for the CPU kernels (make_resident)");
  return {w.data, w.dtype, w.rows, w.cols};
}

void linear(const float* x, int n, const WeightMatrix& w, const std::vector<float>& bias,
            float* y) {
  cpu::matmul(x, n, packed(w), bias.empty() ? nullptr : bias.data(), y);
}

cpu::MatmulOutput output(const WeightMatrix& w, const std::vector<float>& bias, float* y) {
  return {packed(w), bias.empty() ? nullptr : bias.data(), y};
}

// Moves row `last[b]` of a [*, width] array to row b for each b (last ascending, last[b] >= b:
// rows only move towards the front, so no row is overwritten before it is read).
void keep_rows(float* a, std::size_t width, const int* last, int count) {
  for (int b = 0; b < count; ++b)
    if (last[b] != b)
      std::memcpy(a + width * b, a + width * static_cast<std::size_t>(last[b]),
                  width * sizeof(float));
}

}  // namespace

Transformer::Transformer(const Checkpoint& checkpoint, Communicator& tp_comm, int tp_rank, int tp,
                         int threads)
    : config_(checkpoint.config()),
      comm_(tp_comm),
      tp_(tp),
      threads_(std::max(1, threads)),
      weights_(ModelWeights::load(checkpoint, tp, tp_rank)),
      inv_freq_(config_.rope_inv_freq()) {
  SPEC_CHECK(tp_comm.size() == tp && tp_comm.rank() == tp_rank,
             "tensor-parallel communicator has rank "
                 << tp_comm.rank() << " of " << tp_comm.size() << " but the model was "
                 << "asked for rank " << tp_rank << " of " << tp);
  // Decode streams every weight per token: keep them in anonymous huge-page memory.
  weights_.make_resident();
  SPEC_CHECK(
      static_cast<int>(inv_freq_.size()) == config_.head_dim / 2,
      "rope_inv_freq returned " << inv_freq_.size() << " values for head_dim " << config_.head_dim);
}

std::unique_ptr<KvCache> Transformer::new_cache(int capacity) const {
  return std::make_unique<KvCache>(config_.num_layers, capacity, weights_.plan.kv_heads,
                                   config_.head_dim, config_.max_position_embeddings);
}

void Transformer::forward(std::span<const SeqChunk> batch, bool all_logits,
                          std::vector<float>& logits) {
  const ShardPlan& plan = weights_.plan;
  // Validate everything before any cache changes.
  const int n = check_batch(batch, config_, plan.kv_heads, false, "this model");

  omp_set_num_threads(threads_);
  const int H = config_.hidden_size;
  std::int32_t* tokens = sized(tokens_, n);
  std::int32_t* positions = sized(positions_, n);
  int* offsets = sized(offsets_, batch.size());
  for (int off = 0, b = 0; const SeqChunk& s : batch) {
    offsets[b++] = off;
    std::copy(s.tokens, s.tokens + s.n_tokens, tokens + off);
    for (int i = 0; i < s.n_tokens; ++i) positions[off + i] = s.cache->length() + i;
    off += s.n_tokens;
  }

  // One cos/sin table per forward: every layer rotates q and k at the same positions.
  cpu::rope_table(inv_freq_.data(), config_.head_dim, positions, n,
                  sized(rope_, static_cast<std::size_t>(n) * config_.head_dim));

  float* x = sized(x_, static_cast<std::size_t>(n) * H);
  const WeightMatrix& embed = weights_.embed;
  if (embed.packed)  // tied to lm_head: one packed copy serves both
    cpu::gather_rows_packed(packed(embed), plan.vocab_begin, tokens, n, x);
  else
    cpu::gather_rows(embed.data, embed.dtype, plan.vocab_begin, plan.vocab, H, tokens, n, x);
  if (tp_ > 1) comm_.all_reduce_sum(x, static_cast<std::size_t>(n) * H);

  // Each block leaves the residual stream in x and the next block's normed input in xn_ (the
  // residual add and the next RMSNorm are one pass).
  const LayerWeights& first = weights_.layers.front();
  cpu::rmsnorm(x, n, H, first.input_norm.data, first.input_norm.dtype, config_.rms_norm_eps,
               sized(xn_, static_cast<std::size_t>(n) * H));
  // Rows whose logits are wanted: all, or each sequence's last token. In the second case the
  // last layer computes keys and values for every token (the cache needs them) and everything
  // else for the wanted rows only (a prefill skips most of that layer's multiply-adds); rows are
  // independent and attention's result for a query does not depend on the window it is in, so
  // the logits are bitwise those of the full computation.
  const int rows = all_logits ? n : static_cast<int>(batch.size());
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    const bool trim = rows < n && layer + 1 == config_.num_layers;
    attention_block(layer, batch, n, trim);
    mlp_block(layer, trim ? rows : n);
  }
  for (const SeqChunk& s : batch) s.cache->advance(s.n_tokens);

  // The residual stream now holds `rows` rows; normed into xn_.
  float* xn = xn_.data();
  cpu::rmsnorm(x, rows, H, weights_.final_norm.data, weights_.final_norm.dtype,
               config_.rms_norm_eps, xn);
  const int V = config_.vocab_size, v_local = plan.vocab;
  logits.resize(static_cast<std::size_t>(rows) * V);
  if (tp_ == 1) {
    linear(xn, rows, weights_.lm_head, {}, logits.data());
    return;
  }
  // Vocab-parallel lm_head: local [rows, V/tp], gathered to [tp][rows][V/tp], reordered.
  const std::size_t local = static_cast<std::size_t>(rows) * v_local;
  float* mine = sized(local_logits_, local * (tp_ + 1));
  float* gathered = mine + local;
  linear(xn, rows, weights_.lm_head, {}, mine);
  comm_.all_gather(mine, gathered, local * sizeof(float));
  for (int r = 0; r < tp_; ++r)
    for (int t = 0; t < rows; ++t)
      std::memcpy(
          logits.data() + static_cast<std::size_t>(t) * V + static_cast<std::size_t>(r) * v_local,
          gathered + r * local + static_cast<std::size_t>(t) * v_local, sizeof(float) * v_local);
}

void Transformer::attention_block(int layer, std::span<const SeqChunk> batch, int n,
                                  bool last_only) {
  const LayerWeights& L = weights_.layers[layer];
  const ShardPlan& plan = weights_.plan;
  const int H = config_.hidden_size, hd = config_.head_dim;
  const std::size_t q_width = static_cast<std::size_t>(plan.q_heads) * hd;
  const std::size_t kv_width = static_cast<std::size_t>(plan.kv_heads) * hd;
  float* x = x_.data();
  float* xn = xn_.data();  // rmsnorm(x) with input_norm, from the previous block
  const int n_seqs = static_cast<int>(batch.size());
  float* q = sized(q_, n * q_width);
  // One sequence (prefill, decode, verify): keys and values go straight to their place in its
  // cache (same [token, kv_width] layout); several: to scratch rows, appended per sequence.
  KvCache& first_cache = *batch.front().cache;
  const std::size_t first_row = static_cast<std::size_t>(first_cache.length()) * kv_width;
  const bool direct = n_seqs == 1;
  float* k = direct ? first_cache.keys(layer) + first_row : sized(k_, n * kv_width);
  float* v = direct ? first_cache.values(layer) + first_row : sized(v_, n * kv_width);
  float* attn = sized(attn_, n * q_width);
  float* proj = sized(proj_, static_cast<std::size_t>(n) * H);

  // q, k and v in one pass over the three weight matrices (one parallel region). last_only:
  // keys and values for all n tokens, then q and the rest for each sequence's last token only,
  // moved to row b (of xn, the residual stream x and the RoPE table; none of them is read at
  // the other rows again in this forward pass).
  const cpu::MatmulOutput qkv[3] = {output(L.q, L.q_bias, q), output(L.k, L.k_bias, k),
                                    output(L.v, L.v_bias, v)};
  const int m = last_only ? n_seqs : n;  // rows from q on
  cpu::matmul_multi(xn, n, last_only ? qkv + 1 : qkv, last_only ? 2 : 3);
  cpu::rope_apply(k, n, plan.kv_heads, hd, static_cast<std::int64_t>(kv_width), rope_.data());
  if (last_only) {
    int* last = sized(last_rows_, n_seqs);
    for (int b = 0; b < n_seqs; ++b) last[b] = offsets_[b] + batch[b].n_tokens - 1;
    keep_rows(xn, H, last, n_seqs);
    keep_rows(x, H, last, n_seqs);
    keep_rows(rope_.data(), hd, last, n_seqs);
    cpu::matmul_multi(xn, m, qkv, 1);
  }
  cpu::rope_apply(q, m, plan.q_heads, hd, static_cast<std::int64_t>(q_width), rope_.data());

  // Append each sequence's keys and values to its cache, then attend. Sequences are
  // independent: several of them (batched decode) run on different threads, each attention call
  // then single-threaded; one long sequence (prefill) splits its (token, head) pairs instead.
  auto attend = [&](int b) {
    const SeqChunk& s = batch[b];
    const std::size_t off = static_cast<std::size_t>(offsets_[b]);
    KvCache& cache = *s.cache;
    const int start = cache.length();
    if (!direct) {
      const std::size_t count = static_cast<std::size_t>(s.n_tokens) * kv_width;
      std::memcpy(cache.keys(layer) + static_cast<std::size_t>(start) * kv_width,
                  k + off * kv_width, count * sizeof(float));
      std::memcpy(cache.values(layer) + static_cast<std::size_t>(start) * kv_width,
                  v + off * kv_width, count * sizeof(float));
    }
    // last_only: one query, the last token's, at row b.
    const std::size_t row = last_only ? static_cast<std::size_t>(b) : off;
    cpu::attention(q + row * q_width, last_only ? 1 : s.n_tokens, plan.q_heads, plan.kv_heads, hd,
                   cache.keys(layer), cache.values(layer),
                   last_only ? start + s.n_tokens - 1 : start, attn + row * q_width);
  };
  if (n_seqs == 1) {
    attend(0);
  } else {
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < n_seqs; ++b) attend(b);
  }

  // Row-parallel o_proj: partial sums over this rank's heads, then summed across the group.
  linear(attn, m, L.o, {}, proj);
  if (tp_ > 1) comm_.all_reduce_sum(proj, static_cast<std::size_t>(m) * H);
  if (!L.o_bias.empty())
    for (int t = 0; t < m; ++t)
      cpu::add_inplace(proj + static_cast<std::size_t>(t) * H, L.o_bias.data(), H);
  cpu::add_rmsnorm(x, proj, m, H, L.post_attention_norm.data, L.post_attention_norm.dtype,
                   config_.rms_norm_eps, xn);
}

void Transformer::mlp_block(int layer, int n) {
  const LayerWeights& L = weights_.layers[layer];
  const int H = config_.hidden_size, I = weights_.plan.intermediate;
  float* x = x_.data();
  float* xn = xn_.data();
  float* act = sized(act_, static_cast<std::size_t>(n) * I);
  float* proj = proj_.data();

  // silu(gate) * up in one pass over the paired gate/up weights (no gate and up in memory).
  cpu::MatmulOutput gate_up = output(L.gate_up, {}, act);
  gate_up.swiglu = true;
  cpu::matmul_multi(xn, n, &gate_up, 1);
  linear(act, n, L.down, {}, proj);
  if (tp_ > 1) comm_.all_reduce_sum(proj, static_cast<std::size_t>(n) * H);
  if (layer + 1 < config_.num_layers) {
    const WeightVector& norm = weights_.layers[layer + 1].input_norm;
    cpu::add_rmsnorm(x, proj, n, H, norm.data, norm.dtype, config_.rms_norm_eps, xn);
  } else {
    cpu::add_inplace(x, proj, static_cast<std::size_t>(n) * H);  // the final norm follows
  }
}

}  // namespace specrun
