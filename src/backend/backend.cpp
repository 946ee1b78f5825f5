#include "backend/backend.h"

#include <cstring>
#include <sstream>

#include "common/error.h"
#include "kernels/cpu/quant.h"

namespace specrun {

namespace {

float scale_value(const std::byte* p, DType dtype) {
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

}  // namespace

float dequantized(const HostTensor& t, int r, int c) {
  SPEC_CHECK(t.quantized() && r >= 0 && r < t.rows && c >= 0 && c < t.cols,
             "dequantized: not a quantized tensor or (" << r << ", " << c << ") outside it");
  const QuantFormat& f = t.quant;
  const std::size_t scale_at =
      static_cast<std::size_t>((r / f.block_rows) * quant_scale_cols(f, t.cols) + c / f.group);
  const float s = scale_value(t.scales + scale_at * dtype_size(f.scale_dtype), f.scale_dtype);
  const std::byte* row = t.data + static_cast<std::size_t>(r) * quant_row_bytes(f, t.cols);
  if (f.kind == QuantKind::kFp8E4M3) return e4m3_to_f32(static_cast<std::uint8_t>(row[c])) * s;
  std::int32_t word;
  const int per_word = f.kind == QuantKind::kInt4 ? 8 : 4;
  std::memcpy(&word, row + static_cast<std::size_t>(c / per_word) * 4, 4);
  const int q = f.kind == QuantKind::kInt4 ? unpack_signed<4>(&word, c % per_word)
                                           : unpack_signed<8>(&word, c % per_word);
  const int z = f.zero_points ? t.zeros[scale_at] : 0;
  return static_cast<float>(q - z) * s;
}

std::string describe_quantized(const HostTensor& t) {
  std::ostringstream os;
  const QuantFormat& f = t.quant;
  switch (f.kind) {
    case QuantKind::kNone:
      os << dtype_name(t.dtype);
      break;
    case QuantKind::kInt4:
    case QuantKind::kInt8:
      os << (f.kind == QuantKind::kInt4 ? "int4" : "int8") << " group " << f.group << " ("
         << dtype_name(f.scale_dtype) << " scales" << (f.zero_points ? ", zero points" : "") << ")";
      break;
    case QuantKind::kFp8E4M3:
      os << "fp8 e4m3 blocks " << f.block_rows << "x" << f.group;
      break;
  }
  os << " [" << t.rows << ", " << t.cols << "]";
  return os.str();
}

const char* backend_name(BackendKind kind) {
  return kind == BackendKind::kCuda ? "cuda" : "cpu";
}

bool cuda_backend_built() {
#ifdef SPECRUN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

BackendKind parse_backend(std::string_view name, std::string_view what) {
  SPEC_INPUT_CHECK(name == "cpu" || name == "cuda",
                   what << " = \"" << name << "\" is unknown: use \"cpu\" or \"cuda\"");
  if (name == "cpu") return BackendKind::kCpu;
  SPEC_INPUT_CHECK(cuda_backend_built(),
                   what << " = \"cuda\" but this specrun was built without CUDA: rebuild with "
                           "-DSPECRUN_CUDA=ON (needs nvcc and NCCL, see docs/gpu.md) or use "
                           "\"cpu\"");
  return BackendKind::kCuda;
}

}  // namespace specrun
