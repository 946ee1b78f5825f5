// make-model --quantize (see synthetic_quant.h and docs/reference.md, "`make-model --quantize`").
#include "model/synthetic_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "kernels/cpu/quant.h"
#include "model/quant_weights.h"

namespace specrun {

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_int4(const std::string& format) {
  return format.rfind("int4-", 0) == 0;
}

// The checkpoint's float values of `t` (BF16 widened exactly).
std::vector<float> values_of(const TensorToWrite& t) {
  const std::size_t n = t.bytes.size() / dtype_size(t.dtype);
  std::vector<float> v(n);
  if (t.dtype == DType::kF32) {
    std::memcpy(v.data(), t.bytes.data(), 4 * n);
    return v;
  }
  SPEC_CHECK(t.dtype == DType::kBF16, "make-model --quantize: " << t.name << " is not BF16/F32");
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t b;
    std::memcpy(&b, t.bytes.data() + 2 * i, 2);
    v[i] = bf16_to_f32(b);
  }
  return v;
}

// x rounded to the scale dtype (the checkpoint's: BF16 to nearest even, F32 as it is).
float to_scale_dtype(float x, DType dtype) {
  return dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x)) : x;
}

template <typename T>
TensorToWrite other_tensor(const std::string& name, const char* dtype,
                           std::vector<std::int64_t> shape, const std::vector<T>& values) {
  TensorToWrite t{name, DType::kF32, std::move(shape), {}, dtype, sizeof(T)};
  t.bytes.resize(values.size() * sizeof(T));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

TensorToWrite scale_tensor(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                           const std::vector<float>& scales) {
  TensorToWrite t{name, dtype, std::move(shape), {}};
  t.bytes.resize(scales.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < scales.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(t.bytes.data() + 4 * i, &scales[i], 4);
    } else {
      const std::uint16_t b = f32_to_bf16(scales[i]);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    }
  }
  return t;
}

// compressed-tensors pack-quantized 4-bit, group `group`, symmetric or with zero points: the
// module's weight_packed, weight_scale, weight_zero_point (asymmetric) and weight_shape.
void quantize_int4(const TensorToWrite& t, const std::string& module_prefix, int group,
                   bool symmetric, std::vector<TensorToWrite>& out) {
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  const std::int64_t groups = (cols + group - 1) / group, words = (cols + 7) / 8;
  const std::vector<float> w = values_of(t);
  std::vector<std::int32_t> packed(static_cast<std::size_t>(rows * words), 0);
  std::vector<float> scales(static_cast<std::size_t>(rows * groups));
  std::vector<std::int32_t> zeros(symmetric ? 0 : static_cast<std::size_t>((rows + 7) / 8 * groups),
                                  0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * group, c1 = std::min(cols, c0 + group);
      const float* row = w.data() + r * cols;
      float a = 0.0f, lo = 0.0f, hi = 0.0f;
      for (std::int64_t c = c0; c < c1; ++c) {
        a = std::max(a, std::fabs(row[c]));
        lo = std::min(lo, row[c]);
        hi = std::max(hi, row[c]);
      }
      float s = to_scale_dtype(symmetric ? a / 7.0f : (hi - lo) / 15.0f, t.dtype);
      if (s == 0.0f) s = 1.0f;
      float z = 0.0f;
      if (!symmetric) {
        const float quotient = lo / s;
        z = std::clamp(std::nearbyint(-8.0f - quotient), -8.0f, 7.0f);
        const std::size_t word = static_cast<std::size_t>(r / 8 * groups + g);
        zeros[word] |=
            static_cast<std::int32_t>(static_cast<std::uint32_t>(z + 8.0f) << (4 * (r % 8)));
      }
      scales[static_cast<std::size_t>(r * groups + g)] = s;
      for (std::int64_t c = c0; c < c1; ++c) {
        const float quotient = row[c] / s;
        const float shifted = quotient + z;
        const float q = std::clamp(std::nearbyint(shifted), -8.0f, 7.0f);
        const auto nibble = static_cast<std::uint32_t>(q + 8.0f);
        packed[static_cast<std::size_t>(r * words + c / 8)] |=
            static_cast<std::int32_t>(nibble << (4 * (c % 8)));
      }
    }
  out.push_back(other_tensor(module_prefix + "weight_packed", "I32", {rows, words}, packed));
  out.push_back(scale_tensor(module_prefix + "weight_scale", t.dtype, {rows, groups}, scales));
  if (!symmetric)
    out.push_back(
        other_tensor(module_prefix + "weight_zero_point", "I32", {(rows + 7) / 8, groups}, zeros));
  out.push_back(other_tensor(module_prefix + "weight_shape", "I64", {2},
                             std::vector<std::int64_t>{rows, cols}));
}

