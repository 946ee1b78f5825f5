// Every CUDA op against the CPU reference (kernels/cpu) on seeded random inputs (label "gpu").
// Tolerances: float32 paths are derived from the inputs (a dot product of length n accumulated
// in float32 differs from another order by at most ~n * 2^-24 * sum |x_i w_i|); the cuBLAS
// prefill path rounds activations to the weight dtype first (BF16: 2^-8 relative per element,
// F16: 2^-11). Exact checks where the op is a copy. The batch-invariance tests check bit
// equality: a token's outputs must not depend on the other tokens of the call.
// Skips visibly without a CUDA build or without a device.
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaOps, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): the CUDA ops are not compiled";
}

#else

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_data.h"
#include "cuda_test_util.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/ops.h"

using namespace specrun;

namespace {

cuda::DeviceContext* context() {
  return test::device_context();
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights in `dtype` as raw bytes, and their widened float32 values.
std::vector<std::uint8_t> encode(const std::vector<float>& v, DType dtype) {
  std::vector<std::uint8_t> out(v.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// On the kernels' stream, which does not wait for the legacy default stream (a pageable
// cudaMemcpy may return before its DMA has landed).
template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<std::size_t>(1, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice,
                             context()->stream()));
  CUDA_CHECK(cudaStreamSynchronize(context()->stream()));
  return b;
}

template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, std::size_t n) {
  CUDA_CHECK(cudaStreamSynchronize(context()->stream()));
  std::vector<T> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Asserts |expected[i] - actual[i]| <= tol[i] everywhere; reports the worst element.
void expect_close(const std::string& what, const std::vector<float>& expected,
                  const std::vector<float>& actual, const std::vector<float>& tol) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  std::size_t worst = 0;
  double worst_ratio = -1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double err = std::fabs(static_cast<double>(expected[i]) - actual[i]);
    const double ratio = std::isnan(err) ? 1e30 : err / tol[i];
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": worst element " << worst << " expected "
                              << expected[worst] << ", got " << actual[worst] << ", tolerance "
                              << tol[worst];
}

void expect_close(const std::string& what, const std::vector<float>& expected,
                  const std::vector<float>& actual, float abs_tol, float rel_tol) {
  std::vector<float> tol(expected.size());
  for (std::size_t i = 0; i < tol.size(); ++i) tol[i] = abs_tol + rel_tol * std::fabs(expected[i]);
  expect_close(what, expected, actual, tol);
}

struct MatmulCase {
  DType dtype;
  int n_tokens, in, out;
  bool bias;
};

void run_matmul(const MatmulCase& c) {
  cuda::DeviceContext& ctx = *context();
  const std::string what = std::string("matmul ") + dtype_name(c.dtype) + " tokens " +
                           std::to_string(c.n_tokens) + " in " + std::to_string(c.in) + " out " +
                           std::to_string(c.out);
  const auto x = random_floats(static_cast<std::size_t>(c.n_tokens) * c.in, 1);
  const auto wf = random_floats(static_cast<std::size_t>(c.out) * c.in, 2, 0.05f);
  const auto w = encode(wf, c.dtype);
  const auto bias = c.bias ? random_floats(c.out, 3) : std::vector<float>{};
  std::vector<float> expected(static_cast<std::size_t>(c.n_tokens) * c.out);
  const auto packed = specrun::test::pack(w.data(), c.dtype, c.out, c.in);
  cpu::matmul(x.data(), c.n_tokens, packed.view, c.bias ? bias.data() : nullptr, expected.data());

  auto dx = to_device(x), dw = to_device(w), db = to_device(bias);
  cuda::DeviceBuffer dy(expected.size() * sizeof(float));
  cuda::DeviceBuffer scratch(
      std::max<std::size_t>(1, cuda::matmul_scratch_bytes(c.n_tokens, c.in, c.dtype)));
  cuda::matmul(ctx.cublas(), ctx.stream(), dx.as<float>(), c.n_tokens, c.in, dw.get(), c.dtype,
               c.out, c.bias ? db.as<float>() : nullptr, dy.as<float>(), scratch.get(),
               scratch.bytes());
  const auto actual = to_host<float>(dy, expected.size());

  // Tolerance from the magnitudes that were summed (widened weights as the CPU used them).
  // Two float32 summations of `in` products in different orders differ by at most
  // 2 * in * 2^-24 * sum |x w| (gamma_n bound); rounding x to BF16 / F16 adds 2^-9 / 2^-11 of
  // sum |x w| (bounded by 8e-3 / 1e-3 with margin).
  const bool rounded = c.n_tokens > cuda::kMaxGemvTokens && c.dtype != DType::kF32;
  const double unit = 2.0 * c.in * std::ldexp(1.0, -24) + (!rounded                  ? 0.0
                                                           : c.dtype == DType::kBF16 ? 8e-3
                                                                                     : 1e-3);
  std::vector<float> tol(expected.size());
  std::vector<float> wide(wf.size());
  for (std::size_t i = 0; i < wf.size(); ++i)
    wide[i] = c.dtype == DType::kBF16  ? bf16_to_f32(f32_to_bf16(wf[i]))
              : c.dtype == DType::kF16 ? f16_to_f32(f32_to_f16(wf[i]))
                                       : wf[i];
  for (int t = 0; t < c.n_tokens; ++t)
    for (int o = 0; o < c.out; ++o) {
      double mag = 0;
      for (int i = 0; i < c.in; ++i)
        mag += std::fabs(x[static_cast<std::size_t>(t) * c.in + i] *
                         wide[static_cast<std::size_t>(o) * c.in + i]);
      tol[static_cast<std::size_t>(t) * c.out + o] = static_cast<float>(unit * mag + 1e-6);
    }
  expect_close(what, expected, actual, tol);
}

}  // namespace

