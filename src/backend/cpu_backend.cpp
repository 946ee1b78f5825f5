#include "backend/cpu_backend.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backend/default_ops.h"  // the Fuses* concepts
#include "common/error.h"
#include "kernels/cpu/ops.h"

namespace specrun {

static_assert(Backend<CpuBackend>, "CpuBackend has every member the model graphs use");
// Its fused kernels; the other fused ops are their default compositions.
static_assert(FusesAddRmsnorm<CpuBackend> && FusesLinearMulti<CpuBackend> &&
                  FusesMoeExperts<CpuBackend>,
              "CpuBackend's add_rmsnorm, linear_multi and moe_experts are the ones fused:: calls");

namespace {

constexpr std::size_t kAlign = 64;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

cpu::PackedWeights packed(const CpuBackend::Weight& w) {
  SPEC_CHECK(w.layout != CpuBackend::Weight::Layout::kRowMajor,
             "weight matrix [" << w.rows << ", " << w.cols
                               << "] is not packed for the CPU kernels (prepare it as kLinear)");
  return {w.data, w.dtype, w.rows, w.cols, w.quant};
}

const float* bias_of(const CpuBackend::Weight* bias) {
  if (bias == nullptr) return nullptr;
  SPEC_CHECK(bias->dtype == DType::kF32, "biases are float32 on the CPU backend");
  return reinterpret_cast<const float*>(bias->data);
}

// Throws unless every staged sequence's block holds keys and values of these heads' widths.
void check_widths(std::span<const SeqSpan<CpuBackend::KvBlock>> seqs, const AttentionHeads& h,
                  const char* op) {
  for (const SeqSpan<CpuBackend::KvBlock>& s : seqs)
    SPEC_CHECK(s.kv->key_floats == h.key_floats() && s.kv->value_floats == h.value_floats(),
               op << ": a cache of " << s.kv->key_floats << " + " << s.kv->value_floats
                  << " floats per token for heads of " << h.key_floats() << " + "
                  << h.value_floats());
}

// cpu::attention of q's n_tokens over a cache's keys and values (heads.values_in_keys: the
// values are the first value_dim floats of the key rows) with the heads' softmax scale.
void attention_over(const AttentionHeads& heads, const float* q, int n_tokens, const float* keys,
                    const float* values, int start, float* out) {
  const std::int64_t k_stride = heads.key_floats();
  const float* v = heads.values_in_keys ? keys : values;
  const std::int64_t v_stride = heads.values_in_keys ? k_stride : heads.value_floats();
  cpu::attention_strided(q, n_tokens, heads.heads, heads.kv_heads, heads.key_dim, heads.value_dim,
                         keys, k_stride, v, v_stride, heads.softmax_scale(), start, out);
}

}  // namespace

CpuBackend::CpuBackend(int threads) : threads_(std::max(1, threads)) {}

namespace {

// A quantized HostTensor as the packing functions read it.
cpu::QuantMatrix quant_matrix(const HostTensor& t) {
  return {t.data, t.scales, t.zeros, t.quant, t.rows, t.cols};
}

}  // namespace

std::size_t CpuBackend::weight_bytes(const HostTensor& t, WeightUse use) const {
  SPEC_CHECK(!t.quantized() || use == WeightUse::kLinear || use == WeightUse::kGateUp,
             "a quantized " << describe_quantized(t) << " is only read as a linear weight");
  if (t.quantized())
    return aligned((use == WeightUse::kGateUp ? 2 : 1) *
                   cpu::packed_quant_bytes(t.quant, t.rows, t.cols));
  switch (use) {
    case WeightUse::kLinear:
      return aligned(cpu::packed_weight_bytes(t.dtype, t.rows, t.cols));
    case WeightUse::kGateUp:
      return aligned(2 * cpu::packed_weight_bytes(t.dtype, t.rows, t.cols));
    case WeightUse::kEmbedding:
    case WeightUse::kVector:
      return aligned(t.bytes());
  }
  return 0;
}

// Why one arena: pages of a mapped file can be evicted while a decoder waits (the kernel's
// reclaim sees them as page cache), and a 4 KiB-page mapping costs TLB misses on every pass;
// decode streams all weights per token, so both show up directly as lost bandwidth.
void CpuBackend::reserve_weights(std::size_t bytes) {
  SPEC_CHECK(!arena_, "reserve_weights called twice");
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  SPEC_CHECK(p != MAP_FAILED, "cannot allocate "
                                  << bytes / (1 << 20) << " MiB for the model weights: "
                                  << std::strerror(errno) << " (free memory or use more tp ranks)");
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without huge pages it still works
#endif
  arena_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                      [bytes](std::byte* q) { ::munmap(q, bytes); });
  arena_bytes_ = bytes;
}

