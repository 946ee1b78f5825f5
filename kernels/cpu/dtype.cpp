#include "kernels/cpu/dtype.h"

namespace specrun {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

float f16_to_f32(std::uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

std::uint16_t f32_to_f16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  std::uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

}  // namespace specrun