TEST(CudaOps, MatmulMatchesCpuForEveryDtypeAndPath) {
  REQUIRE_DEVICE();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    run_matmul({dt, 1, 256, 96, false});    // decode, vectorised loads
    run_matmul({dt, 5, 172, 70, true});     // verify window, unaligned `in` (scalar loads)
    run_matmul({dt, 64, 128, 33, false});   // largest batch-invariant call
    run_matmul({dt, 150, 256, 130, true});  // prefill: cuBLAS
  }
}

TEST(CudaOps, MatmulIsBatchInvariant) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int in = 384, out = 77, n = 37;
    const auto x = random_floats(static_cast<std::size_t>(n) * in, 4);
    const auto w = encode(random_floats(static_cast<std::size_t>(out) * in, 5, 0.05f), dt);
    auto dx = to_device(x), dw = to_device(w);
    cuda::DeviceBuffer all(static_cast<std::size_t>(n) * out * sizeof(float));
    cuda::DeviceBuffer one(static_cast<std::size_t>(out) * sizeof(float));
    cuda::matmul(ctx.cublas(), ctx.stream(), dx.as<float>(), n, in, dw.get(), dt, out, nullptr,
                 all.as<float>(), nullptr, 0);
    const auto batched = to_host<float>(all, static_cast<std::size_t>(n) * out);
    for (int t : {0, 7, 8, 36}) {
      cuda::matmul(ctx.cublas(), ctx.stream(), dx.as<float>() + static_cast<std::size_t>(t) * in, 1,
                   in, dw.get(), dt, out, nullptr, one.as<float>(), nullptr, 0);
      const auto alone = to_host<float>(one, out);
      EXPECT_EQ(0, std::memcmp(alone.data(), batched.data() + static_cast<std::size_t>(t) * out,
                               out * sizeof(float)))
          << dtype_name(dt) << ": token " << t << " alone differs from the same token in a batch "
          << "of " << n << " (first value " << alone[0] << " vs "
          << batched[static_cast<std::size_t>(t) * out] << ")";
    }
  }
}