std::byte* CpuBackend::carve(std::size_t bytes) {
  SPEC_CHECK(arena_used_ + aligned(bytes) <= arena_bytes_,
             "weight arena overflow: reserve_weights was given less than the weights need");
  std::byte* p = arena_.get() + arena_used_;
  arena_used_ += aligned(bytes);
  return p;
}

CpuBackend::Weight CpuBackend::prepare(const HostTensor& t, WeightUse use) {
  SPEC_CHECK(use != WeightUse::kGateUp, "gate/up weights are prepared with prepare_pair");
  SPEC_CHECK(!t.quantized() || use == WeightUse::kLinear,
             "a quantized " << describe_quantized(t) << " is only read as a linear weight");
  Weight w{nullptr, t.dtype, t.rows, t.cols, Weight::Layout::kRowMajor};
  if (t.quantized()) {
    std::byte* dst = carve(cpu::packed_quant_bytes(t.quant, t.rows, t.cols));
    cpu::pack_quantized(quant_matrix(t), dst);
    w.data = dst;
    w.layout = Weight::Layout::kPacked;
    w.quant = t.quant;
    return w;
  }
  if (use == WeightUse::kLinear) {
    std::byte* dst = carve(cpu::packed_weight_bytes(t.dtype, t.rows, t.cols));
    cpu::pack_weights(t.data, t.dtype, t.rows, t.cols, dst);
    w.data = dst;
    w.layout = Weight::Layout::kPacked;
  } else {
    std::byte* dst = carve(t.bytes());
    std::memcpy(dst, t.data, t.bytes());
    w.data = dst;
  }
  return w;
}

CpuBackend::Weight CpuBackend::prepare_pair(const HostTensor& gate, const HostTensor& up) {
  if (gate.quantized() || up.quantized()) {
    const QuantFormat &a = gate.quant, &b = up.quant;
    SPEC_INPUT_CHECK(a.kind == b.kind && a.group == b.group && a.block_rows == b.block_rows &&
                         a.scale_dtype == b.scale_dtype && a.zero_points == b.zero_points &&
                         gate.rows == up.rows && gate.cols == up.cols,
                     "gate_proj " << describe_quantized(gate) << " and up_proj "
                                  << describe_quantized(up)
                                  << " differ in format or shape: they are computed as one pair");
    std::byte* dst = carve(2 * cpu::packed_quant_bytes(a, gate.rows, gate.cols));
    cpu::pack_quantized_pairs(quant_matrix(gate), quant_matrix(up), dst);
    Weight w{dst, gate.dtype, gate.rows, gate.cols, Weight::Layout::kPackedPair};
    w.quant = a;
    return w;
  }
  SPEC_CHECK(gate.rows == up.rows && gate.cols == up.cols && gate.dtype == up.dtype,
             "gate_proj and up_proj differ in shape or dtype");
  std::byte* dst = carve(2 * cpu::packed_weight_bytes(gate.dtype, gate.rows, gate.cols));
  cpu::pack_weight_pairs(gate.data, up.data, gate.dtype, gate.rows, gate.cols, dst);
  return Weight{dst, gate.dtype, gate.rows, gate.cols, Weight::Layout::kPackedPair};
}

CpuBackend::Weight CpuBackend::prepare_tied(const Weight& lm_head) const {
  SPEC_CHECK(lm_head.layout == Weight::Layout::kPacked, "a tied embedding needs a packed lm_head");
  SPEC_CHECK(lm_head.quant.kind == QuantKind::kNone,
             "a tied embedding cannot gather rows of a quantized lm_head");
  return lm_head;  // gather_rows_packed reads the packed rows
}

