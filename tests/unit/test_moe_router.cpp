// DeepSeek-V3's router and shared experts on the CPU, against float64 references written here
// from Hugging Face's DeepseekV3TopkRouter / DeepseekV3MoE and DeepSeek's inference/model.py
// (Gate with topk_method "noaux_tc", scoring_func "sigmoid"):
//  - cpu::route_noaux_tc: sigmoid scores, selection on score + e_score_correction_bias among the
//    topk_group best groups (group score: its two highest biased scores), weights the unbiased
//    scores, normalised, times routed_scaling_factor; ties to the lower index;
//  - an expert of an excluded group is never chosen, however high its score (DeepSeek's
//    reference masks with -inf; Hugging Face's fill of 0.0 could pick one when every eligible
//    biased score is negative, which this test plants);
//  - MoeBlock with the noaux_tc rule and shared experts: routed sum + shared SwiGLU.
// The whole DeepSeek-V3 model against numpy: tests/e2e/deepseek_reference.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "kernels/cpu/ops.h"
#include "model/moe_block.h"

using namespace specrun;

namespace {

struct Routed {
  std::vector<int> experts;     // [top_k], by descending biased score
  std::vector<double> weights;  // [top_k]
};

// One row by the reference rule, in float64, by sorting (not by the kernel's insertion).
Routed reference_route(const std::vector<float>& logits, const std::vector<float>& bias,
                       int n_group, int topk_group, int top_k, bool renormalise, double scale) {
  const int E = static_cast<int>(logits.size()), per = E / n_group;
  std::vector<double> s(E), c(E);
  for (int e = 0; e < E; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    c[e] = s[e] + bias[e];
  }
  std::vector<int> groups(n_group);
  std::iota(groups.begin(), groups.end(), 0);
  std::vector<double> gscore(n_group);
  for (int g = 0; g < n_group; ++g) {
    std::vector<double> v(c.begin() + g * per, c.begin() + (g + 1) * per);
    std::sort(v.rbegin(), v.rend());
    gscore[g] = n_group > 1 ? v[0] + v[1] : 0.0;
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [&](int a, int b) { return gscore[a] > gscore[b]; });
  std::vector<int> eligible;
  for (int i = 0; i < topk_group; ++i)
    for (int e = groups[i] * per; e < (groups[i] + 1) * per; ++e) eligible.push_back(e);
  std::sort(eligible.begin(), eligible.end());
  std::stable_sort(eligible.begin(), eligible.end(), [&](int a, int b) { return c[a] > c[b]; });
  Routed r;
  r.experts.assign(eligible.begin(), eligible.begin() + top_k);
  double total = 0.0;
  for (int e : r.experts) total += s[e];
  for (int e : r.experts)
    r.weights.push_back((renormalise ? s[e] / (total + 1e-20) : s[e]) * scale);
  return r;
}

TEST(NoauxTcRouter, AgreesWithAFloat64ReferenceOnRandomRows) {
  std::mt19937 rng(43);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::uniform_real_distribution<float> bias_value(-0.4f, 0.4f);
  struct Case {
    int experts, n_group, topk_group, top_k;
    bool renormalise;
    float scale;
  };
  for (const Case& k : {Case{16, 4, 2, 4, true, 2.5f}, Case{32, 8, 3, 6, true, 2.827f},
                        Case{12, 1, 1, 3, false, 1.0f}, Case{64, 8, 4, 8, true, 1.0f}}) {
    SCOPED_TRACE(std::to_string(k.experts) + " experts, " + std::to_string(k.n_group) +
                 " groups, top " + std::to_string(k.topk_group) + " groups, top_k " +
                 std::to_string(k.top_k));
    const int n = 64;
    std::vector<float> logits(static_cast<std::size_t>(n) * k.experts), bias(k.experts);
    for (float& v : logits) v = logit(rng);
    for (float& v : bias) v = bias_value(rng);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n) * k.top_k);
    std::vector<float> w(ids.size());
    cpu::route_noaux_tc(logits.data(), n, k.experts, bias.data(), k.n_group, k.topk_group, k.top_k,
                        k.renormalise, k.scale, ids.data(), w.data());
    for (int t = 0; t < n; ++t) {
      std::vector<float> row(logits.begin() + t * k.experts, logits.begin() + (t + 1) * k.experts);
      const Routed r =
          reference_route(row, bias, k.n_group, k.topk_group, k.top_k, k.renormalise, k.scale);
      for (int j = 0; j < k.top_k; ++j) {
        EXPECT_EQ(ids[t * k.top_k + j], r.experts[j]) << "row " << t << ", choice " << j;
        EXPECT_NEAR(w[t * k.top_k + j], r.weights[j], 2e-6 * std::max(1.0, r.weights[j]))
            << "row " << t << ", choice " << j;
      }
    }
  }
}

