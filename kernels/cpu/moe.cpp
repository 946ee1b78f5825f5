// Mixture-of-experts routing and the weighted combination of the experts' outputs (ops.h): the
// same for every kernel variant, so compiled once, for the baseline (whose instruction set has
// no fused multiply-add for the compiler to contract a product and a sum into).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

namespace {

// Inserts (id, value) into the descending list ids/values of `size` (at most cap) entries: it goes
// ahead only of strictly smaller values, so among equal values the one inserted first stays ahead.
template <typename Id>
void insert_descending(Id id, float value, Id* ids, float* values, int& size, int cap) {
  if (size == cap && !(value > values[cap - 1])) return;
  int at = std::min(size, cap - 1);
  while (at > 0 && value > values[at - 1]) {
    ids[at] = ids[at - 1];
    values[at] = values[at - 1];
    --at;
  }
  ids[at] = id;
  values[at] = value;
  size = std::min(size + 1, cap);
}

}  // namespace

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
    // Selection by insertion, the lower index (considered first) ahead among equals.
    int chosen = 0;
    for (int e = 0; e < n_experts; ++e)
      insert_descending<std::int32_t>(e, prob[e], ids, w, chosen, top_k);
    if (renormalise) {
      float total = 0.0f;
      for (int j = 0; j < top_k; ++j) total += w[j];
      for (int j = 0; j < top_k; ++j) w[j] /= total;
    }
  }
}

void route_noaux_tc(const float* logits, int n, int n_experts, const float* bias, int n_group,
                    int topk_group, int top_k, bool renormalise, float scale, std::int32_t* experts,
                    float* weights) {
  static thread_local std::vector<float> score, biased, group_value, chosen_biased;
  static thread_local std::vector<int> group_id;
  static thread_local std::vector<char> eligible;
  score.resize(static_cast<std::size_t>(n_experts));
  biased.resize(static_cast<std::size_t>(n_experts));
  eligible.resize(static_cast<std::size_t>(n_experts));
  group_value.resize(static_cast<std::size_t>(topk_group));
  group_id.resize(static_cast<std::size_t>(topk_group));
  chosen_biased.resize(static_cast<std::size_t>(top_k));
  const int per_group = n_experts / n_group;
  for (int t = 0; t < n; ++t) {
    const float* l = logits + static_cast<std::size_t>(t) * n_experts;
    for (int e = 0; e < n_experts; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-l[e]));
      biased[e] = score[e] + bias[e];
    }
    if (n_group > 1) {
      int groups = 0;
      for (int g = 0; g < n_group; ++g) {
        float first = -INFINITY, second = -INFINITY;
        for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (biased[e] > first) {
            second = first;
            first = biased[e];
          } else if (biased[e] > second) {
            second = biased[e];
          }
        }
        insert_descending(g, first + second, group_id.data(), group_value.data(), groups,
                          topk_group);
      }
      std::fill(eligible.begin(), eligible.end(), 0);
      for (int i = 0; i < groups; ++i)
        std::fill_n(eligible.begin() + static_cast<std::ptrdiff_t>(group_id[i]) * per_group,
                    per_group, 1);
    } else {
      std::fill(eligible.begin(), eligible.end(), 1);
    }
    std::int32_t* ids = experts + static_cast<std::size_t>(t) * top_k;
    float* w = weights + static_cast<std::size_t>(t) * top_k;
    int chosen = 0;
    for (int e = 0; e < n_experts; ++e)
      if (eligible[e])
        insert_descending<std::int32_t>(e, biased[e], ids, chosen_biased.data(), chosen, top_k);
    for (int j = 0; j < top_k; ++j) w[j] = score[ids[j]];
    if (renormalise) {
      float total = 0.0f;
      for (int j = 0; j < top_k; ++j) total += w[j];
      total += 1e-20f;
      for (int j = 0; j < top_k; ++j) w[j] /= total;
    }
    for (int j = 0; j < top_k; ++j) w[j] *= scale;
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