CpuBackend::KvBlock CpuBackend::new_kv_block(const KvShape& shape, int capacity) const {
  SPEC_CHECK(capacity > 0, "KV cache capacity must be positive, got " << capacity);
  KvBlock b;
  b.capacity = capacity;
  b.key_floats = shape.key_floats;
  b.value_floats = shape.value_floats;
  b.data.resize(static_cast<std::size_t>(shape.layers) * static_cast<std::size_t>(capacity) *
                (static_cast<std::size_t>(shape.key_floats) + shape.value_floats));
  return b;
}

void CpuBackend::begin_forward(std::span<const SeqSpan<KvBlock>> seqs, const std::int32_t* tokens,
                               const std::int32_t* positions, int n) {
  omp_set_num_threads(threads_);
  seqs_.assign(seqs.begin(), seqs.end());
  tokens_ = tokens;
  positions_ = positions;
  n_ = n;
  last_rows_.resize(seqs.size());
  for (std::size_t b = 0; b < seqs.size(); ++b)
    last_rows_[b] = seqs[b].first_row + seqs[b].n_tokens - 1;
  // Keys and values straight into the cache only for one sequence without a tree (tree
  // attention rewrites slots of the tree region, so its rows stay in scratch until then).
  direct_kv_ = seqs.size() == 1 && !seqs.front().has_tree();
}

void CpuBackend::embed(const Weight& table, int vocab_begin, F x) {
  if (table.layout == Weight::Layout::kPacked)  // tied to lm_head: one packed copy serves both
    cpu::gather_rows_packed(packed(table), vocab_begin, tokens_, n_, x.get());
  else
    cpu::gather_rows(table.data, table.dtype, vocab_begin, table.rows, table.cols, tokens_, n_,
                     x.get());
}

void CpuBackend::rope_table(const Floats& inv_freq, int head_dim, F table) {
  cpu::rope_table(inv_freq.data(), head_dim, positions_, n_, table.get());
}

void CpuBackend::rope_apply(F x, int n, int heads, int head_dim, std::int64_t row_stride,
                            CF table) {
  cpu::rope_apply(x.get(), n, heads, head_dim, row_stride, table.get());
}

void CpuBackend::linear(CF x, int n, const Weight& w, const Weight* bias, F y) {
  cpu::matmul(x.get(), n, packed(w), bias_of(bias), y.get());
}

void CpuBackend::linear_multi(CF x, int n, std::span<const LinearOut> outs) {
  cpu::MatmulOutput out[4];
  SPEC_CHECK(outs.size() <= 4, "linear_multi takes at most 4 outputs");
  for (std::size_t i = 0; i < outs.size(); ++i)
    out[i] = cpu::MatmulOutput{packed(*outs[i].w), bias_of(outs[i].bias), outs[i].y.get()};
  cpu::matmul_multi(x.get(), n, out, static_cast<int>(outs.size()));
}

void CpuBackend::swiglu(CF x, int n, const Weight& gate_up, F y) {
  SPEC_CHECK(gate_up.layout == Weight::Layout::kPackedPair, "swiglu needs a gate/up pair");
  cpu::MatmulOutput out{packed(gate_up), nullptr, y.get()};
  out.swiglu = true;
  cpu::matmul_multi(x.get(), n, &out, 1);
}

void CpuBackend::rmsnorm(CF x, int n, int dim, const Weight& w, float eps, F y) {
  cpu::rmsnorm(x.get(), n, dim, w.data, w.dtype, eps, y.get());
}

void CpuBackend::add_rmsnorm(F x, CF delta, int n, int dim, const Weight& w, float eps, F y) {
  cpu::add_rmsnorm(x.get(), delta.get(), n, dim, w.data, w.dtype, eps, y.get());
}

void CpuBackend::add_inplace(F y, CF x, std::size_t n) {
  cpu::add_inplace(y.get(), x.get(), n);
}

void CpuBackend::add_bias(F y, const Weight& bias, int n, int dim) {
  const float* b = bias_of(&bias);
  for (int t = 0; t < n; ++t) cpu::add_inplace(y.get() + static_cast<std::size_t>(t) * dim, b, dim);
}

