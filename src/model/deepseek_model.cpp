// The host-side preparation of MLA weights (deepseek_model.h explains what and why).
#include "model/deepseek_model.h"

#include <cstring>

namespace specrun {

namespace {

// Element i (row-major) of `t`; a quantized tensor's exact W' (backend.h dequantized).
float element(const HostTensor& t, std::size_t i) {
  if (t.quantized())
    return dequantized(t, static_cast<int>(i / static_cast<std::size_t>(t.cols)),
                       static_cast<int>(i % static_cast<std::size_t>(t.cols)));
  switch (t.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, t.data + i * sizeof(float), sizeof f);
      return f;
    }
    case DType::kBF16:
    case DType::kF16: {
      std::uint16_t bits;
      std::memcpy(&bits, t.data + i * 2, 2);
      return t.dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
  }
  return 0.0f;
}

// A float32 copy of `t` in `owned`, as a HostTensor of the same shape.
HostTensor to_f32(const HostTensor& t, std::vector<std::vector<float>>& owned) {
  std::vector<float>& copy = owned.emplace_back(static_cast<std::size_t>(t.rows) * t.cols);
  for (std::size_t i = 0; i < copy.size(); ++i) copy[i] = element(t, i);
  return HostTensor{reinterpret_cast<const std::byte*>(copy.data()), DType::kF32, t.rows, t.cols};
}

// Rows [first, first + dr) of a float32 copy: de-interleaved (row first + 2i -> first + i, row
// first + 2i + 1 -> first + dr/2 + i) when `interleaved`, and multiplied by `scale`.
void prepare_rope_rows(HostTensor& t, int first, int dr, bool interleaved, double scale) {
  float* data = reinterpret_cast<float*>(const_cast<std::byte*>(t.data));
  const std::size_t cols = static_cast<std::size_t>(t.cols);
  std::vector<float> rows(static_cast<std::size_t>(dr) * cols);
  for (int r = 0; r < dr; ++r) {
    const int from = !interleaved ? r : r < dr / 2 ? 2 * r : 2 * (r - dr / 2) + 1;
    const float* src = data + (static_cast<std::size_t>(first) + from) * cols;
    for (std::size_t c = 0; c < cols; ++c)
      rows[r * cols + c] = static_cast<float>(static_cast<double>(src[c]) * scale);
  }
  std::memcpy(data + static_cast<std::size_t>(first) * cols, rows.data(),
              rows.size() * sizeof(float));
}

}  // namespace

void prepare_mla(HostWeights& host, const ModelConfig& config,
                 std::vector<std::vector<float>>& owned) {
  const MlaConfig& m = config.mla;
  const int R = m.kv_lora_rank, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim;
  const int dv = m.v_head_dim, qk = m.qk_head_dim();
  const int heads = host.plan.q_heads;
  const double scale = config.rope_attention_scaling();
  // Every copy is made before any tensor points into `owned`: reserve so that it never moves.
  owned.reserve(owned.size() + static_cast<std::size_t>(config.num_layers) * (2 + 2 * heads));
  for (int layer = 0; layer < config.num_layers; ++layer) {
    std::array<HostTensor, kNumRoles>& w = host.layers[layer];
    // q's rope rows, per head, and kv_a's.
    HostTensor& q = w[static_cast<int>(m.q_lora_rank > 0 ? Role::kQB : Role::kQ)];
    q = to_f32(q, owned);
    for (int h = 0; h < heads; ++h) prepare_rope_rows(q, h * qk + dn, dr, m.rope_interleave, scale);
    HostTensor& kv_a = w[static_cast<int>(Role::kKvA)];
    kv_a = to_f32(kv_a, owned);
    prepare_rope_rows(kv_a, R, dr, m.rope_interleave, scale);
    // kv_b per head: [W_uk (dn rows) ; W_uv (dv rows)] x R columns.
    const HostTensor& kv_b = w[static_cast<int>(Role::kKvB)];
    std::vector<HostTensor>& key_absorb =
        host.experts[layer][static_cast<int>(Role::kMlaKeyAbsorb)];
    std::vector<HostTensor>& value_absorb =
        host.experts[layer][static_cast<int>(Role::kMlaValueAbsorb)];
    key_absorb.clear();
    value_absorb.clear();
    const std::size_t es = dtype_size(kv_b.dtype);
    for (int h = 0; h < heads; ++h) {
      const std::size_t first = static_cast<std::size_t>(h) * (dn + dv);
      // W_uk^T [R, dn], float32.
      std::vector<float>& t = owned.emplace_back(static_cast<std::size_t>(R) * dn);
      for (int i = 0; i < dn; ++i)
        for (int c = 0; c < R; ++c)
          t[static_cast<std::size_t>(c) * dn + i] = element(kv_b, (first + i) * R + c);
      key_absorb.push_back(
          HostTensor{reinterpret_cast<const std::byte*>(t.data()), DType::kF32, R, dn});
      // W_uv [dv, R]: a view of the checkpoint's rows; of a quantized kv_b, their exact W' in
      // float32 (a row range inside a scale block or a packed word is no view).
      if (!kv_b.quantized()) {
        value_absorb.push_back(HostTensor{kv_b.data + (first + dn) * R * es, kv_b.dtype, dv, R});
        continue;
      }
      std::vector<float>& v = owned.emplace_back(static_cast<std::size_t>(dv) * R);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = element(kv_b, (first + dn) * R + i);
      value_absorb.push_back(
          HostTensor{reinterpret_cast<const std::byte*>(v.data()), DType::kF32, dv, R});
    }
  }
}

std::vector<TensorSpec> mla_prepared_schema() {
  std::vector<TensorSpec> schema;
  for (const TensorSpec& s : deepseek_schema())
    if (s.role != Role::kKvB) schema.push_back(s);
  for (const TensorSpec& s : kMlaDerivedSchema) schema.push_back(s);
  return schema;
}

}  // namespace specrun