TEST(CudaOps, GatherRowsOfAShardIsExact) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int dim = 40, rows = 30, begin = 20;
  const std::vector<std::int32_t> ids = {0, 20, 49, 50, 35, 19};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto table = encode(random_floats(static_cast<std::size_t>(rows) * dim, 6), dt);
    std::vector<float> expected(ids.size() * dim);
    cpu::gather_rows(table.data(), dt, begin, rows, dim, ids.data(), static_cast<int>(ids.size()),
                     expected.data());
    auto dt_table = to_device(table);
    auto d_ids = to_device(ids);
    cuda::DeviceBuffer out(expected.size() * sizeof(float));
    cuda::gather_rows(ctx.stream(), dt_table.get(), dt, begin, rows, dim, d_ids.as<std::int32_t>(),
                      static_cast<int>(ids.size()), out.as<float>());
    expect_close(std::string("gather_rows ") + dtype_name(dt), expected,
                 to_host<float>(out, expected.size()), 0.0f, 0.0f);
  }
}

TEST(CudaOps, RmsnormMatchesCpu) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int n = 7, dim = 1000;
  const auto x = random_floats(static_cast<std::size_t>(n) * dim, 7, 3.0f);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto w = encode(random_floats(dim, 8), dt);
    std::vector<float> expected(x.size());
    cpu::rmsnorm(x.data(), n, dim, w.data(), dt, 1e-5f, expected.data());
    auto dx = to_device(x), dw = to_device(w);
    cuda::rmsnorm(ctx.stream(), dx.as<float>(), n, dim, dw.get(), dt, 1e-5f, dx.as<float>());
    // The sum of squares in another order: relative error up to dim * 2^-24.
    expect_close(std::string("rmsnorm ") + dtype_name(dt), expected, to_host<float>(dx, x.size()),
                 1e-6f, static_cast<float>(dim * std::ldexp(1.0, -24)));
  }
}

TEST(CudaOps, RopeMatchesCpuAtLargePositions) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int n = 5, heads = 3, hd = 64, stride = heads * hd + 16;
  auto x = random_floats(static_cast<std::size_t>(n) * stride, 9);
  std::vector<float> inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[j] = std::pow(10000.0f, -2.0f * j / hd);
  const std::vector<std::int32_t> pos = {0, 1, 17, 4095, 30000};
  std::vector<float> expected = x;
  cpu::rope(expected.data(), n, heads, hd, stride, inv.data(), pos.data());
  auto dx = to_device(x), dinv = to_device(inv), dpos = to_device(pos);
  cuda::rope(ctx.stream(), dx.as<float>(), n, heads, hd, stride, dinv.as<float>(),
             dpos.as<std::int32_t>());
  // cos/sin of angles up to 3e4 rad: both libraries are within a few ulp of the exact value.
  expect_close("rope", expected, to_host<float>(dx, x.size()), 2e-5f, 2e-5f);
}

// The two-step form the model graph uses: one cos/sin table per forward, applied to q and k.
TEST(CudaOps, RopeTableAndApplyMatchCpu) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int n = 5, heads = 3, hd = 64, stride = heads * hd + 16;
  auto x = random_floats(static_cast<std::size_t>(n) * stride, 19);
  std::vector<float> inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[j] = std::pow(500000.0f, -2.0f * j / hd);
  const std::vector<std::int32_t> pos = {0, 1, 17, 4095, 30000};
  std::vector<float> table(static_cast<std::size_t>(n) * hd), expected = x;
  cpu::rope_table(inv.data(), hd, pos.data(), n, table.data());
  cpu::rope_apply(expected.data(), n, heads, hd, stride, table.data());
  auto dx = to_device(x), dinv = to_device(inv), dpos = to_device(pos);
  cuda::DeviceBuffer dtable(table.size() * sizeof(float));
  CUDA_CHECK(cudaMemsetAsync(dtable.get(), 0xff, dtable.bytes(), ctx.stream()));  // NaN poison
  cuda::rope_table(ctx.stream(), dinv.as<float>(), hd, dpos.as<std::int32_t>(), n,
                   dtable.as<float>());
  cuda::rope_apply(ctx.stream(), dx.as<float>(), n, heads, hd, stride, dtable.as<float>());
  expect_close("rope_table", table, to_host<float>(dtable, table.size()), 2e-5f, 2e-5f);
  expect_close("rope_apply", expected, to_host<float>(dx, x.size()), 2e-5f, 2e-5f);
}

