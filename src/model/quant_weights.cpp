#include "model/quant_weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "model/checkpoint.h"

namespace specrun {

namespace {

constexpr std::string_view kWeight = ".weight";

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string config_path(const Checkpoint& ckpt) {
  return (std::filesystem::path(ckpt.dir()) / "config.json").string();
}

// "tensor 'NAME' in FILE" (or "in the checkpoint in DIR" when absent).
std::string where(const Checkpoint& ckpt, const std::string& name) {
  return "tensor '" + name + "' in " +
         (ckpt.has(name) ? ckpt.file_of(name).path() : "the checkpoint in " + ckpt.dir());
}

std::string kind_text(const QuantDecision& d) {
  if (d.kind == QuantKind::kFp8E4M3) return "fp8 e4m3 (M.weight F8_E4M3 with M.weight_scale_inv)";
  return std::string(quant_kind_name(d.kind)) +
         " (packed: M.weight_packed, M.weight_scale, M.weight_shape)";
}

}  // namespace

bool fp8_float_by_convention(const TensorSpec& spec, const std::string& module) {
  return spec.role == Role::kLmHead || ends_with(module, "eh_proj") ||
         ends_with(module, "shared_head.head");
}

std::string quant_module_name(const ModelConfig& c, const std::string& tensor) {
  if (!ends_with(tensor, kWeight)) return {};
  std::string module = tensor.substr(0, tensor.size() - kWeight.size());
  if (!c.tensor_prefix.empty() && module.rfind(c.tensor_prefix, 0) == 0)
    module = module.substr(c.tensor_prefix.size());
  return module;
}

QuantDecision resolve_storage(const Checkpoint& ckpt, const TensorSpec& spec,
                              const std::string& tensor, ModuleClass cls, bool tied_head) {
  const ModelConfig& c = ckpt.config();
  const std::string module = quant_module_name(c, tensor);
  if (module.empty()) return {};  // a bias: float, as before
  const std::string m = tensor.substr(0, tensor.size() - kWeight.size());  // as the file names it
  QuantDecision d;
  if (c.quant.quantized())
    d = c.quant.decide(module, cls);
  else
    d.why = "quantization_config (absent from config.json)";
  const std::string cfg = config_path(ckpt);
  if (tied_head && c.quant.method == QuantMethod::kCompressedTensors) {
    const QuantDecision head = c.quant.decide("lm_head", ModuleClass::kLinear);
    SPEC_INPUT_CHECK(head.kind == QuantKind::kNone,
                     cfg << ": tie_word_embeddings is true, so lm_head is read from " << tensor
                         << ", but " << head.why << " makes lm_head " << quant_kind_name(head.kind)
                         << ": a quantized tied head is not supported (add \"lm_head\" to "
                            "quantization_config.ignore if the file's head is float)");
  }
  const bool packed = ckpt.has(m + ".weight_packed");
  const bool weight = ckpt.has(tensor);
  const std::string dtype = weight ? ckpt.file_of(tensor).dtype_of(tensor) : "";
  const bool fp8 = dtype == "F8_E4M3";
  SPEC_INPUT_CHECK(!ckpt.has(m + ".weight_g_idx"),
                   where(ckpt, m + ".weight_g_idx")
                       << ": activation reordering (quantization_config.config_groups.*.weights."
                          "actorder \"group\" or \"dynamic\") stores a column permutation "
                          "specrun does not apply; requantize with actorder null or \"weight\"");
  SPEC_INPUT_CHECK(!(packed && weight),
                   where(ckpt, tensor) << " and " << m << ".weight_packed both hold module "
                                       << module << ": one module stored twice (" << d.why << ")");
  if (cls != ModuleClass::kLinear) {  // embeddings, norms, DeepSeek's router: float only
    SPEC_INPUT_CHECK(d.kind == QuantKind::kNone,
                     where(ckpt, packed ? m + ".weight_packed" : tensor)
                         << ": module " << module << " is not a Linear, but " << d.why
                         << " makes it " << quant_kind_name(d.kind)
                         << ": only Linear weights are read quantized (embeddings, norms and "
                            "routers as float); exclude it in "
                         << cfg);
    SPEC_INPUT_CHECK(!packed && !fp8, where(ckpt, packed ? m + ".weight_packed" : tensor)
                                          << " is quantized, but module " << module
                                          << " is not a Linear: only Linear weights are read "
                                             "quantized (embeddings, norms and routers as float)");
    return d;
  }
  if (d.kind == QuantKind::kNone) {
    SPEC_INPUT_CHECK(!packed, where(ckpt, m + ".weight_packed")
                                  << " is packed, but " << d.why << " leaves module " << module
                                  << " unquantized (" << cfg
                                  << "): the file and its quantization_config disagree");
    SPEC_INPUT_CHECK(!fp8, where(ckpt, tensor) << " is F8_E4M3, but " << d.why << " leaves module "
                                               << module << " unquantized (" << cfg
                                               << "): the file and its quantization_config "
                                                  "disagree");
    for (const char* scale : {".weight_scale", ".weight_scale_inv", ".weight_zero_point"})
      SPEC_INPUT_CHECK(!ckpt.has(m + scale), where(ckpt, m + scale)
                                                 << " is a quantization scale, but " << d.why
                                                 << " leaves module " << module << " unquantized ("
                                                 << cfg
                                                 << "): its float weight would be read without it");
    return d;
  }
  if (d.kind == QuantKind::kFp8E4M3) {
    SPEC_INPUT_CHECK(!packed, where(ckpt, m + ".weight_packed")
                                  << " is compressed-tensors packed, but quantization_config."
                                     "quant_method is \"fp8\" ("
                                  << cfg << ")");
    SPEC_INPUT_CHECK(weight, where(ckpt, tensor) << " is missing: " << d.why << " makes module "
                                                 << module << " " << kind_text(d));
    if (fp8) return d;
    SPEC_INPUT_CHECK(dtype == "F32" || dtype == "BF16" || dtype == "F16",
                     where(ckpt, tensor) << " has dtype " << dtype << ", but " << d.why
                                         << " makes module " << module << " " << kind_text(d));
    SPEC_INPUT_CHECK(fp8_float_by_convention(spec, module),
                     where(ckpt, tensor)
                         << " is " << dtype << ", but " << d.why << " makes module " << module
                         << " " << kind_text(d)
                         << " and no quantization_config.modules_to_not_convert / ignored_layers "
                            "entry matches it ("
                         << cfg << ")");
    SPEC_INPUT_CHECK(!ckpt.has(m + ".weight_scale_inv"),
                     where(ckpt, m + ".weight_scale_inv")
                         << " scales a " << dtype << " weight: module " << module
                         << " is float by DeepSeek-V3's convention (lm_head, eh_proj, "
                            "shared_head.head), so the file and "
                         << d.why << " disagree");
    d.kind = QuantKind::kNone;
    d.why = "float by DeepSeek-V3's convention (lm_head, eh_proj, shared_head.head)";
    return d;
  }
  // int4 / int8
  SPEC_INPUT_CHECK(!(weight && !packed),
                   where(ckpt, tensor)
                       << " is " << dtype << ", but " << d.why << " makes module " << module << " "
                       << kind_text(d) << " and no quantization_config.ignore entry matches it ("
                       << cfg << ")");
  SPEC_INPUT_CHECK(packed, where(ckpt, m + ".weight_packed")
                               << " is missing: " << d.why << " makes module " << module << " "
                               << kind_text(d));
  return d;
}

namespace {

// The float tensor `name` (a scale) checked to exist with a float dtype in `allowed` and shape
// `shape`; `field`: the config field that implies them.
const TensorView& scale_tensor(const Checkpoint& ckpt, const std::string& name,
                               const std::vector<std::int64_t>& shape, bool f32_only,
                               const std::string& field) {
  SPEC_INPUT_CHECK(ckpt.has(name), where(ckpt, name) << " is missing (" << field << ")");
  const std::string dtype = ckpt.file_of(name).dtype_of(name);
  SPEC_INPUT_CHECK(dtype == "F32" || (!f32_only && (dtype == "BF16" || dtype == "F16")),
                   where(ckpt, name)
                       << " has dtype " << dtype << ", expected "
                       << (f32_only ? "F32" : "BF16, F16 or F32") << " (" << field << ")");
  const TensorView& t = ckpt.file_of(name).get(name);
  SPEC_INPUT_CHECK(t.shape == shape, where(ckpt, name)
                                         << " has shape " << shape_text(t.shape) << ", expected "
                                         << shape_text(shape) << " (" << field << ")");
  return t;
}

// A non-float tensor of dtype `dtype` and shape `shape`.
const TensorView& other_tensor(const Checkpoint& ckpt, const std::string& name,
                               const std::string& dtype, const std::vector<std::int64_t>& shape,
                               const std::string& field) {
  SPEC_INPUT_CHECK(ckpt.has(name), where(ckpt, name) << " is missing (" << field << ")");
  const std::string found = ckpt.file_of(name).dtype_of(name);
  SPEC_INPUT_CHECK(found == dtype, where(ckpt, name) << " has dtype " << found << ", expected "
                                                     << dtype << " (" << field << ")");
  const TensorView& t = ckpt.file_of(name).get_other(name, dtype);
  SPEC_INPUT_CHECK(t.shape == shape, where(ckpt, name)
                                         << " has shape " << shape_text(t.shape) << ", expected "
                                         << shape_text(shape) << " (" << field << ")");
  return t;
}

// compressed-tensors' weight_shape [rows, cols] (I32 or I64: writers differ) equal to `shape`.
void check_weight_shape(const Checkpoint& ckpt, const std::string& name,
                        const std::vector<std::int64_t>& shape, const std::string& why,
                        const std::string& field) {
  SPEC_INPUT_CHECK(ckpt.has(name), where(ckpt, name) << " is missing (" << field << ")");
  const std::string dtype = ckpt.file_of(name).dtype_of(name);
  SPEC_INPUT_CHECK(dtype == "I32" || dtype == "I64",
                   where(ckpt, name) << " has dtype " << dtype << ", expected I32 or I64");
  const TensorView& t = ckpt.file_of(name).get_other(name, dtype);
  SPEC_INPUT_CHECK(t.shape == std::vector<std::int64_t>{2},
                   where(ckpt, name) << " has shape " << shape_text(t.shape) << ", expected [2]");
  std::vector<std::int64_t> values(2);
  for (int i = 0; i < 2; ++i) {
    if (dtype == "I64") {
      std::memcpy(&values[i], t.data + 8 * i, 8);
    } else {
      std::int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      values[i] = v;
    }
  }
  SPEC_INPUT_CHECK(values == shape, where(ckpt, name)
                                        << " says " << shape_text(values) << ", expected "
                                        << shape_text(shape) << " from config.json " << why
                                        << ": the weights do not match config.json");
}

// The signed zero points [rows, groups] of an asymmetric module: I32 [ceil(rows / per word),
// groups] packed along rows with the +2^(bits-1) offset (current writers), or I8 [rows, groups]
// holding the signed values (writers before compressed-tensors #296).
std::vector<std::int8_t> zero_points(const Checkpoint& ckpt, const std::string& name, int bits,
                                     std::int64_t rows, std::int64_t groups,
                                     const std::string& field) {
  SPEC_INPUT_CHECK(ckpt.has(name), where(ckpt, name) << " is missing (" << field << ")");
  const std::string dtype = ckpt.file_of(name).dtype_of(name);
  const int per_word = 32 / bits;
  std::vector<std::int8_t> out(static_cast<std::size_t>(rows * groups));
  if (dtype == "I8") {
    const TensorView& t = other_tensor(ckpt, name, "I8", {rows, groups}, field);
    std::memcpy(out.data(), t.data, out.size());
  } else {
    const TensorView& t =
        other_tensor(ckpt, name, "I32", {(rows + per_word - 1) / per_word, groups}, field);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t g = 0; g < groups; ++g) {
        std::int32_t word;
        std::memcpy(&word, t.data + ((r / per_word) * groups + g) * 4, 4);
        const int z = bits == 4 ? unpack_signed<4>(&word, static_cast<int>(r % per_word))
                                : unpack_signed<8>(&word, static_cast<int>(r % per_word));
        out[static_cast<std::size_t>(r * groups + g)] = static_cast<std::int8_t>(z);
      }
  }
  const int lo = -(1 << (bits - 1)), hi = (1 << (bits - 1)) - 1;
  for (std::size_t i = 0; i < out.size(); ++i)
    SPEC_INPUT_CHECK(out[i] >= lo && out[i] <= hi,
                     where(ckpt, name) << ": zero point " << int{out[i]} << " at (row "
                                       << static_cast<std::int64_t>(i) / groups << ", group "
                                       << static_cast<std::int64_t>(i) % groups << ") is outside ["
                                       << lo << ", " << hi << "] (" << field << ")");
  return out;
}

// Columns [first, first + width) (bytes) of `rows` rows of `stride` bytes, copied into `owned`.
const std::byte* copy_cols(const std::byte* src, std::int64_t rows, std::size_t stride,
                           std::size_t first, std::size_t width,
                           std::vector<std::vector<std::byte>>& owned) {
  std::vector<std::byte> copy(static_cast<std::size_t>(rows) * width);
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(copy.data() + static_cast<std::size_t>(r) * width,
                src + static_cast<std::size_t>(r) * stride + first, width);
  owned.push_back(std::move(copy));
  return owned.back().data();
}

// Refuses fp8 NaN codes and non-finite scales in the shard `h`.
void check_finite(const Checkpoint& ckpt, const std::string& m, const HostTensor& h) {
  const QuantFormat& f = h.quant;
  const std::size_t rb = quant_row_bytes(f, h.cols);
  if (f.kind == QuantKind::kFp8E4M3)
    for (int r = 0; r < h.rows; ++r)
      for (int c = 0; c < h.cols; ++c)
        SPEC_INPUT_CHECK(!e4m3_is_nan(static_cast<std::uint8_t>(h.data[r * rb + c])),
                         where(ckpt, m + ".weight")
                             << " holds a NaN code (0x7F or 0xFF) at the shard's (row " << r
                             << ", col " << c << "): a NaN weight is never legitimate");
  const std::int64_t n = quant_scale_rows(f, h.rows) * quant_scale_cols(f, h.cols);
  const std::size_t ss = dtype_size(f.scale_dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    float s;
    if (f.scale_dtype == DType::kF32) {
      std::memcpy(&s, h.scales + i * ss, 4);
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, h.scales + i * ss, 2);
      s = f.scale_dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
    SPEC_INPUT_CHECK(
        std::isfinite(s),
        where(ckpt, m + (f.kind == QuantKind::kFp8E4M3 ? ".weight_scale_inv" : ".weight_scale"))
            << " holds a non-finite scale " << s << " at the shard's index " << i);
  }
}

}  // namespace

