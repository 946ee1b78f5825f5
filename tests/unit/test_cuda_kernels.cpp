// The CUDA kernels of the projections and the norms against an independent float64 reference,
// by relative L2 error ||out - ref|| / ||ref|| (label "gpu"; attention: test_cuda_attention):
//  - inputs are drawn fresh every run, outputs poisoned with NaN before each launch
//    (cuda_kernel_checks.h), so an element the kernel did not write fails and NaN never passes;
//  - tolerances: float32 arithmetic 1e-5 (far under 1e-3); activations rounded to BF16 for
//    cuBLAS (prefill) 1e-2, to F16 2e-3;
//  - the fused ops (q/k/v in one launch, gate/up with SiLU, residual add with RMSNorm, RMSNorm
//    inside the projections after it, the residual add in a projection's epilogue) give
//    bitwise what the compositions they replace give, on the same device; so do projections
//    and norms launched as programmatic dependent launches or as persistent GEMVs (eager and
//    in a graph);
//  - the projections on the tensor cores (kGemvTensorCores) keep float32's precision and are
//    batch-invariant (a token bitwise the same alone and in a window of up to 64).
// Skips visibly without a CUDA build or without a device.
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaKernels, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no CUDA kernels to test";
}

#else

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpu_test_data.h"
#include "cuda_kernel_checks.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"

using namespace specrun;
using namespace specrun::test;

namespace {

// y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) in float64.
std::vector<double> ref_matmul(const std::vector<float>& x, int n, int in,
                               const std::vector<float>& w, int out,
                               const std::vector<float>* bias) {
  std::vector<double> y(static_cast<std::size_t>(n) * out);
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < out; ++o) {
      double s = bias != nullptr ? (*bias)[o] : 0.0;
      for (int i = 0; i < in; ++i)
        s += static_cast<double>(x[static_cast<std::size_t>(t) * in + i]) *
             w[static_cast<std::size_t>(o) * in + i];
      y[static_cast<std::size_t>(t) * out + o] = s;
    }
  return y;
}

const char* name(DType d) {
  return dtype_name(d);
}

}  // namespace

TEST(CudaKernels, MatmulAgainstFloat64) {
  REQUIRE_DEVICE();
  struct Case {
    int n, in, out;
    bool bias;
  };
  // decode, verify window with an unaligned `in`, a 33-token tree window, prefill (cuBLAS).
  const Case cases[] = {
      {1, 2048, 512, false}, {5, 1000, 300, true}, {33, 512, 256, false}, {150, 512, 384, true}};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::uint32_t salt = 0;
    for (const Case& c : cases) {
      const auto x = randn(static_cast<std::size_t>(c.n) * c.in, ++salt);
      const test::Weights w =
          test::make_weights(randn(static_cast<std::size_t>(c.out) * c.in, ++salt, 0.05f), dt);
      const auto bias = randn(c.out, ++salt);
      const auto ref = ref_matmul(x, c.n, c.in, w.widened, c.out, c.bias ? &bias : nullptr);
      auto dx = upload(x), dw = upload(w.bytes), db = upload(bias);
      auto dy = poisoned(ref.size());
      cuda::DeviceBuffer scratch(
          std::max<std::size_t>(1, cuda::matmul_scratch_bytes(c.n, c.in, dt)));
      cuda::matmul(test::device_context()->cublas(), stream(), dx.as<float>(), c.n, c.in, dw.get(),
                   dt, c.out, c.bias ? db.as<float>() : nullptr, dy.as<float>(), scratch.get(),
                   scratch.bytes());
      const bool rounded = c.n > cuda::kMaxGemvTokens && dt != DType::kF32;
      const double tol = !rounded ? 1e-5 : dt == DType::kBF16 ? 1e-2 : 2e-3;
      expect_l2(std::string("matmul ") + name(dt) + " n=" + std::to_string(c.n) +
                    " in=" + std::to_string(c.in) + " out=" + std::to_string(c.out),
                download(dy, ref.size()), ref, tol);
    }
  }
}