TEST(CudaOps, KvAppendAndAttentionMatchCpuForTwoSequences) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  for (int hd : {64, 8, 128}) {
    const int heads = 8, kv_heads = 2, layers = 2, layer = 1, row = kv_heads * hd;
    // Sequence a: 30 cached + 3 new; sequence b: 5 cached + 1 new; different capacities.
    const int cached[2] = {30, 5}, fresh[2] = {3, 1}, cap[2] = {40, 9};
    std::vector<std::vector<float> > host_cache(2);
    std::vector<cuda::DeviceBuffer> dev_cache;
    std::vector<cuda::KvSlot> slots;
    const int n = fresh[0] + fresh[1];
    const auto k_new = random_floats(static_cast<std::size_t>(n) * row, 10);
    const auto v_new = random_floats(static_cast<std::size_t>(n) * row, 11);
    const auto q = random_floats(static_cast<std::size_t>(n) * heads * hd, 12);
    for (int s = 0; s < 2; ++s) {
      const std::size_t plane = static_cast<std::size_t>(cap[s]) * row;
      host_cache[s] = random_floats(layers * 2 * plane, 20 + s);
      dev_cache.push_back(to_device(host_cache[s]));
    }
    for (int s = 0, t = 0; s < 2; ++s)
      for (int i = 0; i < fresh[s]; ++i, ++t)
        slots.push_back(
            {dev_cache[s].as<float>(), cap[s], cached[s] + i, cached[s] + i, 0, nullptr});
    auto dk = to_device(k_new), dv = to_device(v_new), dq = to_device(q), dslots = to_device(slots);
    cuda::DeviceBuffer out(q.size() * sizeof(float));
    cuda::kv_append(ctx.stream(), dk.as<float>(), dv.as<float>(), n, kv_heads, hd,
                    dslots.as<cuda::KvSlot>(), layer);
    cuda::attention(ctx.stream(), dq.as<float>(), n, heads, kv_heads, hd, dslots.as<cuda::KvSlot>(),
                    layer, out.as<float>());

    std::vector<float> expected(q.size());
    for (int s = 0, t0 = 0; s < 2; t0 += fresh[s], ++s) {
      const std::size_t plane = static_cast<std::size_t>(cap[s]) * row;
      float* k = host_cache[s].data() + static_cast<std::size_t>(layer) * 2 * plane;
      float* v = k + plane;
      for (int i = 0; i < fresh[s]; ++i) {
        std::memcpy(k + static_cast<std::size_t>(cached[s] + i) * row,
                    k_new.data() + static_cast<std::size_t>(t0 + i) * row, row * sizeof(float));
        std::memcpy(v + static_cast<std::size_t>(cached[s] + i) * row,
                    v_new.data() + static_cast<std::size_t>(t0 + i) * row, row * sizeof(float));
      }
      cpu::attention(q.data() + static_cast<std::size_t>(t0) * heads * hd, fresh[s], heads,
                     kv_heads, hd, hd, k, v, cached[s],
                     expected.data() + static_cast<std::size_t>(t0) * heads * hd);
      // The appended rows landed where the CPU layout puts them (exact copy).
      const auto dev = to_host<float>(dev_cache[s], host_cache[s].size());
      EXPECT_EQ(0, std::memcmp(dev.data(), host_cache[s].data(), dev.size() * sizeof(float)))
          << "kv_append wrote sequence " << s << " differently from the CPU layout (hd " << hd
          << ")";
    }
    // Scores of O(10) computed in other orders (~1e-6), exp and an online vs two-pass softmax:
    // outputs (weighted means of N(0,1) values) agree to ~1e-6; a wrong mask, head or
    // position would be off by O(0.1).
    expect_close("attention hd " + std::to_string(hd), expected, to_host<float>(out, q.size()),
                 2e-5f, 1e-4f);
  }
}