CpuBackend::KvRows CpuBackend::kv_rows(int layer, const AttentionHeads& heads) {
  check_widths(seqs_, heads, "kv_rows");
  const std::size_t key_floats = static_cast<std::size_t>(heads.key_floats());
  const std::size_t value_floats = static_cast<std::size_t>(heads.value_floats());
  if (direct_kv_) {
    // One sequence (prefill, decode, verify): straight to its place in the cache (same
    // [token, floats] layout).
    KvBlock& kv = *seqs_.front().kv;
    const std::size_t slot = static_cast<std::size_t>(seqs_.front().start);
    return {F(kv.keys(layer) + slot * key_floats), F(kv.values(layer) + slot * value_floats)};
  }
  k_rows_ = k_.grow(static_cast<std::size_t>(n_) * key_floats).get();
  v_rows_ = v_.grow(static_cast<std::size_t>(n_) * value_floats).get();
  return {F(k_rows_), F(v_rows_)};
}

void CpuBackend::attend(int layer, CF q, int m, bool last_only, F out,
                        const AttentionHeads& heads) {
  const std::size_t q_width = static_cast<std::size_t>(heads.q_width());
  const std::size_t out_width = static_cast<std::size_t>(heads.out_width());
  const std::size_t key_floats = static_cast<std::size_t>(heads.key_floats());
  const std::size_t value_floats = static_cast<std::size_t>(heads.value_floats());
  const int n_seqs = static_cast<int>(seqs_.size());
  SPEC_CHECK(m == (last_only ? n_seqs : n_), "attend: " << m << " query rows for a batch of "
                                                        << n_seqs << " sequences, " << n_
                                                        << " tokens");
  check_widths(seqs_, heads, "attend");  // here: a throw inside the parallel loop would abort
  SPEC_CHECK(!heads.values_in_keys || (heads.kv_heads == 1 && heads.value_dim <= heads.key_dim),
             "attend: values inside the keys need one kv head and value_dim <= key_dim, got "
                 << heads.kv_heads << " kv heads, " << heads.value_dim << " <= " << heads.key_dim);
  // Sequences are independent: several of them (batched decode) run on different threads, each
  // attention call then single-threaded; one long sequence (prefill) splits its (token, head)
  // pairs instead.
  auto one = [&](int b) {
    const SeqSpan<KvBlock>& s = seqs_[b];
    if (s.has_tree()) {
      attend_tree(layer, s, q, last_only ? b : -1, out, heads);
      return;
    }
    KvBlock& kv = *s.kv;
    const std::size_t off = static_cast<std::size_t>(s.first_row);
    if (!direct_kv_) {
      const std::size_t start = static_cast<std::size_t>(s.start);
      const std::size_t tokens = static_cast<std::size_t>(s.n_tokens);
      std::memcpy(kv.keys(layer) + start * key_floats, k_rows_ + off * key_floats,
                  tokens * key_floats * sizeof(float));
      std::memcpy(kv.values(layer) + start * value_floats, v_rows_ + off * value_floats,
                  tokens * value_floats * sizeof(float));
    }
    // last_only: one query, the last token's, at row b.
    const std::size_t row = last_only ? static_cast<std::size_t>(b) : off;
    attention_over(heads, q.get() + row * q_width, last_only ? 1 : s.n_tokens, kv.keys(layer),
                   kv.values(layer), last_only ? s.start + s.n_tokens - 1 : s.start,
                   out.get() + row * out_width);
  };
  if (n_seqs == 1) {
    one(0);
  } else {
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < n_seqs; ++b) one(b);
  }
}