TEST(CudaKernels, QkvInOneLaunchEqualsThreeMatmuls) {
  REQUIRE_DEVICE();
  const int in = 512, outs[3] = {512, 128, 128};
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int n : {1, 5, 33}) {
      const auto x = randn(static_cast<std::size_t>(n) * in, 100 + n);
      std::vector<test::Weights> w;
      std::vector<cuda::DeviceBuffer> dw, dy, dsep;
      const auto bias = randn(outs[0], 7);
      auto db = upload(bias);
      for (int s = 0; s < 3; ++s) {
        w.push_back(
            test::make_weights(randn(static_cast<std::size_t>(outs[s]) * in, 200 + s, 0.05f), dt));
        dw.push_back(upload(w[s].bytes));
        dy.push_back(poisoned(static_cast<std::size_t>(n) * outs[s]));
        dsep.push_back(poisoned(static_cast<std::size_t>(n) * outs[s]));
      }
      auto dx = upload(x);
      cuda::matmul_multi(stream(), dx.as<float>(), n, in, dt, 3, dw[0].get(), outs[0],
                         db.as<float>(), dy[0].as<float>(), dw[1].get(), outs[1], nullptr,
                         dy[1].as<float>(), dw[2].get(), outs[2], nullptr, dy[2].as<float>());
      for (int s = 0; s < 3; ++s)
        cuda::matmul(nullptr, stream(), dx.as<float>(), n, in, dw[s].get(), dt, outs[s],
                     s == 0 ? db.as<float>() : nullptr, dsep[s].as<float>(), nullptr, 0);
      for (int s = 0; s < 3; ++s) {
        const std::size_t count = static_cast<std::size_t>(n) * outs[s];
        const std::string what = std::string("matmul_multi ") + name(dt) +
                                 " n=" + std::to_string(n) + " output " + std::to_string(s);
        const auto fused = download(dy[s], count);
        expect_bitwise(what + " vs matmul", fused, download(dsep[s], count));
        expect_l2(what, fused,
                  ref_matmul(x, n, in, w[s].widened, outs[s], s == 0 ? &bias : nullptr), 1e-5);
      }
    }
  }
}

TEST(CudaKernels, SwigluInOneLaunchEqualsTwoMatmulsAndSiluMul) {
  REQUIRE_DEVICE();
  const int in = 768, rows = 1000;  // rows not a multiple of the block's 4
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int n : {1, 4, 64}) {
      const auto x = randn(static_cast<std::size_t>(n) * in, 300 + n);
      const test::Weights gu =
          test::make_weights(randn(2 * static_cast<std::size_t>(rows) * in, 301, 0.05f), dt);
      auto dx = upload(x), dgu = upload(gu.bytes);
      const std::size_t count = static_cast<std::size_t>(n) * rows;
      auto fused = poisoned(count), g = poisoned(count), u = poisoned(count), y = poisoned(count);
      cuda::swiglu_gemv(stream(), dx.as<float>(), n, in, dgu.get(), dt, rows, fused.as<float>());
      const std::byte* up =
          dgu.as<std::byte>() + static_cast<std::size_t>(rows) * in * dtype_size(dt);
      cuda::matmul(nullptr, stream(), dx.as<float>(), n, in, dgu.get(), dt, rows, nullptr,
                   g.as<float>(), nullptr, 0);
      cuda::matmul(nullptr, stream(), dx.as<float>(), n, in, up, dt, rows, nullptr, u.as<float>(),
                   nullptr, 0);
      cuda::silu_mul(stream(), g.as<float>(), u.as<float>(), y.as<float>(), count);
      const std::string what = std::string("swiglu_gemv ") + name(dt) + " n=" + std::to_string(n);
      const auto out = download(fused, count);
      expect_bitwise(what + " vs matmul+matmul+silu_mul", out, download(y, count));
      std::vector<float> gate_w(gu.widened.begin(),
                                gu.widened.begin() + static_cast<std::ptrdiff_t>(rows) * in);
      std::vector<float> up_w(gu.widened.begin() + static_cast<std::ptrdiff_t>(rows) * in,
                              gu.widened.end());
      const auto rg = ref_matmul(x, n, in, gate_w, rows, nullptr);
      const auto ru = ref_matmul(x, n, in, up_w, rows, nullptr);
      std::vector<double> ref(count);
      for (std::size_t i = 0; i < count; ++i) ref[i] = rg[i] / (1.0 + std::exp(-rg[i])) * ru[i];
      expect_l2(what, out, ref, 1e-5);
    }
  }
}

