// The CPU's quantized matmul (issue 44 step 4; docs/quantization-design.md 3.4): on int4, int8
// and fp8 weights packed by pack_quantized it is bitwise the F32 matmul on the explicit float32
// W' = dequant(W), computed here by the formats' rules independently of the kernels ((q - z) *
// s, e4m3(b) * s, exact in double and rounded once); for 1..40 tokens (decode, verify and prefill
// tiles), odd shapes (rows not a multiple of 32, partial scale groups and blocks), with a bias,
// as gate/up pairs (== two linears and silu_mul) and grouped (== each alone). Run under every
// kernel variant (SPECRUN_KERNEL_TESTS): each variant's quantized matmul equals its own F32 one.
// And a model: a quantized checkpoint's logits equal those of the float checkpoint holding W'.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"
#include "model/language_model.h"
#include "model/model_factory.h"
#include "quant_fixture.h"
#include "single_rank_comm.h"

using namespace specrun;

namespace {

struct Format {
  const char* name;
  QuantFormat f;
  int out, in;
  int scale_exp = 0;  // scales times 2^scale_exp
};

// A quantized matrix in the checkpoint's layout, and its W' in float32.
struct Quantized {
  QuantFormat f;
  int out = 0, in = 0;
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scales;
  std::vector<std::int8_t> zeros;
  std::vector<float> w;  // W' [out, in]

  cpu::QuantMatrix matrix() const {
    return {codes.data(), scales.data(), zeros.empty() ? nullptr : zeros.data(), f, out, in};
  }
};

Quantized make(const QuantFormat& f, int out, int in, std::uint64_t seed, int scale_exp = 0) {
  test::Lcg rng{seed};
  Quantized m;
  m.f = f;
  m.out = out;
  m.in = in;
  const std::int64_t sr = quant_scale_rows(f, out), sc = quant_scale_cols(f, in);
  const std::size_t ss = dtype_size(f.scale_dtype);
  m.scales.resize(static_cast<std::size_t>(sr * sc) * ss);
  std::vector<double> s(static_cast<std::size_t>(sr * sc));
  for (std::size_t i = 0; i < s.size(); ++i) {
    float v;
    if (f.scale_dtype == DType::kF32) {
      v = std::ldexp((rng.next() % 2 ? -1.0f : 1.0f) / static_cast<float>(3 + rng.next() % 1000),
                     scale_exp);
      std::memcpy(m.scales.data() + i * 4, &v, 4);
    } else {
      v = std::ldexp(
          (rng.next() % 2 ? -1.0f : 1.0f) * (1.0f + static_cast<float>(rng.next() % 64) / 64.0f),
          scale_exp - static_cast<int>(3 + rng.next() % 8));
      const std::uint16_t h = f.scale_dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(m.scales.data() + i * 2, &h, 2);
      v = f.scale_dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    s[i] = v;
  }
  const int bits = f.kind == QuantKind::kInt4 ? 4 : 8, offset = 1 << (bits - 1);
  if (f.zero_points) {
    m.zeros.resize(static_cast<std::size_t>(sr * sc));
    for (std::int8_t& z : m.zeros)
      z = static_cast<std::int8_t>(static_cast<int>(rng.next() % (2 * offset)) - offset);
  }
  const std::size_t row_bytes = quant_row_bytes(f, in);
  m.codes.assign(static_cast<std::size_t>(out) * row_bytes, 0);
  m.w.resize(static_cast<std::size_t>(out) * in);
  for (int r = 0; r < out; ++r)
    for (int c = 0; c < in; ++c) {
      const std::size_t at = static_cast<std::size_t>(r / f.block_rows * sc + c / f.group);
      double v;
      if (f.kind == QuantKind::kFp8E4M3) {
        std::uint8_t b;
        do b = static_cast<std::uint8_t>(rng.next());
        while ((b & 0x7F) == 0x7F);
        m.codes[r * row_bytes + c] = b;
        v = test::e4m3(b);
      } else {
        const int q = static_cast<int>(rng.next() % (2 * offset)) - offset;
        const int per = 32 / bits;
        std::uint32_t word;
        std::uint8_t* p = m.codes.data() + r * row_bytes + (c / per) * 4;
        std::memcpy(&word, p, 4);
        word |= static_cast<std::uint32_t>(q + offset) << ((c % per) * bits);
        std::memcpy(p, &word, 4);
        v = q - (m.zeros.empty() ? 0 : m.zeros[at]);
      }
      m.w[static_cast<std::size_t>(r) * in + c] = static_cast<float>(v * s[at]);
    }
  return m;
}

std::vector<float> inputs(int n, std::uint64_t seed) {
  test::Lcg rng{seed};
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = static_cast<float>(static_cast<int>(rng.next() % 2001) - 1000) / 997.0f;
  return x;
}

// The F32 packing of W'.
std::vector<std::byte> pack_f32(const std::vector<float>& w, int out, int in) {
  std::vector<std::byte> p(cpu::packed_weight_bytes(DType::kF32, out, in));
  cpu::pack_weights(w.data(), DType::kF32, out, in, p.data());
  return p;
}
std::vector<std::byte> pack_q(const Quantized& m) {
  std::vector<std::byte> p(cpu::packed_quant_bytes(m.f, m.out, m.in));
  cpu::pack_quantized(m.matrix(), p.data());
  return p;
}

QuantFormat fmt(QuantKind kind, int group, int block_rows, DType scale, bool zeros) {
  QuantFormat f;
  f.kind = kind;
  f.group = group;
  f.block_rows = block_rows;
  f.scale_dtype = scale;
  f.zero_points = zeros;
  return f;
}

const Format kFormats[] = {
    {"int4 g32 bf16", fmt(QuantKind::kInt4, 32, 1, DType::kBF16, false), 96, 128},
    {"int4 g64 f16 zero points, odd", fmt(QuantKind::kInt4, 64, 1, DType::kF16, true), 45, 200},
    {"int8 channel f32", fmt(QuantKind::kInt8, 72, 1, DType::kF32, false), 70, 72},
    {"int8 g32 bf16 zero points", fmt(QuantKind::kInt8, 32, 1, DType::kBF16, true), 33, 160},
    {"fp8 128x128, odd", fmt(QuantKind::kFp8E4M3, 128, 128, DType::kF32, false), 45, 300},
    {"fp8 16x24", fmt(QuantKind::kFp8E4M3, 24, 16, DType::kF32, false), 70, 100},
    // Scales near 2^100, where the SIMD tiles' s * 256 would overflow for some groups (they
    // multiply by 256 and s separately there), and scales whose products are subnormal.
    // BF16 scales near 2^100, where the SIMD tiles' exact fused multiply-subtract is not used.
    {"int4 g32 bf16 huge scales", fmt(QuantKind::kInt4, 32, 1, DType::kBF16, true), 40, 96, 107},
    {"fp8 huge scales", fmt(QuantKind::kFp8E4M3, 32, 1, DType::kF32, false), 40, 96, 104},
    {"fp8 tiny scales", fmt(QuantKind::kFp8E4M3, 32, 8, DType::kF32, false), 40, 96, -122},
};

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      ADD_FAILURE() << what << ": element " << i << " " << got[i] << " != " << want[i];
      return;
    }
}

}  // namespace