// A token-tree node reads its ancestors' slots past the tree's start: its output is bitwise
// that of the same keys laid out as a chain (what a sequential decode of its path sees).
TEST(CudaOps, TreeNodeAttentionEqualsItsPathAsAChain) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int heads = 4, kv_heads = 2, hd = 64, row = kv_heads * hd, cap = 64, base = 20;
  // Tree slots base.. : nodes 0..5 with parents (in slots) base-1, base-1, base, base+1, base+3,
  // base+2. Node 4 (slot base+4) has the path base+1, base+3, base+4 (depth 2).
  const std::vector<std::int32_t> path = {base + 1, base + 3, base + 4};
  const auto host = random_floats(2 * static_cast<std::size_t>(cap) * row, 40);
  auto tree_cache = to_device(host);
  std::vector<float> chain_host = host;  // the path's rows moved to slots base, base+1, ...
  for (std::size_t j = 0; j < path.size(); ++j)
    for (int which = 0; which < 2; ++which)
      std::memcpy(chain_host.data() + (which * cap + base + j) * row,
                  host.data() + (which * cap + path[j]) * row, row * sizeof(float));
  auto chain_cache = to_device(chain_host);
  auto dpath = to_device(path);
  const int position = base + 2;
  const std::vector<cuda::KvSlot> tree_slot = {
      {tree_cache.as<float>(), cap, position, base + 4, base, dpath.as<std::int32_t>()}};
  const std::vector<cuda::KvSlot> chain_slot = {
      {chain_cache.as<float>(), cap, position, position, 0, nullptr}};
  auto dtree = to_device(tree_slot), dchain = to_device(chain_slot);
  const auto q = random_floats(static_cast<std::size_t>(heads) * hd, 41);
  auto dq = to_device(q);
  cuda::DeviceBuffer a(q.size() * sizeof(float)), b(q.size() * sizeof(float));
  cuda::attention(ctx.stream(), dq.as<float>(), 1, heads, kv_heads, hd, dtree.as<cuda::KvSlot>(), 0,
                  a.as<float>());
  cuda::attention(ctx.stream(), dq.as<float>(), 1, heads, kv_heads, hd, dchain.as<cuda::KvSlot>(),
                  0, b.as<float>());
  const auto ra = to_host<float>(a, q.size()), rb = to_host<float>(b, q.size());
  EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)));
  // And against the CPU reference on the chain layout.
  std::vector<float> expected(q.size());
  cpu::attention(q.data(), 1, heads, kv_heads, hd, hd, chain_host.data(),
                 chain_host.data() + cap * row, position, expected.data());
  expect_close("tree attention", expected, ra, 2e-5f, 1e-4f);
}

// Compaction: the kept slots' rows land at first, first + 1, ... in every layer, K and V.
TEST(CudaOps, KvKeepMovesTheKeptRows) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int layers = 3, cap = 32, row = 48, first = 10;
  const std::vector<std::int32_t> rows = {1, 2, 5, 9};  // relative to first, ascending
  const auto host = random_floats(static_cast<std::size_t>(layers) * 2 * cap * row, 42);
  auto cache = to_device(host);
  auto drows = to_device(rows);
  cuda::DeviceBuffer scratch(static_cast<std::size_t>(layers) * 2 * rows.size() * row *
                             sizeof(float));
  cuda::kv_keep(ctx.stream(), cache.as<float>(), cap, layers, row, first, drows.as<std::int32_t>(),
                static_cast<int>(rows.size()), scratch.as<float>());
  std::vector<float> expected = host;
  for (int plane = 0; plane < layers * 2; ++plane)
    for (std::size_t j = 0; j < rows.size(); ++j)
      std::memcpy(expected.data() + (static_cast<std::size_t>(plane) * cap + first + j) * row,
                  host.data() + (static_cast<std::size_t>(plane) * cap + first + rows[j]) * row,
                  row * sizeof(float));
  const auto got = to_host<float>(cache, host.size());
  EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)));
}