// The projections on the tensor cores (kGemvTensorCores, kernels/cuda/gemv_mma.cu), for windows
// of 1..64 tokens (one to eight tiles of 8 tokens), of 65 and 200 (blocks of 64: still the GEMV
// path, gemv_tokens() = 512, with no cuBLAS handle given), and row counts not multiples of 16:
//  - float32's precision against float64: at most 1e-5, and at most 8x the CUDA-core kernel's
//    error on the same inputs (or 1e-6): dropping the lowest of the activations' three BF16
//    parts would cost ~3e-6, the middle one ~1e-3;
//  - a sum whose partial sums are all exact in float32 comes out exact: activations
//    1 + 2^-9 + 2^-17 (hi, mid and lo all nonzero) times weights 1;
//  - batch-invariant: every token of a window bitwise equal to the same token computed alone;
//  - q/k/v in one launch and gate/up with SiLU bitwise what their compositions give with it;
//  - where it does not apply (F16 or F32 weights, `in` not a multiple of 32) the CUDA-core kernel
//    runs: bitwise the launch without the flag.
TEST(CudaKernels, TensorCoreProjections) {
  REQUIRE_DEVICE();
  const int tc = cuda::kGemvTensorCores;
  const DType bf = DType::kBF16;
  auto run_matmul = [&](const cuda::DeviceBuffer& dx, int n, int in, const cuda::DeviceBuffer& dw,
                        DType dt, int out, const float* bias, int flags) {
    auto dy = poisoned(static_cast<std::size_t>(n) * out);
    cuda::matmul(nullptr, stream(), dx.as<float>(), n, in, dw.get(), dt, out, bias, dy.as<float>(),
                 nullptr, 0, flags);
    return download(dy, static_cast<std::size_t>(n) * out);
  };
  {  // precision and batch invariance
    const int in = 2048, out = 520;
    const test::Weights w =
        test::make_weights(randn(static_cast<std::size_t>(out) * in, 600, 0.05f), bf);
    const auto bias = randn(out, 601);
    auto dw = upload(w.bytes), db = upload(bias);
    ASSERT_EQ(cuda::gemv_tokens(tc, bf, in), cuda::kMaxTensorCoreTokens);
    ASSERT_EQ(cuda::gemv_tokens(0, bf, in), cuda::kMaxGemvTokens);
    ASSERT_EQ(cuda::gemv_tokens(tc, DType::kF16, in), cuda::kMaxGemvTokens);
    ASSERT_EQ(cuda::gemv_tokens(tc, bf, in + 8), cuda::kMaxGemvTokens);
    for (int n : {1, 5, 8, 9, 17, 33, 64, 65, 200}) {
      const auto x = randn(static_cast<std::size_t>(n) * in, 610 + n);
      auto dx = upload(x);
      const auto ref = ref_matmul(x, n, in, w.widened, out, &bias);
      const auto y = run_matmul(dx, n, in, dw, bf, out, db.as<float>(), tc);
      // The CUDA-core kernel's error on (at most) the first 64 tokens: its own path's limit.
      const int m = std::min(n, cuda::kMaxGemvTokens);
      const std::vector<float> xm(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(m) * in);
      auto dxm = upload(xm);
      const std::vector<double> refm(ref.begin(),
                                     ref.begin() + static_cast<std::ptrdiff_t>(m) * out);
      const double e_cuda = rel_l2(run_matmul(dxm, m, in, dw, bf, out, db.as<float>(), 0), refm);
      const std::string what = "tensor cores n=" + std::to_string(n);
      expect_l2(what, y, ref, std::min(1e-5, std::max(8 * e_cuda, 1e-6)));
      std::cout << "    (CUDA cores: rel L2 " << e_cuda << ")\n";
      for (int t = 0; t < n; ++t) {
        const std::vector<float> xt(x.begin() + static_cast<std::ptrdiff_t>(t) * in,
                                    x.begin() + static_cast<std::ptrdiff_t>(t + 1) * in);
        auto dxt = upload(xt);
        const std::vector<float> window_row(y.begin() + static_cast<std::ptrdiff_t>(t) * out,
                                            y.begin() + static_cast<std::ptrdiff_t>(t + 1) * out);
        expect_bitwise(what + ": token " + std::to_string(t) + " in the window vs alone",
                       window_row, run_matmul(dxt, 1, in, dw, bf, out, db.as<float>(), tc));
      }
    }
  }
  {  // exact sums need all three parts: x = 1 + 2^-9 + 2^-17 splits into hi 1, mid 2^-9 (a tie
     // rounded to even) and lo 2^-17; 128 x = 128 + 2^-2 + 2^-10, every partial sum exact
    const int in = 128, out = 48, n = 3;
    const float xv = 1.0f + std::ldexp(1.0f, -9) + std::ldexp(1.0f, -17);
    auto dx = upload(std::vector<float>(static_cast<std::size_t>(n) * in, xv));
    auto dw = upload(test::make_weights(std::vector<float>(out * in, 1.0f), bf).bytes);
    const float want = 128.0f + std::ldexp(1.0f, -2) + std::ldexp(1.0f, -10);
    for (float v : run_matmul(dx, n, in, dw, bf, out, nullptr, tc))
      ASSERT_EQ(v, want) << "a sum of exact float32 partial sums came out inexact" << seed_note();
  }
  {  // fused launches: bitwise their compositions
    const int in = 1024, outs[3] = {1000, 256, 136};
    std::vector<cuda::DeviceBuffer> dw;
    std::vector<test::Weights> w;
    for (int s = 0; s < 3; ++s) {
      w.push_back(
          test::make_weights(randn(static_cast<std::size_t>(outs[s]) * in, 620 + s, 0.05f), bf));
      dw.push_back(upload(w[s].bytes));
    }
    const int rows = 1000;
    const test::Weights gu =
        test::make_weights(randn(2 * static_cast<std::size_t>(rows) * in, 625, 0.05f), bf);
    auto dgu = upload(gu.bytes);
    const std::byte* up = dgu.as<std::byte>() + static_cast<std::size_t>(rows) * in * 2;
    for (int n : {1, 9, 33, 64, 130}) {
      const auto x = randn(static_cast<std::size_t>(n) * in, 630 + n);
      auto dx = upload(x);
      std::vector<cuda::DeviceBuffer> dy;
      for (int s = 0; s < 3; ++s) dy.push_back(poisoned(static_cast<std::size_t>(n) * outs[s]));
      cuda::matmul_multi(stream(), dx.as<float>(), n, in, bf, 3, dw[0].get(), outs[0], nullptr,
                         dy[0].as<float>(), dw[1].get(), outs[1], nullptr, dy[1].as<float>(),
                         dw[2].get(), outs[2], nullptr, dy[2].as<float>(), tc);
      for (int s = 0; s < 3; ++s) {
        const std::size_t count = static_cast<std::size_t>(n) * outs[s];
        const std::string what =
            "tensor cores matmul_multi n=" + std::to_string(n) + " output " + std::to_string(s);
        const auto fused = download(dy[s], count);
        expect_bitwise(what + " vs matmul", fused,
                       run_matmul(dx, n, in, dw[s], bf, outs[s], nullptr, tc));
        expect_l2(what, fused, ref_matmul(x, n, in, w[s].widened, outs[s], nullptr), 1e-5);
      }
      const std::size_t count = static_cast<std::size_t>(n) * rows;
      auto fused = poisoned(count), g = poisoned(count), u = poisoned(count), y = poisoned(count);
      cuda::swiglu_gemv(stream(), dx.as<float>(), n, in, dgu.get(), bf, rows, fused.as<float>(),
                        tc);
      cuda::matmul(nullptr, stream(), dx.as<float>(), n, in, dgu.get(), bf, rows, nullptr,
                   g.as<float>(), nullptr, 0, tc);
      cuda::matmul(nullptr, stream(), dx.as<float>(), n, in, up, bf, rows, nullptr, u.as<float>(),
                   nullptr, 0, tc);
      cuda::silu_mul(stream(), g.as<float>(), u.as<float>(), y.as<float>(), count);
      expect_bitwise(
          "tensor cores swiglu_gemv n=" + std::to_string(n) + " vs matmul+matmul+silu_mul",
          download(fused, count), download(y, count));
    }
  }
  {  // where the tensor-core kernel does not apply: the CUDA-core kernel, bitwise
    struct Case {
      DType dt;
      int in;
    };
    for (const Case& c : {Case{DType::kF16, 512}, Case{DType::kF32, 512}, Case{bf, 1000}}) {
      const int n = 5, out = 72;
      auto dx = upload(randn(static_cast<std::size_t>(n) * c.in, 640));
      auto dw = upload(
          test::make_weights(randn(static_cast<std::size_t>(out) * c.in, 641, 0.05f), c.dt).bytes);
      expect_bitwise(std::string("tensor-core flag, ") + name(c.dt) + " in=" + std::to_string(c.in),
                     run_matmul(dx, n, c.in, dw, c.dt, out, nullptr, tc),
                     run_matmul(dx, n, c.in, dw, c.dt, out, nullptr, 0));
    }
  }
}

