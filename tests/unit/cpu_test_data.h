// Test data for the CPU op tests: random activations, weight matrices in a storage dtype (with
// the widened values the ops must use), and those matrices packed for cpu::matmul.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/ops.h"

namespace specrun::test {

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A weight matrix in `t`, plus the same values widened back to float32 (what the op must use).
struct Weights {
  std::vector<std::uint8_t> bytes;
  std::vector<float> widened;
};

inline Weights make_weights(const std::vector<float>& values, DType t) {
  Weights w;
  w.widened.resize(values.size());
  w.bytes.resize(values.size() * dtype_size(t));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &values[i], 4);
      w.widened[i] = values[i];
    } else {
      const std::uint16_t h = t == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
      w.widened[i] = t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return w;
}

struct OwnedPackedWeights {
  std::vector<std::uint8_t> bytes;
  cpu::PackedWeights view;
};

// w: [out, in] row-major in t.
inline OwnedPackedWeights pack(const void* w, DType t, int out, int in) {
  OwnedPackedWeights p;
  p.bytes.resize(cpu::packed_weight_bytes(t, out, in));
  cpu::pack_weights(w, t, out, in, p.bytes.data());
  p.view = {p.bytes.data(), t, out, in};
  return p;
}

}  // namespace specrun::test