TEST(QuantMatmul, BitwiseTheF32MatmulOnTheDequantizedWeights) {
  std::uint64_t seed = 1;
  for (const Format& fm : kFormats) {
    const Quantized m = make(fm.f, fm.out, fm.in, seed++, fm.scale_exp);
    const std::vector<std::byte> pq = pack_q(m), pf = pack_f32(m.w, m.out, m.in);
    const cpu::PackedWeights wq{pq.data(), DType::kF32, m.out, m.in, m.f};
    const cpu::PackedWeights wf{pf.data(), DType::kF32, m.out, m.in};
    const std::vector<float> bias = inputs(m.out, seed++);
    for (int n = 1; n <= 40; ++n) {
      const std::vector<float> x = inputs(n * m.in, seed++);
      std::vector<float> yq(static_cast<std::size_t>(n) * m.out), yf(yq.size());
      const float* b = n % 3 == 0 ? bias.data() : nullptr;
      cpu::matmul(x.data(), n, wq, b, yq.data());
      cpu::matmul(x.data(), n, wf, b, yf.data());
      expect_bitwise(yq, yf, std::string(fm.name) + ", " + std::to_string(n) + " tokens");
    }
  }
}

TEST(QuantMatmul, PairsAreTwoLinearsAndSiluMul) {
  std::uint64_t seed = 101;
  for (const Format& fm : kFormats) {
    const Quantized g = make(fm.f, fm.out, fm.in, seed++), u = make(fm.f, fm.out, fm.in, seed++);
    std::vector<std::byte> pair(2 * cpu::packed_quant_bytes(fm.f, fm.out, fm.in));
    cpu::pack_quantized_pairs(g.matrix(), u.matrix(), pair.data());
    const std::vector<std::byte> pg = pack_q(g), pu = pack_q(u);
    for (int n : {1, 2, 3, 5, 7, 12, 13, 40}) {
      const std::vector<float> x = inputs(n * fm.in, seed++);
      const std::size_t size = static_cast<std::size_t>(n) * fm.out;
      std::vector<float> y(size), yg(size), yu(size), want(size);
      cpu::MatmulOutput o{{pair.data(), DType::kF32, fm.out, fm.in, fm.f}, nullptr, y.data()};
      o.swiglu = true;
      cpu::matmul_multi(x.data(), n, &o, 1);
      cpu::matmul(x.data(), n, {pg.data(), DType::kF32, fm.out, fm.in, fm.f}, nullptr, yg.data());
      cpu::matmul(x.data(), n, {pu.data(), DType::kF32, fm.out, fm.in, fm.f}, nullptr, yu.data());
      cpu::silu_mul(yg.data(), yu.data(), want.data(), size);
      expect_bitwise(y, want, std::string(fm.name) + " pair, " + std::to_string(n) + " tokens");
    }
  }
}