TEST(CudaKernels, AddRmsnormEqualsAddThenRmsnorm) {
  REQUIRE_DEVICE();
  const int dim = 2048;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int n : {1, 7, 200}) {
      const std::size_t count = static_cast<std::size_t>(n) * dim;
      const auto x = randn(count, 400 + n, 2.0f), delta = randn(count, 401 + n);
      const test::Weights w = test::make_weights(randn(dim, 402, 1.0f), dt);
      auto x1 = upload(x), x2 = upload(x), d = upload(delta), dw = upload(w.bytes);
      auto y1 = poisoned(count), y2 = poisoned(count);
      cuda::add_rmsnorm(stream(), x1.as<float>(), d.as<float>(), n, dim, dw.get(), dt, 1e-5f,
                        y1.as<float>());
      cuda::add_inplace(stream(), x2.as<float>(), d.as<float>(), count);
      cuda::rmsnorm(stream(), x2.as<float>(), n, dim, dw.get(), dt, 1e-5f, y2.as<float>());
      const std::string what = std::string("add_rmsnorm ") + name(dt) + " n=" + std::to_string(n);
      const auto out = download(y1, count);
      expect_bitwise(what + " (output) vs add_inplace+rmsnorm", out, download(y2, count));
      expect_bitwise(what + " (residual) vs add_inplace", download(x1, count), download(x2, count));
      std::vector<double> ref(count);
      for (int t = 0; t < n; ++t) {
        double ss = 0;
        for (int i = 0; i < dim; ++i) {
          const double v = static_cast<double>(x[t * dim + i]) + delta[t * dim + i];
          ss += v * v;
        }
        const double scale = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; ++i)
          ref[t * dim + i] =
              (static_cast<double>(x[t * dim + i]) + delta[t * dim + i]) * scale * w.widened[i];
      }
      expect_l2(what, out, ref, 1e-5);
    }
  }
}