// Tree attention by paths: a node's keys are the chain's (slots [0, tree_base)) followed by its
// ancestors' and its own at positions tree_base, tree_base + 1, ... For each query node the
// path's rows are copied into exactly those cache slots and the node attends like a chain token
// at its position (cpu::attention over slots 0..position). The keys it sees are then bitwise the
// ones a sequential decode of the path would have, in the same order, so its output is bitwise
// that decode's (attention's result does not depend on the window). The tree region's rows are
// kept aside meanwhile and written back in slot order at the end.
void CpuBackend::attend_tree(int layer, const SeqSpan<KvBlock>& s, CF q, int last_row, F out,
                             const AttentionHeads& heads) {
  KvBlock& kv = *s.kv;
  const std::size_t kw = static_cast<std::size_t>(heads.key_floats());
  const std::size_t vw = static_cast<std::size_t>(heads.value_floats());
  const std::size_t q_width = static_cast<std::size_t>(heads.q_width());
  const std::size_t out_width = static_cast<std::size_t>(heads.out_width());
  const std::size_t off = static_cast<std::size_t>(s.first_row);
  float* keys = kv.keys(layer);
  float* values = kv.values(layer);
  const int end = s.start + s.n_tokens;
  auto attention = [&](std::size_t q_row, int n_tokens, int start, std::size_t out_row) {
    attention_over(heads, q.get() + q_row * q_width, n_tokens, keys, values, start,
                   out.get() + out_row * out_width);
  };
  // Chain tokens of this call come first: appended and attended as a chain.
  const int n_chain = std::max(0, s.tree_base - s.start);
  if (n_chain > 0) {
    std::memcpy(keys + static_cast<std::size_t>(s.start) * kw, k_rows_ + off * kw,
                n_chain * kw * sizeof(float));
    std::memcpy(values + static_cast<std::size_t>(s.start) * vw, v_rows_ + off * vw,
                n_chain * vw * sizeof(float));
    if (last_row < 0) attention(off, n_chain, s.start, off);
  }
  // The whole region's rows, in slot order: earlier calls' nodes from the cache, this call's
  // from scratch.
  const int region = end - s.tree_base;
  static thread_local std::vector<float> tk, tv;
  static thread_local std::vector<int> path;
  if (tk.size() < static_cast<std::size_t>(region) * kw)
    tk.resize(static_cast<std::size_t>(region) * kw);
  if (tv.size() < static_cast<std::size_t>(region) * vw)
    tv.resize(static_cast<std::size_t>(region) * vw);
  for (int slot = s.tree_base; slot < end; ++slot) {
    const std::size_t r = static_cast<std::size_t>(slot - s.tree_base);
    const bool fresh = slot >= s.start;
    const std::size_t from = fresh ? off + (slot - s.start) : static_cast<std::size_t>(slot);
    std::memcpy(tk.data() + r * kw, (fresh ? k_rows_ : keys) + from * kw, kw * sizeof(float));
    std::memcpy(tv.data() + r * vw, (fresh ? v_rows_ : values) + from * vw, vw * sizeof(float));
  }
  const int first_node = std::max(s.start, s.tree_base);
  for (int slot = first_node; slot < end; ++slot) {
    const int i = slot - s.start;  // token of this call
    if (last_row >= 0 && i != s.n_tokens - 1) continue;
    path.clear();
    for (int at = slot; at >= s.tree_base; at = s.tree_parents[at - s.tree_base])
      path.push_back(at - s.tree_base);
    const int depth = static_cast<int>(path.size()) - 1;
    for (int j = 0; j <= depth; ++j) {
      const std::size_t from = static_cast<std::size_t>(path[depth - j]);
      const std::size_t to = static_cast<std::size_t>(s.tree_base + j);
      std::memcpy(keys + to * kw, tk.data() + from * kw, kw * sizeof(float));
      std::memcpy(values + to * vw, tv.data() + from * vw, vw * sizeof(float));
    }
    const std::size_t row = last_row >= 0 ? static_cast<std::size_t>(last_row) : off + i;
    attention(row, 1, s.tree_base + depth, row);
  }
  std::memcpy(keys + static_cast<std::size_t>(s.tree_base) * kw, tk.data(),
              static_cast<std::size_t>(region) * kw * sizeof(float));
  std::memcpy(values + static_cast<std::size_t>(s.tree_base) * vw, tv.data(),
              static_cast<std::size_t>(region) * vw * sizeof(float));
}

void CpuBackend::kv_keep(KvBlock& kv, int layers, int first, std::span<const int> rows) const {
  for (int layer = 0; layer < layers; ++layer)
    for (int which : {0, 1}) {
      float* base = which == 0 ? kv.keys(layer) : kv.values(layer);
      const std::size_t w = static_cast<std::size_t>(kv.floats(which));
      for (std::size_t j = 0; j < rows.size(); ++j)  // rows ascending, rows[j] >= j: no overlap
        if (rows[j] != static_cast<int>(j))
          std::memcpy(base + (first + j) * w, base + (first + rows[j]) * w, w * sizeof(float));
    }
}

