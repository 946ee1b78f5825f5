// Test helper for the quantized weight tests (test_quant_schema, test_quant_matmul): a small
// Llama target (make_model_pair: hidden 128, 4 heads of 32, 1 layer, intermediate 256,
// vocabulary 128, BF16) whose layer-0 Linears a test rewrites in compressed-tensors
// pack-quantized or FP8 block-scaled layouts from integer codes and scales it draws itself, so
// that the expected value of every weight ((q - z) * s, e4m3(b) * s) is known independently of
// the loader; and the quantization_config objects that describe them.
#pragma once

#include <gtest/gtest.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "temp_dir.h"

namespace specrun::test {

// Deterministic small integers.
struct Lcg {
  std::uint64_t s;
  std::uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(s >> 33);
  }
};

// The test's own e4m3fn decoding (OCP OFP8: bias 7, subnormals m/8 * 2^-6).
inline double e4m3(std::uint8_t b) {
  const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -v : v;
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline TensorToWrite other_tensor(const std::string& name, const std::string& dtype,
                                  std::size_t size, std::vector<std::int64_t> shape,
                                  std::vector<std::byte> bytes) {
  TensorToWrite t{name, DType::kF32, std::move(shape), std::move(bytes)};
  t.other_dtype = dtype;
  t.other_size = size;
  return t;
}

// A 1-layer Llama target (hidden 128, 4 heads of 32, intermediate 256, vocabulary 128) whose
// layer-0 Linears the test rewrites; `expected` holds each rewritten module's values.
class QuantFixture {
 public:
  static SyntheticSpec default_spec() {
    SyntheticSpec spec;
    spec.hidden = 128;
    spec.heads = 4;
    spec.kv_heads = 4;
    spec.layers = 1;
    spec.draft_layers = 1;
    spec.intermediate = 256;
    spec.vocab = 128;
    return spec;
  }
  explicit QuantFixture(const SyntheticSpec& spec = default_spec()) {
    make_model_pair(spec, dir_.path());
    SafetensorsFile f(target() + "/model.safetensors");
    for (const std::string& n : f.names()) {
      const TensorView& t = f.get(n);
      tensors_[n] = TensorToWrite{n, t.dtype, t.shape, std::vector<std::byte>(t.nbytes)};
      std::memcpy(tensors_[n].bytes.data(), t.data, t.nbytes);
    }
  }
  std::string target() const { return dir_.path() + "/target"; }
  static std::vector<std::string> linears() {
    const std::string l = "model.layers.0.";
    return {l + "self_attn.q_proj", l + "self_attn.k_proj", l + "self_attn.v_proj",
            l + "self_attn.o_proj", l + "mlp.gate_proj",    l + "mlp.up_proj",
            l + "mlp.down_proj"};
  }

  // Module m as compressed-tensors pack-quantized: `bits`, `group` inputs per scale (0: one per
  // row), BF16 scales, zero points packed along rows when asymmetric.
  void pack_int(const std::string& m, int bits, int group, bool symmetric, std::uint64_t seed) {
    const TensorToWrite w = take(m + ".weight");
    const std::int64_t rows = w.shape[0], cols = w.shape[1];
    const int g = group == 0 ? static_cast<int>(cols) : group;
    const std::int64_t groups = (cols + g - 1) / g, per = 32 / bits;
    const int offset = 1 << (bits - 1);
    Lcg rng{seed};
    std::vector<std::uint16_t> scales(rows * groups);
    std::vector<int> zero(rows * groups, 0);
    for (std::size_t i = 0; i < scales.size(); ++i) {
      // (1 + k/8) * 2^-e: exact in BF16, and different for every group
      const float s = std::ldexp(1.0f + static_cast<float>(rng.next() % 8) / 8.0f,
                                 -static_cast<int>(4 + rng.next() % 6));
      scales[i] = f32_to_bf16(s);
      if (!symmetric) zero[i] = static_cast<int>(rng.next() % (2 * offset)) - offset;
    }
    std::vector<std::int32_t> packed(rows * ((cols + per - 1) / per), 0);
    std::vector<double>& want = expected[m];
    want.assign(rows * cols, 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const int q = static_cast<int>(rng.next() % (2 * offset)) - offset;
        std::uint32_t& word =
            reinterpret_cast<std::uint32_t&>(packed[r * ((cols + per - 1) / per) + c / per]);
        word |= static_cast<std::uint32_t>(q + offset) << ((c % per) * bits);
        const std::int64_t at = r * groups + c / g;
        want[r * cols + c] = (q - zero[at]) * static_cast<double>(bf16_to_f32(scales[at]));
      }
    put(other_tensor(m + ".weight_packed", "I32", 4, {rows, (cols + per - 1) / per},
                     bytes_of(packed)));
    put(TensorToWrite{m + ".weight_scale", DType::kBF16, {rows, groups}, bytes_of(scales)});
    put(other_tensor(m + ".weight_shape", "I64", 8, {2},
                     bytes_of(std::vector<std::int64_t>{rows, cols})));
    if (!symmetric) {
      std::vector<std::int32_t> zp(((rows + per - 1) / per) * groups, 0);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t gi = 0; gi < groups; ++gi)
          reinterpret_cast<std::uint32_t&>(zp[(r / per) * groups + gi]) |=
              static_cast<std::uint32_t>(zero[r * groups + gi] + offset) << ((r % per) * bits);
      put(other_tensor(m + ".weight_zero_point", "I32", 4, {(rows + per - 1) / per, groups},
                       bytes_of(zp)));
    }
  }

  // Module m as FP8 e4m3 with float32 scale_inv per [bn, bk] block.
  void pack_fp8(const std::string& m, int bn, int bk, std::uint64_t seed) {
    const TensorToWrite w = take(m + ".weight");
    const std::int64_t rows = w.shape[0], cols = w.shape[1];
    const std::int64_t sr = (rows + bn - 1) / bn, sc = (cols + bk - 1) / bk;
    Lcg rng{seed};
    std::vector<float> scales(sr * sc);
    for (float& s : scales) s = 1.0f / static_cast<float>(3 + rng.next() % 500);  // inexact
    std::vector<std::uint8_t> codes(rows * cols);
    std::vector<double>& want = expected[m];
    want.assign(rows * cols, 0.0);
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      std::uint8_t b;
      do b = static_cast<std::uint8_t>(rng.next());
      while ((b & 0x7F) == 0x7F);
      codes[i] = b;
      const float s = scales[(i / cols / bn) * sc + (i % cols) / bk];
      want[i] = static_cast<float>(e4m3(b) * s);  // one rounding of the exact product
    }
    put(other_tensor(m + ".weight", "F8_E4M3", 1, {rows, cols}, bytes_of(codes)));
    put(TensorToWrite{m + ".weight_scale_inv", DType::kF32, {sr, sc}, bytes_of(scales)});
  }

  TensorToWrite take(const std::string& name) {
    auto it = tensors_.find(name);
    EXPECT_NE(it, tensors_.end()) << name;
    TensorToWrite t = it->second;
    tensors_.erase(it);
    return t;
  }
  void put(TensorToWrite t) { tensors_[t.name] = std::move(t); }
  // Tensor `name` (a Linear's weight) replaced by `values` in F32.
  void put_f32(const std::string& name, const std::vector<double>& values) {
    const TensorToWrite old = take(name);
    std::vector<float> f(values.begin(), values.end());
    put(TensorToWrite{name, DType::kF32, old.shape, bytes_of(f)});
  }

  // Writes the safetensors file and config.json's quantization_config (null: none).
  Checkpoint write(const nlohmann::json& quantization_config) {
    std::vector<TensorToWrite> all;
    for (auto& kv : tensors_) all.push_back(kv.second);
    write_safetensors(target() + "/model.safetensors", all);
    std::ifstream in(target() + "/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    in.close();
    cfg.erase("quantization_config");
    if (!quantization_config.is_null()) cfg["quantization_config"] = quantization_config;
    std::ofstream(target() + "/config.json") << cfg.dump(2);
    return Checkpoint(target());
  }

  std::map<std::string, std::vector<double>> expected;

 private:
  test::TempDir dir_;
  std::map<std::string, TensorToWrite> tensors_;
};

inline nlohmann::json compressed_config(
    int bits, int group, bool symmetric,
    nlohmann::json ignore = nlohmann::json::array({"lm_head"})) {
  nlohmann::json w = {{"type", "int"},
                      {"num_bits", bits},
                      {"symmetric", symmetric},
                      {"dynamic", false},
                      {"actorder", nullptr}};
  if (group == 0) {
    w["strategy"] = "channel";
  } else {
    w["strategy"] = "group";
    w["group_size"] = group;
  }
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", w},
              {"input_activations", nullptr},
              {"output_activations", nullptr}}}}},
          {"ignore", ignore}};
}

inline nlohmann::json fp8_config(int bn, int bk,
                                 nlohmann::json not_convert = nlohmann::json::array()) {
  return {{"quant_method", "fp8"},
          {"fmt", "e4m3"},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", {bn, bk}},
          {"modules_to_not_convert", not_convert}};
}

}  // namespace specrun::test
