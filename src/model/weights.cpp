#include "model/weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"
#include "model/model_config.h"

namespace specrun {

namespace {

void check_divides(int value, int tp, const char* field, const std::string& source) {
  SPEC_INPUT_CHECK(value % tp == 0, source << ": " << field << " = " << value
                                           << " is not divisible by tp = " << tp
                                           << ": choose a tensor-parallel size that "
                                              "divides it");
}

// Rows [row_begin, row_begin + n_rows) of a [rows, cols] tensor: a view, no copy.
WeightMatrix row_slice(const TensorView& t, std::int64_t row_begin, int n_rows) {
  WeightMatrix m;
  m.dtype = t.dtype;
  m.rows = n_rows;
  m.cols = static_cast<int>(t.dim(1));
  m.data = t.data + static_cast<std::size_t>(row_begin) * static_cast<std::size_t>(m.cols) *
                        dtype_size(t.dtype);
  return m;
}

// Columns [col_begin, col_begin + n_cols) of a [rows, cols] tensor: copied unless all columns.
WeightMatrix col_slice(const TensorView& t, std::int64_t col_begin, int n_cols) {
  if (col_begin == 0 && n_cols == t.dim(1)) return row_slice(t, 0, static_cast<int>(t.dim(0)));
  WeightMatrix m;
  m.dtype = t.dtype;
  m.rows = static_cast<int>(t.dim(0));
  m.cols = n_cols;
  const std::size_t es = dtype_size(t.dtype);
  const std::size_t out_row = static_cast<std::size_t>(n_cols) * es;
  const std::size_t in_row = static_cast<std::size_t>(t.dim(1)) * es;
  m.owned.resize(out_row * static_cast<std::size_t>(m.rows));
  for (int r = 0; r < m.rows; ++r)
    std::memcpy(m.owned.data() + out_row * r,
                t.data + in_row * r + static_cast<std::size_t>(col_begin) * es, out_row);
  m.data = m.owned.data();
  return m;
}

WeightVector vector_of(const TensorView& t) {
  return WeightVector{t.data, t.dtype, static_cast<int>(t.numel())};
}

std::vector<float> widen_slice(const TensorView& t, std::int64_t begin, int n) {
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) {
    const std::byte* p = t.data + static_cast<std::size_t>(begin + i) * dtype_size(t.dtype);
    if (t.dtype == DType::kF32) {
      std::memcpy(&out[i], p, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      out[i] = t.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return out;
}

}  // namespace

ShardPlan ShardPlan::make(const ModelConfig& c, int tp, int tp_rank, const std::string& source) {
  SPEC_INPUT_CHECK(tp >= 1, "tensor-parallel size must be at least 1, got " << tp);
  SPEC_CHECK(tp_rank >= 0 && tp_rank < tp, "tp rank " << tp_rank << " outside 0.." << tp - 1);
  check_divides(c.num_heads, tp, "num_attention_heads", source);
  if (tp <= c.num_kv_heads) {
    check_divides(c.num_kv_heads, tp, "num_key_value_heads", source);
  } else {
    SPEC_INPUT_CHECK(tp % c.num_kv_heads == 0,
                     source << ": num_key_value_heads = " << c.num_kv_heads
                            << " is smaller than tp = " << tp
                            << " and does not divide it, so kv heads cannot be replicated evenly: "
                               "choose a tp that divides or is a multiple of num_key_value_heads");
  }
  check_divides(c.intermediate_size, tp, "intermediate_size", source);
  check_divides(c.vocab_size, tp, "vocab_size", source);

  ShardPlan p;
  p.tp = tp;
  p.tp_rank = tp_rank;
  p.q_heads = c.num_heads / tp;
  p.q_head_begin = tp_rank * p.q_heads;
  const int group = c.num_heads / c.num_kv_heads;  // query heads per kv head
  p.kv_heads = std::max(1, c.num_kv_heads / tp);
  p.kv_head_begin = p.q_head_begin / group;
  p.intermediate = c.intermediate_size / tp;
  p.intermediate_begin = tp_rank * p.intermediate;
  p.vocab = c.vocab_size / tp;
  p.vocab_begin = tp_rank * p.vocab;
  return p;
}

ModelWeights ModelWeights::load(const Checkpoint& ckpt, int tp, int tp_rank) {
  const ModelConfig& c = ckpt.config();
  SPEC_INPUT_CHECK(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0,
                   "config.json: num_attention_heads = " << c.num_heads
                                                         << " is not a multiple of "
                                                            "num_key_value_heads = "
                                                         << c.num_kv_heads);
  ModelWeights w;
  w.plan =
      ShardPlan::make(c, tp, tp_rank, (std::filesystem::path(ckpt.dir()) / "config.json").string());
  const ShardPlan& p = w.plan;
  const std::int64_t H = c.hidden_size, hd = c.head_dim, I = c.intermediate_size;
  const std::int64_t q_out = static_cast<std::int64_t>(c.num_heads) * hd;
  const std::int64_t kv_out = static_cast<std::int64_t>(c.num_kv_heads) * hd;

  const TensorView& embed = ckpt.tensor("model.embed_tokens.weight", {c.vocab_size, H});
  w.embed = row_slice(embed, p.vocab_begin, p.vocab);
  if (c.tie_word_embeddings) {
    w.lm_head = row_slice(embed, p.vocab_begin, p.vocab);
  } else {
    w.lm_head = row_slice(ckpt.tensor("lm_head.weight", {c.vocab_size, H}), p.vocab_begin, p.vocab);
  }
  w.final_norm = vector_of(ckpt.tensor("model.norm.weight", {H}));

  w.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& L = w.layers[l];
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    auto t = [&](const std::string& name, std::vector<std::int64_t> shape) -> const TensorView& {
      return ckpt.tensor(pre + name, shape);
    };
    L.input_norm = vector_of(t("input_layernorm.weight", {H}));
    L.post_attention_norm = vector_of(t("post_attention_layernorm.weight", {H}));
    const std::int64_t q_row = p.q_head_begin * hd, kv_row = p.kv_head_begin * hd;
    const int q_rows = static_cast<int>(p.q_heads * hd),
              kv_rows = static_cast<int>(p.kv_heads * hd);
    L.q = row_slice(t("self_attn.q_proj.weight", {q_out, H}), q_row, q_rows);
    L.k = row_slice(t("self_attn.k_proj.weight", {kv_out, H}), kv_row, kv_rows);
    L.v = row_slice(t("self_attn.v_proj.weight", {kv_out, H}), kv_row, kv_rows);
    L.o = col_slice(t("self_attn.o_proj.weight", {H, q_out}), q_row, q_rows);
    if (c.qkv_bias) {
      L.q_bias = widen_slice(t("self_attn.q_proj.bias", {q_out}), q_row, q_rows);
      L.k_bias = widen_slice(t("self_attn.k_proj.bias", {kv_out}), kv_row, kv_rows);
      L.v_bias = widen_slice(t("self_attn.v_proj.bias", {kv_out}), kv_row, kv_rows);
    }
    if (c.o_bias) L.o_bias = widen_slice(t("self_attn.o_proj.bias", {H}), 0, static_cast<int>(H));
    L.gate = row_slice(t("mlp.gate_proj.weight", {I, H}), p.intermediate_begin, p.intermediate);
    L.up = row_slice(t("mlp.up_proj.weight", {I, H}), p.intermediate_begin, p.intermediate);
    L.down = col_slice(t("mlp.down_proj.weight", {H, I}), p.intermediate_begin, p.intermediate);
  }
  return w;
}

void ModelWeights::make_resident() {
  if (arena) return;
  std::vector<WeightMatrix*> packed_mats = {&lm_head};
  for (LayerWeights& L : layers)
    for (WeightMatrix* m : {&L.q, &L.k, &L.v, &L.o, &L.down}) packed_mats.push_back(m);
  constexpr std::size_t kAlign = 64;
  auto aligned = [](std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  // A tied lm_head (the same rows of the same memory) is packed once and the embedding reads
  // that copy (cpu::gather_rows_packed): no second copy of the vocabulary matrix.
  const bool tied = embed.data != nullptr && lm_head.data == embed.data &&
                    lm_head.rows == embed.rows && lm_head.cols == embed.cols &&
                    lm_head.dtype == embed.dtype;
  const std::size_t embed_bytes = tied ? 0
                                       : static_cast<std::size_t>(embed.rows) *
                                             static_cast<std::size_t>(embed.cols) *
                                             dtype_size(embed.dtype);
  std::size_t total = aligned(embed_bytes);
  for (const WeightMatrix* m : packed_mats)
    if (m->data != nullptr) total += aligned(cpu::packed_weight_bytes(m->dtype, m->rows, m->cols));
  for (const LayerWeights& L : layers) {
    SPEC_CHECK(L.gate.rows == L.up.rows && L.gate.cols == L.up.cols && L.gate.dtype == L.up.dtype,
               "gate_proj and up_proj differ in shape or dtype");
    total += aligned(2 * cpu::packed_weight_bytes(L.gate.dtype, L.gate.rows, L.gate.cols));
  }
  if (total == 0) return;
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  SPEC_CHECK(p != MAP_FAILED, "cannot allocate "
                                  << total / (1 << 20) << " MiB for the model weights: "
                                  << std::strerror(errno) << " (free memory or use more tp ranks)");
#ifdef MADV_HUGEPAGE
  ::madvise(p, total, MADV_HUGEPAGE);  // a hint: without huge pages it still works
#endif
  arena = std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                     [total](std::byte* q) { ::munmap(q, total); });
  // Each matrix is copied from its current memory, then points into the arena.
  std::byte* next = arena.get();
  if (embed.data != nullptr && !tied) {
    std::memcpy(next, embed.data, embed_bytes);
    embed.data = next;
    std::vector<std::byte>().swap(embed.owned);
    next += aligned(embed_bytes);
  }
  for (WeightMatrix* m : packed_mats) {
    if (m->data == nullptr) continue;
    cpu::pack_weights(m->data, m->dtype, m->rows, m->cols, next);
    m->data = next;
    m->packed = true;
    std::vector<std::byte>().swap(m->owned);
    next += aligned(cpu::packed_weight_bytes(m->dtype, m->rows, m->cols));
  }
  for (LayerWeights& L : layers) {
    cpu::pack_weight_pairs(L.gate.data, L.up.data, L.gate.dtype, L.gate.rows, L.gate.cols, next);
    L.gate_up.data = next;
    L.gate_up.dtype = L.gate.dtype;
    L.gate_up.rows = L.gate.rows;
    L.gate_up.cols = L.gate.cols;
    L.gate_up.packed = true;
    next += aligned(2 * cpu::packed_weight_bytes(L.gate.dtype, L.gate.rows, L.gate.cols));
    L.gate = WeightMatrix();
    L.up = WeightMatrix();
  }
  if (tied) {
    embed.data = lm_head.data;
    embed.packed = true;
    std::vector<std::byte>().swap(embed.owned);
  }
}

}  // namespace specrun