TEST(NoauxTcRouter, AnExcludedGroupsExpertIsNeverChosen) {
  // 8 experts in 4 groups of 2, one group eligible, top_k 2. Group 3 holds the single highest
  // biased score (expert 6) but a very low second one (expert 7), so its group score (-4.23)
  // loses to group 1's (-1.78) and groups 0 and 2's (-3.46); every
  // eligible biased score is negative (large negative biases), so a fill of 0.0 for excluded
  // experts would pick experts of other groups. The two chosen must be group 1's, 2 and 3.
  const std::vector<float> logits = {-1.0f, -1.0f, 0.5f, 0.4f, -1.0f, -1.0f, 3.0f, -4.0f};
  const std::vector<float> bias = {-2.0f, -2.0f, -1.5f, -1.5f, -2.0f, -2.0f, -0.2f, -5.0f};
  std::vector<std::int32_t> ids(2);
  std::vector<float> w(2);
  cpu::route_noaux_tc(logits.data(), 1, 8, bias.data(), 4, 1, 2, true, 1.0f, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<std::int32_t>{2, 3}));
  const double s2 = 1.0 / (1.0 + std::exp(-0.5)), s3 = 1.0 / (1.0 + std::exp(-0.4));
  EXPECT_NEAR(w[0], s2 / (s2 + s3), 1e-6);
  EXPECT_NEAR(w[1], s3 / (s2 + s3), 1e-6);
  const Routed r = reference_route(logits, bias, 4, 1, 2, true, 1.0);
  EXPECT_EQ(r.experts, (std::vector<int>{2, 3}));
}

TEST(NoauxTcRouter, TiesGoToTheLowerIndexAndGroupsTooAndScaleMultipliesTheWeights) {
  // Equal logits and biases everywhere: groups 0 and 1 (lower first), experts 0, 1, 2 in order.
  const std::vector<float> logits(8, 0.25f), bias(8, 0.1f);
  std::vector<std::int32_t> ids(3);
  std::vector<float> w(3);
  cpu::route_noaux_tc(logits.data(), 1, 8, bias.data(), 4, 2, 3, true, 2.5f, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<std::int32_t>{0, 1, 2}));
  for (float v : w) EXPECT_NEAR(v, 2.5f / 3.0f, 1e-6);
  cpu::route_noaux_tc(logits.data(), 1, 8, bias.data(), 4, 2, 3, false, 2.5f, ids.data(), w.data());
  for (float v : w) EXPECT_NEAR(v, 2.5 / (1.0 + std::exp(-0.25)), 1e-6);
}

// Host float32 matrix [rows, cols] of N(0, scale).
std::vector<float> random_matrix(std::mt19937& rng, int rows, int cols, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> m(static_cast<std::size_t>(rows) * cols);
  for (float& v : m) v = d(rng);
  return m;
}

HostTensor host(const std::vector<float>& m, int rows, int cols) {
  return HostTensor{reinterpret_cast<const std::byte*>(m.data()), DType::kF32, rows, cols};
}

// y = W x for W [out, in], float64.
std::vector<double> matvec(const std::vector<float>& w, int out, int in, const double* x) {
  std::vector<double> y(out, 0.0);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) y[o] += static_cast<double>(w[o * in + i]) * x[i];
  return y;
}