// A layer's chain of launches as a step graph issues it: add + RMSNorm writes y; q/k/v, the
// SwiGLU input and the down projection read what the launch before wrote; a second add + RMSNorm
// adds the down projection to the residual (dependent with the projections: its launch is
// hidden behind theirs). As programmatic
// dependent launches, as persistent GEMVs, and both (eager, and captured in a graph and
// replayed), every output is bitwise that of the plain launches; every buffer starts as NaN, so
// a projection that read its input before the kernel writing it had finished, or a row no block
// computed, would show. Row counts not multiples of the 4-row groups; the down projection's
// 2818 inputs take the unaligned path. The same for the tensor-core kernel (kGemvTensorCores:
// its launch flags against its plain launch; the down projection falls back to the CUDA cores).
TEST(CudaKernels, DependentAndPersistentLaunchesEqualPlainOnes) {
  REQUIRE_DEVICE();
  const int dim = 1024, qkv_out[3] = {1002, 250, 250}, inter = 2818;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (int n : {1, 5, 33}) {
      const std::size_t nd = static_cast<std::size_t>(n) * dim;
      const auto x0 = randn(nd, 500 + n, 2.0f), delta = randn(nd, 501 + n);
      const test::Weights norm = test::make_weights(randn(dim, 502, 1.0f), dt);
      std::vector<test::Weights> wqkv;
      for (int s = 0; s < 3; ++s)
        wqkv.push_back(test::make_weights(
            randn(static_cast<std::size_t>(qkv_out[s]) * dim, 503 + s, 0.05f), dt));
      const test::Weights gu =
          test::make_weights(randn(2 * static_cast<std::size_t>(inter) * dim, 506, 0.05f), dt);
      const test::Weights down =
          test::make_weights(randn(static_cast<std::size_t>(dim) * inter, 507, 0.05f), dt);
      auto dnorm = upload(norm.bytes), dgu = upload(gu.bytes), ddown = upload(down.bytes),
           dd = upload(delta);
      std::vector<cuda::DeviceBuffer> dq;
      for (int s = 0; s < 3; ++s) dq.push_back(upload(wqkv[s].bytes));
      constexpr int kOuts = 7;
      const std::size_t sizes[kOuts] = {nd,
                                        static_cast<std::size_t>(n) * qkv_out[0],
                                        static_cast<std::size_t>(n) * qkv_out[1],
                                        static_cast<std::size_t>(n) * qkv_out[2],
                                        static_cast<std::size_t>(n) * inter,
                                        nd,
                                        nd};
      cuda::DeviceBuffer dx(nd * sizeof(float));
      std::vector<cuda::DeviceBuffer> out;  // y, q, k, v, act, down, y2
      for (std::size_t size : sizes) out.emplace_back(size * sizeof(float));
      auto reset = [&] {
        CUDA_CHECK(cudaMemcpyAsync(dx.get(), x0.data(), nd * sizeof(float), cudaMemcpyHostToDevice,
                                   stream()));
        for (int i = 0; i < kOuts; ++i)
          CUDA_CHECK(cudaMemsetAsync(out[i].get(), 0xFF, sizes[i] * sizeof(float), stream()));
      };
      auto chain = [&](int flags) {
        cuda::add_rmsnorm(stream(), dx.as<float>(), dd.as<float>(), n, dim, dnorm.get(), dt, 1e-5f,
                          out[0].as<float>());
        cuda::matmul_multi(stream(), out[0].as<float>(), n, dim, dt, 3, dq[0].get(), qkv_out[0],
                           nullptr, out[1].as<float>(), dq[1].get(), qkv_out[1], nullptr,
                           out[2].as<float>(), dq[2].get(), qkv_out[2], nullptr, out[3].as<float>(),
                           flags);
        cuda::swiglu_gemv(stream(), out[0].as<float>(), n, dim, dgu.get(), dt, inter,
                          out[4].as<float>(), flags);
        cuda::matmul_multi(stream(), out[4].as<float>(), n, inter, dt, 1, ddown.get(), dim, nullptr,
                           out[5].as<float>(), nullptr, 0, nullptr, nullptr, nullptr, 0, nullptr,
                           nullptr, flags);
        cuda::add_rmsnorm(stream(), dx.as<float>(), out[5].as<float>(), n, dim, dnorm.get(), dt,
                          1e-5f, out[6].as<float>(), (flags & cuda::kGemvDependent) != 0);
      };
      // The outputs, then the residual stream.
      auto results = [&] {
        std::vector<std::vector<float> > r;
        for (int i = 0; i < kOuts; ++i) r.push_back(download(out[i], sizes[i]));
        r.push_back(download(dx, nd));
        return r;
      };
      for (int base : {0, cuda::kGemvTensorCores}) {
        reset();
        chain(base);
        const auto plain = results();
        const char* names[kOuts + 1] = {"y", "q", "k", "v", "act", "down", "y2", "residual"};
        for (int i = 0; i <= kOuts; ++i)
          for (float v : plain[i])
            ASSERT_TRUE(std::isfinite(v))
                << names[i] << ": plain chain, flags " << base << seed_note();
        const int kinds[3] = {base | cuda::kGemvDependent, base | cuda::kGemvPersistent,
                              base | cuda::kGemvDependent | cuda::kGemvPersistent};
        for (int flags : kinds) {
          reset();
          chain(flags);
          const auto eager = results();
          const auto replays = graph_replays([&] { chain(flags); }, reset, results);
          for (int i = 0; i <= kOuts; ++i) {
            const std::string what = std::string("launch flags ") + std::to_string(flags) + " " +
                                     name(dt) + " n=" + std::to_string(n) + " " + names[i];
            expect_bitwise(what + " eager", eager[i], plain[i]);
            expect_bitwise(what + " graph", replays[0][i], plain[i]);
            expect_bitwise(what + " graph again", replays[1][i], plain[i]);
          }
        }
      }
    }
  }
}

