#include "model/moe_block.h"

namespace specrun {

void ExpertGrouping::build(const std::int32_t* chosen, const float* weights, int n, int top_k,
                           int expert_begin, int experts) {
  const std::size_t choices = static_cast<std::size_t>(n) * top_k;
  auto local = [&](std::size_t i) {
    const int e = chosen[i] - expert_begin;
    return e >= 0 && e < experts ? e : -1;
  };
  first_.assign(static_cast<std::size_t>(experts) + 1, 0);
  for (std::size_t i = 0; i < choices; ++i)
    if (const int e = local(i); e >= 0) ++first_[e + 1];
  for (int e = 0; e < experts; ++e) first_[e + 1] += first_[e];
  // Each expert's rows in ascending token order: pair_of_[i] is choice i's pair (or -1).
  cursor_.assign(first_.begin(), first_.end() - 1);
  token_.resize(static_cast<std::size_t>(first_[experts]));
  pair_of_.resize(choices);
  for (std::size_t i = 0; i < choices; ++i) {
    const int e = local(i);
    pair_of_[i] = e < 0 ? -1 : cursor_[e]++;
    if (e >= 0) token_[pair_of_[i]] = static_cast<int>(i / top_k);
  }
  // Per token its pairs in ascending expert order: pairs are numbered expert by expert, so that
  // is ascending pair order (top_k is small: insertion).
  token_first_.resize(static_cast<std::size_t>(n) + 1);
  by_token_.clear();
  weight_.clear();
  token_first_[0] = 0;
  for (int t = 0; t < n; ++t) {
    const std::size_t begin = by_token_.size();
    for (int j = 0; j < top_k; ++j) {
      const std::size_t i = static_cast<std::size_t>(t) * top_k + j;
      if (pair_of_[i] < 0) continue;
      std::size_t at = by_token_.size();
      by_token_.push_back(0);
      weight_.push_back(0.0f);
      while (at > begin && by_token_[at - 1] > pair_of_[i]) {
        by_token_[at] = by_token_[at - 1];
        weight_[at] = weight_[at - 1];
        --at;
      }
      by_token_[at] = pair_of_[i];
      weight_[at] = weights[i];
    }
    token_first_[t + 1] = static_cast<int>(by_token_.size());
  }
}

}  // namespace specrun