// DeepSeek-V3's FP8: the e4m3 weight and its float32 weight_scale_inv per block.
void quantize_fp8(const TensorToWrite& t, const std::string& module_prefix, int block_rows,
                  int block_cols, std::vector<TensorToWrite>& out) {
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  const std::int64_t brows = (rows + block_rows - 1) / block_rows;
  const std::int64_t bcols = (cols + block_cols - 1) / block_cols;
  const std::vector<float> w = values_of(t);
  std::vector<std::uint8_t> codes(w.size());
  std::vector<float> scales(static_cast<std::size_t>(brows * bcols));
  for (std::int64_t br = 0; br < brows; ++br)
    for (std::int64_t bc = 0; bc < bcols; ++bc) {
      const std::int64_t r0 = br * block_rows, r1 = std::min(rows, r0 + block_rows);
      const std::int64_t c0 = bc * block_cols, c1 = std::min(cols, c0 + block_cols);
      float a = 0.0f;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) a = std::max(a, std::fabs(w[r * cols + c]));
      float s = a / 448.0f;
      if (s == 0.0f) s = 1.0f;
      scales[static_cast<std::size_t>(br * bcols + bc)] = s;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          const float quotient = w[r * cols + c] / s;
          codes[static_cast<std::size_t>(r * cols + c)] = e4m3_nearest(quotient);
        }
    }
  out.push_back(other_tensor(module_prefix + "weight", "F8_E4M3", {rows, cols}, codes));
  out.push_back(
      scale_tensor(module_prefix + "weight_scale_inv", DType::kF32, {brows, bcols}, scales));
}

// What make-model's tensor `name` is, for compressed-tensors' "Linear" class target.
ModuleClass class_of(const ModelConfig& c, const std::string& module) {
  if (ends_with(module, "embed_tokens")) return ModuleClass::kEmbedding;
  if (ends_with(module, "mlp.gate") || ends_with(module, "block_sparse_moe.gate"))
    return c.is_mla() ? ModuleClass::kRouter : ModuleClass::kLinear;
  return ModuleClass::kLinear;
}

bool float_by_fp8_convention(const std::string& module) {
  return module == "lm_head" || ends_with(module, "eh_proj") ||
         ends_with(module, "shared_head.head");
}

}  // namespace

std::uint8_t e4m3_nearest(float x) {
  static const std::array<double, 127> kValues = [] {
    std::array<double, 127> v{};
    for (int c = 0; c < 127; ++c)
      v[static_cast<std::size_t>(c)] = e4m3_to_f32(static_cast<std::uint8_t>(c));
    return v;
  }();
  const std::uint8_t sign = x < 0.0f ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7E;
  // The first code whose value is above a: a lies in [v[c - 1], v[c]).
  const auto above = std::upper_bound(kValues.begin(), kValues.end(), a);
  const int c = static_cast<int>(above - kValues.begin());
  const double below_gap = a - kValues[static_cast<std::size_t>(c - 1)];
  const double above_gap = kValues[static_cast<std::size_t>(c)] - a;
  int code = c - 1;
  if (above_gap < below_gap || (above_gap == below_gap && c % 2 == 0)) code = c;
  return static_cast<std::uint8_t>(sign | code);
}

void validate_quantize(const std::string& format, const std::string& roles) {
  SPEC_INPUT_CHECK(std::find(std::begin(kQuantizeFormats), std::end(kQuantizeFormats), format) !=
                       std::end(kQuantizeFormats),
                   "make-model: --quantize "
                       << format << " is not supported: use int4-g32, int4-g128-asym or fp8-block");
  SPEC_INPUT_CHECK(
      roles.empty() ||
          std::find(std::begin(kQuantRoles), std::end(kQuantRoles), roles) != std::end(kQuantRoles),
      "make-model: --quant-roles " << roles << " is not supported: use experts, linear or all");
  SPEC_INPUT_CHECK(
      !(format == "fp8-block" && roles == "all"),
      "make-model: --quant-roles all with --quantize fp8-block: DeepSeek-V3's FP8 checkpoints "
      "keep lm_head float (use experts or linear)");
}