TEST(QuantMatmul, GroupedIsEachAlone) {
  std::uint64_t seed = 201;
  std::vector<Quantized> ms;
  std::vector<std::vector<std::byte>> packs;
  for (const Format& fm : kFormats)
    if (fm.in == 128 || fm.in == 200) {  // any two formats; grouped outputs share nothing
      ms.push_back(make(fm.f, fm.out, fm.in, seed++));
      packs.push_back(pack_q(ms.back()));
    }
  const int tokens[] = {3, 17};
  std::vector<std::vector<float>> xs, ys, alone;
  std::vector<cpu::MatmulGroup> groups;
  for (std::size_t j = 0; j < ms.size(); ++j) {
    xs.push_back(inputs(tokens[j] * ms[j].in, seed++));
    ys.emplace_back(static_cast<std::size_t>(tokens[j]) * ms[j].out);
    alone.emplace_back(ys.back().size());
  }
  for (std::size_t j = 0; j < ms.size(); ++j) {
    const cpu::PackedWeights w{packs[j].data(), DType::kF32, ms[j].out, ms[j].in, ms[j].f};
    groups.push_back({xs[j].data(), tokens[j], {w, nullptr, ys[j].data()}});
    cpu::matmul(xs[j].data(), tokens[j], w, nullptr, alone[j].data());
  }
  cpu::matmul_grouped(groups.data(), static_cast<int>(groups.size()));
  for (std::size_t j = 0; j < ms.size(); ++j) expect_bitwise(ys[j], alone[j], "group");
}

// Logits of a prefill of 11 tokens (every position) and of one decode step after it.
std::vector<float> prefill_and_step(LanguageModel& model) {
  const std::vector<std::int32_t> tokens = {1, 17, 99, 3, 64, 5, 120, 8, 42, 77, 11};
  auto cache = model.new_cache(static_cast<int>(tokens.size()) + 1);
  std::vector<float> all, step;
  SeqChunk chunk{cache.get(), tokens.data(), static_cast<int>(tokens.size())};
  model.forward({&chunk, 1}, true, all);
  const std::int32_t next = 9;
  SeqChunk one{cache.get(), &next, 1};
  model.forward({&one, 1}, false, step);
  all.insert(all.end(), step.begin(), step.end());
  return all;
}

// The small Llama target with its layer-0 Linears int4 g32 (and, in a second checkpoint, those
// layers' W' written as F32): logits at every position of a prefill and of decode steps equal.
TEST(QuantModel, LogitsEqualTheFloatModelOfTheDequantizedWeights) {
  for (const bool fp8 : {false, true}) {
    test::QuantFixture quantized, dequantized;
    std::uint64_t seed = 301;
    for (const std::string& m : test::QuantFixture::linears()) {
      if (fp8)
        quantized.pack_fp8(m, 32, 32, seed++);
      else
        quantized.pack_int(m, 4, 32, true, seed++);
      dequantized.put_f32(m + ".weight", quantized.expected.at(m));
    }
    const Checkpoint q =
        quantized.write(fp8 ? test::fp8_config(32, 32) : test::compressed_config(4, 32, true));
    const Checkpoint f = dequantized.write(nlohmann::json());
    test::SingleRankComm comm;
    auto mq = load_cpu_model(q, comm, 2);
    auto mf = load_cpu_model(f, comm, 2);
    expect_bitwise(prefill_and_step(*mq), prefill_and_step(*mf), fp8 ? "fp8 model" : "int4 model");
  }
}

// A Qwen3-MoE target whose routed experts are int4 g32 (router and attention excluded as
// Kimi-K2.5 excludes them): the experts run as quantized gate/up pairs and downs in
// matmul_grouped; logits bitwise those of the float model holding W'.
TEST(QuantModel, QuantizedExpertsEqualTheFloatModel) {
  SyntheticSpec spec = test::QuantFixture::default_spec();
  spec.architecture = "qwen3_moe";
  spec.experts = 4;
  spec.experts_per_tok = 2;
  spec.moe_intermediate = 64;
  test::QuantFixture quantized(spec), dequantized(spec);
  std::uint64_t seed = 401;
  for (int e = 0; e < spec.experts; ++e)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string m = "model.layers.0.mlp.experts." + std::to_string(e) + "." + proj;
      quantized.pack_int(m, 4, 32, true, seed++);
      dequantized.put_f32(m + ".weight", quantized.expected.at(m));
    }
  const Checkpoint q = quantized.write(
      test::compressed_config(4, 32, true, {"lm_head", "re:.*self_attn.*", "re:.*mlp\\.gate$"}));
  const Checkpoint f = dequantized.write(nlohmann::json());
  test::SingleRankComm comm;
  auto mq = load_cpu_model(q, comm, 2);
  auto mf = load_cpu_model(f, comm, 2);
  expect_bitwise(prefill_and_step(*mq), prefill_and_step(*mf), "qwen3_moe experts");
}