// The RMSNorm before q/k/v and before gate/up done inside the projections' launch (matmul_multi
// and swiglu_gemv given a norm), and the residual add after o_proj and down_proj in the GEMV's
// epilogue (matmul_accumulate), chained as the Llama graph's step runs them: every output and
// the residual stream bitwise the chain of compositions (rmsnorm, the plain projections,
// add_inplace) with the same launch flags, on the CUDA cores and the tensor cores, persistent
// with and without dependent launches, eager and in a graph (replayed twice); every buffer
// starts as NaN, so a projection that read x before its writer finished would show. Decode, a
// window of 5 x 2048 inputs (the 40 KB of shared memory the norm may take), 8 tokens, and a
// width of 1000 (unaligned rows: the scalar kernel; not a multiple of 32: no tensor cores), and
// a residual stream 4 bytes off 16-byte alignment (the fused norm's rows, in shared memory, are
// aligned: the kernel must be the one the plain launch on an aligned buffer takes).
// gemv_norm_fits refuses what does not fit, and a launch that asks anyway throws. The epilogue
// add alone: every pass size of the GEMV path, bitwise matmul + add_inplace.
TEST(CudaKernels, NormAndResidualInTheProjectionsEqualTheirCompositions) {
  REQUIRE_DEVICE();
  const int p = cuda::kGemvPersistent;
  EXPECT_TRUE(cuda::gemv_norm_fits(1, 8192, p));
  EXPECT_TRUE(cuda::gemv_norm_fits(5, 2048, p));
  EXPECT_FALSE(cuda::gemv_norm_fits(6, 2048, p));                     // 48 KB
  EXPECT_FALSE(cuda::gemv_norm_fits(9, 64, p));                       // more than kMaxNormTokens
  EXPECT_FALSE(cuda::gemv_norm_fits(1, 2048, cuda::kGemvDependent));  // not persistent
  const float eps = 1e-5f;
  struct Case {
    int n, dim;
    int offset;  // the residual stream starts this many floats into its buffer
  };
  for (const Case c :
       {Case{1, 2048, 0}, Case{5, 2048, 0}, Case{8, 1024, 0}, Case{3, 1000, 0}, Case{2, 1024, 1}}) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      const int n = c.n, dim = c.dim, q_out = dim, kv_out = dim / 4 + 2, inter = 2 * dim + 6;
      const std::size_t nd = static_cast<std::size_t>(n) * dim;
      std::uint32_t salt = 700 + static_cast<std::uint32_t>(n * 10 + (dt == DType::kF32));
      const auto x0 = randn(nd, ++salt, 2.0f);
      const test::Weights n1 = test::make_weights(randn(dim, ++salt, 1.0f), dt),
                          n2 = test::make_weights(randn(dim, ++salt, 1.0f), dt);
      const int outs[3] = {q_out, kv_out, kv_out};
      std::vector<cuda::DeviceBuffer> wqkv;
      for (int s = 0; s < 3; ++s)
        wqkv.push_back(upload(
            test::make_weights(randn(static_cast<std::size_t>(outs[s]) * dim, ++salt, 0.05f), dt)
                .bytes));
      auto wo =
          upload(test::make_weights(randn(static_cast<std::size_t>(dim) * q_out, ++salt, 0.05f), dt)
                     .bytes);
      auto gu = upload(
          test::make_weights(randn(2 * static_cast<std::size_t>(inter) * dim, ++salt, 0.05f), dt)
              .bytes);
      auto wd =
          upload(test::make_weights(randn(static_cast<std::size_t>(dim) * inter, ++salt, 0.05f), dt)
                     .bytes);
      auto bo = upload(randn(dim, ++salt)), dn1 = upload(n1.bytes), dn2 = upload(n2.bytes);
      // q, k, v, act, then the residual stream; xn and tmp: the compositions' scratch.
      const std::size_t sizes[5] = {
          static_cast<std::size_t>(n) * q_out, static_cast<std::size_t>(n) * kv_out,
          static_cast<std::size_t>(n) * kv_out, static_cast<std::size_t>(n) * inter, nd + c.offset};
      std::vector<cuda::DeviceBuffer> out;
      for (std::size_t size : sizes) out.emplace_back(size * sizeof(float));
      cuda::DeviceBuffer xn(nd * sizeof(float)), tmp(nd * sizeof(float));
      float* x = out[4].as<float>() + c.offset;
      auto reset = [&] {
        for (int i = 0; i < 4; ++i)
          CUDA_CHECK(cudaMemsetAsync(out[i].get(), 0xFF, sizes[i] * sizeof(float), stream()));
        CUDA_CHECK(cudaMemsetAsync(xn.get(), 0xFF, nd * sizeof(float), stream()));
        CUDA_CHECK(cudaMemsetAsync(tmp.get(), 0xFF, nd * sizeof(float), stream()));
        CUDA_CHECK(
            cudaMemcpyAsync(x, x0.data(), nd * sizeof(float), cudaMemcpyHostToDevice, stream()));
      };
      auto qkv = [&](const float* in, int flags, const void* norm) {
        cuda::matmul_multi(stream(), in, n, dim, dt, 3, wqkv[0].get(), outs[0], nullptr,
                           out[0].as<float>(), wqkv[1].get(), outs[1], nullptr, out[1].as<float>(),
                           wqkv[2].get(), outs[2], nullptr, out[2].as<float>(), flags, norm, dt,
                           eps);
      };
      auto fused = [&](int flags) {
        qkv(x, flags, dn1.get());
        cuda::matmul_accumulate(stream(), out[0].as<float>(), n, q_out, wo.get(), dt, dim,
                                bo.as<float>(), x, flags);
        cuda::swiglu_gemv(stream(), x, n, dim, gu.get(), dt, inter, out[3].as<float>(), flags,
                          dn2.get(), dt, eps);
        cuda::matmul_accumulate(stream(), out[3].as<float>(), n, inter, wd.get(), dt, dim, nullptr,
                                x, flags);
      };
      auto composed = [&](int flags) {
        const bool dep = (flags & cuda::kGemvDependent) != 0;
        cuda::rmsnorm(stream(), x, n, dim, dn1.get(), dt, eps, xn.as<float>(), dep);
        qkv(xn.as<float>(), flags, nullptr);
        cuda::matmul_multi(stream(), out[0].as<float>(), n, q_out, dt, 1, wo.get(), dim,
                           bo.as<float>(), tmp.as<float>(), nullptr, 0, nullptr, nullptr, nullptr,
                           0, nullptr, nullptr, flags);
        cuda::add_inplace(stream(), x, tmp.as<float>(), nd);
        cuda::rmsnorm(stream(), x, n, dim, dn2.get(), dt, eps, xn.as<float>(), false);
        cuda::swiglu_gemv(stream(), xn.as<float>(), n, dim, gu.get(), dt, inter, out[3].as<float>(),
                          flags);
        cuda::matmul_multi(stream(), out[3].as<float>(), n, inter, dt, 1, wd.get(), dim, nullptr,
                           tmp.as<float>(), nullptr, 0, nullptr, nullptr, nullptr, 0, nullptr,
                           nullptr, flags);
        cuda::add_inplace(stream(), x, tmp.as<float>(), nd);
      };
      auto results = [&] {
        std::vector<std::vector<float> > r;
        for (int i = 0; i < 5; ++i) r.push_back(download(out[i], sizes[i]));
        r[4].erase(r[4].begin(), r[4].begin() + c.offset);
        return r;
      };
      for (int flags : {p, p | cuda::kGemvDependent, p | cuda::kGemvTensorCores,
                        p | cuda::kGemvTensorCores | cuda::kGemvDependent}) {
        const std::string what = std::string(name(dt)) + " n=" + std::to_string(n) +
                                 " dim=" + std::to_string(dim) + " flags " + std::to_string(flags);
        ASSERT_TRUE(cuda::gemv_norm_fits(n, dim, flags)) << what;
        reset();
        composed(flags);
        const auto want = results();
        for (const auto& r : want)
          for (float v : r) ASSERT_TRUE(std::isfinite(v)) << what << ": composition" << seed_note();
        reset();
        fused(flags);
        const auto eager = results();
        const auto replays = graph_replays([&] { fused(flags); }, reset, results);
        const char* names[5] = {"q", "k", "v", "act", "residual"};
        for (int i = 0; i < 5; ++i) {
          expect_bitwise(what + " " + names[i] + " eager", eager[i], want[i]);
          expect_bitwise(what + " " + names[i] + " graph", replays[0][i], want[i]);
          expect_bitwise(what + " " + names[i] + " graph again", replays[1][i], want[i]);
        }
      }
      if (n == 5 && dim == 2048) {  // 6 tokens would take 48 KB: refused before any launch
        EXPECT_THROW(cuda::swiglu_gemv(stream(), x, 6, dim, gu.get(), dt, inter, out[3].as<float>(),
                                       p, dn2.get(), dt, eps),
                     Error);
      }
    }
  }
  // The epilogue add for every pass size of the GEMV path (up to 512 tokens on the tensor cores).
  const int in = 1024, rows = 700;
  for (int flags : {0, p, cuda::kGemvTensorCores, p | cuda::kGemvTensorCores}) {
    for (int n : {1, 7, 64, 200}) {
      if (n > cuda::gemv_tokens(flags, DType::kBF16, in)) continue;
      const std::size_t count = static_cast<std::size_t>(n) * rows;
      const auto x = randn(static_cast<std::size_t>(n) * in, 800 + n), y0 = randn(count, 801 + n);
      auto dx = upload(x), dy1 = upload(y0), dy2 = upload(y0), dtmp = poisoned(count);
      auto dw = upload(
          test::make_weights(randn(static_cast<std::size_t>(rows) * in, 802, 0.05f), DType::kBF16)
              .bytes);
      auto db = upload(randn(rows, 803));
      cuda::matmul_accumulate(stream(), dx.as<float>(), n, in, dw.get(), DType::kBF16, rows,
                              db.as<float>(), dy1.as<float>(), flags);
      cuda::matmul(nullptr, stream(), dx.as<float>(), n, in, dw.get(), DType::kBF16, rows,
                   db.as<float>(), dtmp.as<float>(), nullptr, 0, flags);
      cuda::add_inplace(stream(), dy2.as<float>(), dtmp.as<float>(), count);
      expect_bitwise("matmul_accumulate n=" + std::to_string(n) + " flags " + std::to_string(flags),
                     download(dy1, count), download(dy2, count));
    }
  }
}

#endif  // SPECRUN_HAVE_CUDA