nlohmann::ordered_json quantization_config_json(const ModelConfig& c, const std::string& format,
                                                const std::string& roles) {
  std::vector<std::string> routers;  // Linear routers, kept float
  if (c.model_type == "qwen3_moe" || c.model_type == "mixtral")
    for (int l = 0; l < c.num_layers; ++l)
      if (c.layer_kind(l).mlp == MlpKind::kMoe)
        routers.push_back("model.layers." + std::to_string(l) +
                          (c.model_type == "mixtral" ? ".block_sparse_moe.gate" : ".mlp.gate"));
  nlohmann::ordered_json q;
  if (is_int4(format)) {
    const bool asym = format == "int4-g128-asym";
    nlohmann::ordered_json ignore = nlohmann::ordered_json::array();
    if (roles != "all") ignore.push_back("lm_head");
    if (roles == "experts")
      for (const char* p : {"re:.*self_attn.*", "re:.*shared_experts.*",
                            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"})
        ignore.push_back(p);
    // An MTP module's eh_proj and head are no routed experts (Kimi's list does not name them).
    if (roles == "experts" && c.num_nextn_predict_layers > 0)
      for (const char* p : {"re:.*eh_proj$", "re:.*shared_head\\.head$"}) ignore.push_back(p);
    if (c.model_type == "qwen3_moe") ignore.push_back("re:.*mlp\\.gate$");
    if (c.model_type == "mixtral") ignore.push_back("re:.*block_sparse_moe\\.gate$");
    q["quant_method"] = "compressed-tensors";
    q["format"] = "pack-quantized";
    q["quantization_status"] = "compressed";
    q["kv_cache_scheme"] = nullptr;
    nlohmann::ordered_json weights;
    weights["type"] = "int";
    weights["num_bits"] = 4;
    weights["strategy"] = "group";
    weights["group_size"] = asym ? 128 : 32;
    weights["symmetric"] = !asym;
    weights["dynamic"] = false;
    nlohmann::ordered_json group;
    group["targets"] = {"Linear"};
    group["weights"] = weights;
    group["input_activations"] = nullptr;
    group["output_activations"] = nullptr;
    q["config_groups"]["group_0"] = group;
    q["ignore"] = ignore;
    return q;
  }
  q["quant_method"] = "fp8";
  q["fmt"] = "e4m3";
  q["activation_scheme"] = "dynamic";
  q["weight_block_size"] = {128, 128};
  std::vector<std::string> not_convert;
  if (roles == "experts")
    not_convert = {"self_attn", "shared_experts", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
  not_convert.insert(not_convert.end(), routers.begin(), routers.end());
  if (!not_convert.empty()) q["modules_to_not_convert"] = not_convert;
  return q;
}

std::vector<TensorToWrite> quantize_tensors(const ModelConfig& c,
                                            std::vector<TensorToWrite> tensors) {
  std::vector<TensorToWrite> out;
  out.reserve(tensors.size() * 2);
  for (TensorToWrite& t : tensors) {
    const std::string module = quant_module_name(c, t.name);
    if (t.shape.size() != 2 || module.empty() || !t.other_dtype.empty()) {
      out.push_back(std::move(t));
      continue;
    }
    const QuantDecision d = c.quant.decide(module, class_of(c, module));
    const bool fp8 = c.quant.method == QuantMethod::kFp8Block;
    if (d.kind == QuantKind::kNone || (fp8 && float_by_fp8_convention(module))) {
      out.push_back(std::move(t));
      continue;
    }
    const std::string prefix = t.name.substr(0, t.name.size() - std::string("weight").size());
    if (fp8) {
      quantize_fp8(t, prefix, c.quant.block_rows, c.quant.block_cols, out);
    } else {
      SPEC_CHECK(d.kind == QuantKind::kInt4 && d.group != nullptr && !d.group->channel,
                 "make-model --quantize writes 4-bit groups only (" << module << ")");
      quantize_int4(t, prefix, d.group->group_size, d.group->symmetric, out);
    }
  }
  return out;
}

}  // namespace specrun
