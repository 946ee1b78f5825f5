// Mixture-of-experts routing and the weighted combination of the experts' outputs (ops.h): the
// same for every kernel variant, so compiled once, for the baseline (whose instruction set has
// no fused multiply-add for the compiler to contract a product and a sum into).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

void route_top_k(const float* logits, int n, int n_experts, int top_k, bool renormalise,
                 std::int32_t* experts, float* weights) {
  static thread_local std::vector<float> prob;
  prob.resize(static_cast<std::size_t>(n_experts));
  for (int t = 0; t < n; ++t) {
    const float* l = logits + static_cast<std::size_t>(t) * n_experts;
    float max = l[0];
    for (int e = 1; e < n_experts; ++e) max = std::max(max, l[e]);
    float sum = 0.0f;
    for (int e = 0; e < n_experts; ++e) {
      prob[e] = std::exp(l[e] - max);
      sum += prob[e];
    }
    for (int e = 0; e < n_experts; ++e) prob[e] /= sum;
    std::int32_t* ids = experts + static_cast<std::size_t>(t) * top_k;
    float* w = weights + static_cast<std::size_t>(t) * top_k;
    // Selection by insertion: an expert moves ahead only of strictly smaller probabilities, so
    // among equal ones the lower index (considered first) stays ahead.
    int chosen = 0;
    for (int e = 0; e < n_experts; ++e) {
      if (chosen == top_k && !(prob[e] > w[top_k - 1])) continue;
      int at = std::min(chosen, top_k - 1);
      while (at > 0 && prob[e] > w[at - 1]) {
        ids[at] = ids[at - 1];
        w[at] = w[at - 1];
        --at;
      }
      ids[at] = e;
      w[at] = prob[e];
      chosen = std::min(chosen + 1, top_k);
    }
    if (renormalise) {
      float total = 0.0f;
      for (int j = 0; j < top_k; ++j) total += w[j];
      for (int j = 0; j < top_k; ++j) w[j] /= total;
    }
  }
}

void combine_rows(float* y, int rows, std::size_t width, const float* x, const int* first,
                  const int* src, const float* scale) {
  const std::int64_t work =
      static_cast<std::int64_t>(first[rows]) * static_cast<std::int64_t>(width);
#pragma omp parallel for schedule(static) if (work >= (1 << 16))
  for (int t = 0; t < rows; ++t) {
    float* out = y + static_cast<std::size_t>(t) * width;
    std::fill(out, out + width, 0.0f);
    for (int i = first[t]; i < first[t + 1]; ++i) {
      const float s = scale[i];
      const float* in = x + static_cast<std::size_t>(src[i]) * width;
      for (std::size_t c = 0; c < width; ++c) {
        const float term = s * in[c];
        out[c] = out[c] + term;
      }
    }
  }
}

}  // namespace specrun::cpu
