// Test helper: a row-major weight matrix packed for cpu::matmul, owning its bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/ops.h"

namespace specrun::test {

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