// down(silu(gate x) * up x), float64.
std::vector<double> swiglu_mlp(const std::vector<float>& gate, const std::vector<float>& up,
                               const std::vector<float>& down, int dim, int width,
                               const double* x) {
  std::vector<double> g = matvec(gate, width, dim, x), u = matvec(up, width, dim, x);
  for (int i = 0; i < width; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(down, dim, width, g.data());
}

TEST(DeepseekMoeBlock, RoutedExpertsByNoauxTcPlusSharedExpertsAgreeWithFloat64) {
  const int dim = 48, E = 8, width = 24, shared_width = 2 * width, top_k = 2, n = 13;
  std::mt19937 rng(7);
  CpuBackend b(1);
  std::vector<float> norm(dim, 1.0f);
  const std::vector<float> router = random_matrix(rng, E, dim, 0.5f);
  std::vector<std::vector<float>> gate, up, down;
  for (int e = 0; e < E; ++e) {
    gate.push_back(random_matrix(rng, width, dim, 0.2f));
    up.push_back(random_matrix(rng, width, dim, 0.2f));
    down.push_back(random_matrix(rng, dim, width, 0.2f));
  }
  const std::vector<float> sh_gate = random_matrix(rng, shared_width, dim, 0.2f),
                           sh_up = random_matrix(rng, shared_width, dim, 0.2f),
                           sh_down = random_matrix(rng, dim, shared_width, 0.2f);
  const std::vector<float> bias = {0.1f, -0.2f, 0.05f, 0.3f, -0.1f, 0.0f, 0.2f, -0.3f};

  std::size_t bytes = b.weight_bytes(host(norm, 1, dim), WeightUse::kVector) +
                      b.weight_bytes(host(router, E, dim), WeightUse::kLinear) +
                      2 * b.weight_bytes(host(sh_gate, shared_width, dim), WeightUse::kGateUp) +
                      b.weight_bytes(host(sh_down, dim, shared_width), WeightUse::kLinear);
  for (int e = 0; e < E; ++e)
    bytes += 2 * b.weight_bytes(host(gate[e], width, dim), WeightUse::kGateUp) +
             b.weight_bytes(host(down[e], dim, width), WeightUse::kLinear);
  b.reserve_weights(bytes);
  const CpuBackend::Weight w_norm = b.prepare(host(norm, 1, dim), WeightUse::kVector);
  const CpuBackend::Weight w_router = b.prepare(host(router, E, dim), WeightUse::kLinear);
  std::vector<CpuBackend::Weight> w_gate_up, w_down;
  for (int e = 0; e < E; ++e) {
    w_gate_up.push_back(b.prepare_pair(host(gate[e], width, dim), host(up[e], width, dim)));
    w_down.push_back(b.prepare(host(down[e], dim, width), WeightUse::kLinear));
  }
  const CpuBackend::Weight w_sh_gate_up =
      b.prepare_pair(host(sh_gate, shared_width, dim), host(sh_up, shared_width, dim));
  const CpuBackend::Weight w_sh_down =
      b.prepare(host(sh_down, dim, shared_width), WeightUse::kLinear);

  RouterRule rule;
  rule.kind = RouterRule::Kind::kSigmoidNoauxTc;
  rule.top_k = top_k;
  rule.renormalise = true;
  rule.n_group = 4;
  rule.topk_group = 2;
  rule.scale = 2.5f;
  MoeBlock<CpuBackend> block(b, E, rule, 0, E);
  ResidualStream<CpuBackend> stream(b);
  const float eps = 1e-6f;
  CpuBackend::F x = stream.begin(n, dim, eps, nullptr);
  const std::vector<float> x0 = random_matrix(rng, n, dim, 1.0f);
  std::copy(x0.begin(), x0.end(), x.get());
  std::vector<float> xn(static_cast<std::size_t>(n) * dim);
  std::vector<std::int32_t> chosen(static_cast<std::size_t>(n) * top_k);
  block.run(stream, n, dim, w_norm, w_router, bias, w_gate_up, w_down, {&w_sh_gate_up, &w_sh_down},
            CpuBackend::F(xn.data()), chosen.data());
  const float* out = stream.settle(n).get();

  double worst = 0.0;
  for (int t = 0; t < n; ++t) {
    // rmsnorm, router, experts and shared experts in float64.
    std::vector<double> xr(dim);
    double ms = 0.0;
    for (int i = 0; i < dim; ++i) ms += static_cast<double>(x0[t * dim + i]) * x0[t * dim + i];
    const double inv = 1.0 / std::sqrt(ms / dim + eps);
    for (int i = 0; i < dim; ++i) xr[i] = x0[t * dim + i] * inv;
    const std::vector<double> lg = matvec(router, E, dim, xr.data());
    const Routed r =
        reference_route(std::vector<float>(lg.begin(), lg.end()), bias, 4, 2, top_k, true, 2.5);
    for (int j = 0; j < top_k; ++j) EXPECT_EQ(chosen[t * top_k + j], r.experts[j]) << "token " << t;
    std::vector<double> y(dim, 0.0);
    for (int j = 0; j < top_k; ++j) {
      const int e = r.experts[j];
      const std::vector<double> ye = swiglu_mlp(gate[e], up[e], down[e], dim, width, xr.data());
      for (int i = 0; i < dim; ++i) y[i] += r.weights[j] * ye[i];
    }
    const std::vector<double> ys =
        swiglu_mlp(sh_gate, sh_up, sh_down, dim, shared_width, xr.data());
    double num = 0.0, den = 0.0;
    for (int i = 0; i < dim; ++i) {
      const double want = x0[t * dim + i] + y[i] + ys[i];
      num += (out[t * dim + i] - want) * (out[t * dim + i] - want);
      den += want * want;
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  EXPECT_LT(worst, 1e-5) << "worst relative L2 of a token's output";
}

}  // namespace