TEST(CudaOps, AttentionIsBatchInvariant) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int heads = 4, kv_heads = 4, hd = 64, row = kv_heads * hd, cap = 64, start = 20, n = 5;
  auto cache = to_device(random_floats(2 * static_cast<std::size_t>(cap) * row, 30));
  const auto q = random_floats(static_cast<std::size_t>(n) * heads * hd, 31);
  auto dq = to_device(q);
  std::vector<cuda::KvSlot> window;
  for (int i = 0; i < n; ++i)
    window.push_back({cache.as<float>(), cap, start + i, start + i, 0, nullptr});
  auto dwin = to_device(window);
  cuda::DeviceBuffer out(q.size() * sizeof(float)), one(heads * hd * sizeof(float));
  cuda::attention(ctx.stream(), dq.as<float>(), n, heads, kv_heads, hd, dwin.as<cuda::KvSlot>(), 0,
                  out.as<float>());
  const auto batched = to_host<float>(out, q.size());
  for (int i = 0; i < n; ++i) {
    cuda::attention(ctx.stream(), dq.as<float>() + static_cast<std::size_t>(i) * heads * hd, 1,
                    heads, kv_heads, hd, dwin.as<cuda::KvSlot>() + i, 0, one.as<float>());
    const auto alone = to_host<float>(one, static_cast<std::size_t>(heads) * hd);
    EXPECT_EQ(0,
              std::memcmp(alone.data(), batched.data() + static_cast<std::size_t>(i) * heads * hd,
                          alone.size() * sizeof(float)))
        << "query " << i << " of a verify window differs from the same query decoded alone";
  }
}

TEST(CudaOps, ElementwiseOpsMatchCpu) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const std::size_t n = 100003;
  const auto gate = random_floats(n, 40, 4.0f), up = random_floats(n, 41), y = random_floats(n, 42);
  std::vector<float> expected(n);
  cpu::silu_mul(gate.data(), up.data(), expected.data(), n);
  auto dg = to_device(gate), du = to_device(up), dy = to_device(y);
  cuda::silu_mul(ctx.stream(), dg.as<float>(), du.as<float>(), dg.as<float>(), n);
  expect_close("silu_mul", expected, to_host<float>(dg, n), 1e-7f, 1e-6f);

  std::vector<float> sum = y;
  cpu::add_inplace(sum.data(), up.data(), n);
  cuda::add_inplace(ctx.stream(), dy.as<float>(), du.as<float>(), n);
  expect_close("add_inplace", sum, to_host<float>(dy, n), 0.0f, 0.0f);

  const int rows = 7, dim = 301;
  const auto bias = random_floats(dim, 43);
  auto db = to_device(bias);
  std::vector<float> biased(sum.begin(), sum.begin() + rows * dim);
  for (int r = 0; r < rows; ++r) cpu::add_inplace(biased.data() + r * dim, bias.data(), dim);
  cuda::add_bias(ctx.stream(), dy.as<float>(), db.as<float>(), rows, dim);
  expect_close("add_bias", biased, to_host<float>(dy, biased.size()), 0.0f, 0.0f);
}