void CpuBackend::keep_last_rows(F a, std::size_t width) {
  // last_rows_ ascending and last[b] >= b: rows only move towards the front, so no row is
  // overwritten before it is read.
  for (std::size_t b = 0; b < last_rows_.size(); ++b)
    if (last_rows_[b] != static_cast<int>(b))
      std::memcpy(a.get() + width * b, a.get() + width * static_cast<std::size_t>(last_rows_[b]),
                  width * sizeof(float));
}

void CpuBackend::gather_rows(CF src, std::size_t width, std::span<const int> rows, F dst) {
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst.get() + i * width, src.get() + static_cast<std::size_t>(rows[i]) * width,
                width * sizeof(float));
}

void CpuBackend::copy_rows(F dst, std::size_t dst_stride, CF src, std::size_t src_stride, int rows,
                           std::size_t width) {
  for (int r = 0; r < rows; ++r)
    std::memcpy(dst.get() + r * dst_stride, src.get() + r * src_stride, width * sizeof(float));
}

void CpuBackend::moe_experts(CF xn, int n, int dim, std::span<const Weight> gate_up,
                             std::span<const Weight> down, const ExpertGroups& g, F xg, F act, F ye,
                             F out) {
  if (g.pairs() > 0) gather_rows(xn, static_cast<std::size_t>(dim), g.token, xg);
  // The SwiGLU of every expert with tokens, then their down projections: one region each.
  for (int stage = 0; stage < 2; ++stage) {
    expert_groups_.clear();
    for (int e = 0; e < g.local_experts(); ++e) {
      const int first = g.first[e], m = g.first[e + 1] - first;
      if (m == 0) continue;
      const std::size_t width = static_cast<std::size_t>(gate_up[e].rows);
      const std::size_t rows = static_cast<std::size_t>(first);
      if (stage == 0) {
        SPEC_CHECK(gate_up[e].layout == Weight::Layout::kPackedPair,
                   "moe_experts needs gate/up pairs");
        cpu::MatmulOutput o{packed(gate_up[e]), nullptr, act.get() + rows * width};
        o.swiglu = true;
        expert_groups_.push_back({xg.get() + rows * dim, m, o});
      } else {
        expert_groups_.push_back(
            {act.get() + rows * width, m, {packed(down[e]), nullptr, ye.get() + rows * dim}});
      }
    }
    if (!expert_groups_.empty())
      cpu::matmul_grouped(expert_groups_.data(), static_cast<int>(expert_groups_.size()));
  }
  combine_rows(out, n, static_cast<std::size_t>(dim), ye, g.token_first, g.by_token, g.weight);
}

void CpuBackend::combine_rows(F y, int rows, std::size_t width, CF x, std::span<const int> first,
                              std::span<const int> src, std::span<const float> scale) {
  SPEC_CHECK(first.size() == static_cast<std::size_t>(rows) + 1 &&
                 src.size() == static_cast<std::size_t>(first[rows]) && scale.size() == src.size(),
             "combine_rows: " << first.size() << " row offsets for " << rows << " rows, "
                              << src.size() << " sources, " << scale.size() << " scales");
  cpu::combine_rows(y.get(), rows, width, x.get(), first.data(), src.data(), scale.data());
}

void CpuBackend::unshard_vocab(CF gathered, int rows, int tp, int v_local, F out) {
  const std::size_t local = static_cast<std::size_t>(rows) * v_local;
  const std::size_t V = static_cast<std::size_t>(tp) * v_local;
  for (int r = 0; r < tp; ++r)
    for (int t = 0; t < rows; ++t)
      std::memcpy(
          out.get() + static_cast<std::size_t>(t) * V + static_cast<std::size_t>(r) * v_local,
          gathered.get() + r * local + static_cast<std::size_t>(t) * v_local,
          sizeof(float) * v_local);
}

void CpuBackend::read(CF src, std::size_t count, float* host) const {
  std::memcpy(host, src.get(), count * sizeof(float));
}

void CpuBackend::read_kv(KvBlock& kv, int layer, int which, int rows, float* host) const {
  const float* p = which == 0 ? kv.keys(layer) : kv.values(layer);
  std::memcpy(host, p, static_cast<std::size_t>(rows) * kv.floats(which) * sizeof(float));
}

}  // namespace specrun