HostTensor load_quantized(const Checkpoint& ckpt, const std::string& tensor, const QuantDecision& d,
                          const std::vector<std::int64_t>& shape, const std::string& why,
                          Split split, std::int64_t begin, std::int64_t count, int tp,
                          std::vector<std::vector<std::byte>>& owned) {
  const ModelConfig& c = ckpt.config();
  SPEC_CHECK(shape.size() == 2 && d.kind != QuantKind::kNone, "load_quantized: not a matrix");
  const std::string m = tensor.substr(0, tensor.size() - kWeight.size());
  const std::int64_t rows = shape[0], cols = shape[1];
  HostTensor h;
  h.rows = static_cast<int>(rows);
  h.cols = static_cast<int>(cols);
  QuantFormat& f = h.quant;
  f.kind = d.kind;
  std::string group_field;  // the config field that sets the scale groups, for messages
  bool channel = false;
  std::vector<std::int8_t> zeros;
  if (d.kind == QuantKind::kFp8E4M3) {
    f.block_rows = c.quant.block_rows;
    f.group = c.quant.block_cols;
    f.scale_dtype = DType::kF32;
    group_field = "quantization_config.weight_block_size [" + std::to_string(f.block_rows) + ", " +
                  std::to_string(f.group) + "]";
    const TensorView& w = other_tensor(ckpt, tensor, "F8_E4M3", shape, "config.json " + why);
    const TensorView& s =
        scale_tensor(ckpt, m + ".weight_scale_inv",
                     {quant_scale_rows(f, rows), quant_scale_cols(f, cols)}, true, group_field);
    h.data = w.data;
    h.scales = s.data;
  } else {
    const QuantGroup& g = *d.group;
    const std::string weights = "quantization_config.config_groups." + g.name + ".weights";
    const int per_word = 32 / g.bits;
    channel = g.channel;
    f.group = g.channel ? static_cast<int>(cols) : g.group_size;
    f.zero_points = !g.symmetric;
    group_field = weights + (g.channel ? ".strategy \"channel\""
                                       : ".group_size " + std::to_string(g.group_size));
    check_weight_shape(ckpt, m + ".weight_shape", shape, why, weights);
    const TensorView& w =
        other_tensor(ckpt, m + ".weight_packed", "I32", {rows, (cols + per_word - 1) / per_word},
                     weights + ".num_bits " + std::to_string(g.bits) + ", " + "config.json " + why);
    const std::int64_t groups = quant_scale_cols(f, cols);
    const TensorView& s =
        scale_tensor(ckpt, m + ".weight_scale", {rows, groups}, false, group_field);
    f.scale_dtype = s.dtype;
    h.data = w.data;
    h.scales = s.data;
    SPEC_INPUT_CHECK(!g.symmetric || !ckpt.has(m + ".weight_zero_point"),
                     where(ckpt, m + ".weight_zero_point")
                         << " is present, but " << weights << ".symmetric is true");
    if (!g.symmetric) {
      zeros = zero_points(ckpt, m + ".weight_zero_point", g.bits, rows, groups,
                          weights + ".symmetric false");
      owned.emplace_back(zeros.size());
      std::memcpy(owned.back().data(), zeros.data(), zeros.size());
      h.zeros = reinterpret_cast<const std::int8_t*>(owned.back().data());
    }
  }
  h.dtype = f.scale_dtype;
  const std::size_t rb = quant_row_bytes(f, cols);
  const std::size_t ss = dtype_size(f.scale_dtype);
  const std::int64_t sc = quant_scale_cols(f, cols);
  // The tensor that holds the codes, for the shard refusals (fp8: M.weight itself).
  const std::string data = d.kind == QuantKind::kFp8E4M3 ? tensor : m + ".weight_packed";
  if (split == Split::kRows && count != rows) {
    SPEC_INPUT_CHECK(begin % f.block_rows == 0,
                     where(ckpt, data)
                         << ": tp = " << tp << " starts a rank's rows at row " << begin
                         << ", inside a block of " << f.block_rows << " rows (" << group_field
                         << "): choose a tp whose row shard is a multiple of " << f.block_rows);
    h.data += static_cast<std::size_t>(begin) * rb;
    h.scales += static_cast<std::size_t>(begin / f.block_rows * sc) * ss;
    if (h.zeros != nullptr) h.zeros += begin * sc;
    h.rows = static_cast<int>(count);
  } else if (split == Split::kCols && count != cols) {
    const int per_word = f.kind == QuantKind::kInt4 ? 8 : f.kind == QuantKind::kInt8 ? 4 : 1;
    const std::int64_t align = channel ? per_word : f.group;
    SPEC_INPUT_CHECK(begin % align == 0,
                     where(ckpt, data)
                         << ": tp = " << tp << " starts a rank's columns at column " << begin
                         << ", inside a scale group of " << align << " inputs (" << group_field
                         << "): a group cannot straddle two ranks; choose a tp whose column "
                            "shard is a multiple of "
                         << align);
    QuantFormat shard = f;
    if (channel) shard.group = static_cast<int>(count);
    const std::size_t first = f.kind == QuantKind::kFp8E4M3
                                  ? static_cast<std::size_t>(begin)
                                  : static_cast<std::size_t>(begin / per_word) * 4;
    h.data = copy_cols(h.data, rows, rb, first, quant_row_bytes(shard, count), owned);
    if (!channel) {
      const std::int64_t g0 = begin / f.group, gn = quant_scale_cols(shard, count);
      h.scales =
          copy_cols(h.scales, quant_scale_rows(f, rows), sc * ss, static_cast<std::size_t>(g0) * ss,
                    static_cast<std::size_t>(gn) * ss, owned);
      if (h.zeros != nullptr)
        h.zeros = reinterpret_cast<const std::int8_t*>(copy_cols(
            reinterpret_cast<const std::byte*>(h.zeros), rows, static_cast<std::size_t>(sc),
            static_cast<std::size_t>(g0), static_cast<std::size_t>(gn), owned));
    }
    f = shard;
    h.cols = static_cast<int>(count);
  }
  check_finite(ckpt, m, h);
  return h;
}

}  // namespace specrun