// A mixture-of-experts layer's weighted sum of its experts' outputs: bitwise the CPU's (the
// same products and adds, in the same order, none fused), zeros for a row without terms.
TEST(CudaOps, CombineRowsIsBitwiseTheCpus) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int rows = 5, pairs = 9;
  const std::size_t width = 301;
  const auto x = random_floats(pairs * width, 44);
  const std::vector<std::int32_t> first = {0, 2, 2, 5, 8, 9}, src = {3, 0, 8, 1, 5, 2, 7, 4, 6};
  const std::vector<float> scale = random_floats(pairs, 45);
  std::vector<float> expected(rows * width);
  cpu::combine_rows(expected.data(), rows, width, x.data(), first.data(), src.data(), scale.data());
  auto dx = to_device(x), dfirst = to_device(first), dsrc = to_device(src),
       dscale = to_device(scale);
  cuda::DeviceBuffer out(expected.size() * sizeof(float));
  cuda::combine_rows(ctx.stream(), out.as<float>(), rows, width, dx.as<float>(),
                     dfirst.as<std::int32_t>(), dsrc.as<std::int32_t>(), dscale.as<float>());
  expect_close("combine_rows", expected, to_host<float>(out, expected.size()), 0.0f, 0.0f);
}

TEST(CudaOps, ArgmaxFollowsTheCpuTieAndNanRules) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int n = 5000;
  std::vector<std::vector<float> > rows;
  rows.push_back(random_floats(n, 50));
  rows.push_back(std::vector<float>(n, 1.0f));  // all tied: index 0
  auto with_tie = random_floats(n, 51);
  with_tie[4000] = with_tie[123] = 100.0f;  // tie: lowest index 123
  rows.push_back(with_tie);
  auto with_nan = random_floats(n, 52);
  with_nan[0] = NAN;
  with_nan[17] = NAN;
  with_nan[999] = 50.0f;
  rows.push_back(with_nan);
  rows.push_back(std::vector<float>(n, NAN));  // all NaN: 0
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  auto dx = to_device(flat);
  cuda::DeviceBuffer out(rows.size() * sizeof(std::int32_t));
  cuda::argmax(ctx.stream(), dx.as<float>(), static_cast<int>(rows.size()), n,
               out.as<std::int32_t>());
  const auto got = to_host<std::int32_t>(out, rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r)
    EXPECT_EQ(cpu::argmax(rows[r].data(), n), got[r]) << "row " << r;
}

TEST(CudaOps, SoftmaxWithTemperatureMatchesCpu) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  const int rows = 3, n = 32000;
  const float temperature = 0.7f;
  const auto x = random_floats(static_cast<std::size_t>(rows) * n, 60, 3.0f);
  std::vector<float> expected(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) expected[i] = x[i] / temperature;
  for (int r = 0; r < rows; ++r) cpu::softmax(expected.data() + static_cast<std::size_t>(r) * n, n);
  auto dx = to_device(x);
  cuda::softmax(ctx.stream(), dx.as<float>(), rows, n, temperature);
  // The CPU sums 32000 terms sequentially (typical relative error ~sqrt(n) * 2^-24 ~ 1e-5).
  expect_close("softmax", expected, to_host<float>(dx, x.size()), 1e-9f, 1e-4f);
}

TEST(CudaOps, LaunchersRejectBadArguments) {
  REQUIRE_DEVICE();
  cuda::DeviceContext& ctx = *context();
  cuda::DeviceBuffer b(1024);
  EXPECT_THROW(cuda::softmax(ctx.stream(), b.as<float>(), 1, 4, 0.0f), Error);
  EXPECT_THROW(
      cuda::attention(ctx.stream(), b.as<float>(), 1, 6, 4, 64, nullptr, 0, b.as<float>() + 64),
      Error);
  EXPECT_THROW(cuda::matmul(ctx.cublas(), ctx.stream(), b.as<float>(), 1, 4, b.get(), DType::kF32,
                            4, nullptr, b.as<float>(), nullptr, 0),
               Error);  // y aliases x
}

#endif  // SPECRUN_HAVE_CUDA
