#include "spec/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/ops.h"

namespace specrun {

void validate_sampling_params(const SamplingParams& params) {
  SPEC_INPUT_CHECK(std::isfinite(params.temperature) && params.temperature >= 0.0f,
                   "sampling temperature " << params.temperature
                                           << " is invalid; use 0 for greedy or a value > 0");
  SPEC_INPUT_CHECK(params.top_k >= 0,
                   "sampling top_k " << params.top_k << " is invalid; use 0 to disable top-k");
  SPEC_INPUT_CHECK(params.top_p > 0.0f && params.top_p <= 1.0f,
                   "sampling top_p " << params.top_p << " is outside (0, 1]; use 1 to disable");
}

void Sampler::logits_to_probs(const float* logits, int vocab, const SamplingParams& params,
                              float* probs) {
  SPEC_CHECK(vocab > 0, "logits_to_probs needs a vocabulary of at least one token, got " << vocab);
  SPEC_CHECK(params.temperature > 0.0f && std::isfinite(params.temperature),
             "logits_to_probs needs temperature > 0 (got " << params.temperature
                                                           << "); greedy decoding uses argmax");
  validate_sampling_params(params);

  // 1. Temperature softmax, shifted by the maximum for range.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    SPEC_CHECK(!std::isnan(logits[i]), "logit " << i << " is NaN; the model output is broken");
    max_logit = std::max(max_logit, logits[i]);
  }
  SPEC_CHECK(std::isfinite(max_logit),
             "logits have no finite maximum (all -inf or +inf present): " << max_logit);
  const float inv_temperature = 1.0f / params.temperature;
  for (int i = 0; i < vocab; ++i) probs[i] = std::exp((logits[i] - max_logit) * inv_temperature);

  const bool use_top_k = params.top_k > 0 && params.top_k < vocab;
  const bool use_top_p = params.top_p < 1.0f;
  int kept = vocab;
  if (use_top_k || use_top_p) {
    // Order by logit (exact, unlike the rounded exponentials), lower id first on ties.
    order_.resize(vocab);
    for (int i = 0; i < vocab; ++i) order_[i] = i;
    auto more_likely = [logits](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    // 2. Top-k: only the first k need to be sorted (top-p walks them in order).
    kept = use_top_k ? params.top_k : vocab;
    std::partial_sort(order_.begin(), order_.begin() + kept, order_.end(), more_likely);
    // 3. Top-p over the top-k survivors, relative to their mass.
    if (use_top_p) {
      double kept_mass = 0.0;
      for (int j = 0; j < kept; ++j) kept_mass += probs[order_[j]];
      const double threshold = static_cast<double>(params.top_p) * kept_mass;
      double cumulative = 0.0;
      int prefix = 0;
      while (prefix < kept) {
        cumulative += probs[order_[prefix]];
        ++prefix;
        if (cumulative >= threshold) break;
      }
      kept = std::max(prefix, 1);
    }
    // order_ holds every id, so everything past the kept prefix is exactly what is removed.
    for (int j = kept; j < vocab; ++j) probs[order_[j]] = 0.0f;
  }

  // 4. Renormalise over the survivors.
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) total += probs[i];
  SPEC_CHECK(total > 0.0, "logits_to_probs: no probability mass left (internal error)");
  const double inv_total = 1.0 / total;
  for (int i = 0; i < vocab; ++i) probs[i] = static_cast<float>(probs[i] * inv_total);
}

void logits_to_probs(const float* logits, int vocab, const SamplingParams& params, float* probs) {
  Sampler sampler;
  sampler.logits_to_probs(logits, vocab, params, probs);
}

int sample_from(const float* probs, int vocab, double u) {
  SPEC_CHECK(u >= 0.0 && u < 1.0, "sample_from needs a uniform in [0, 1), got " << u);
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) {
    SPEC_CHECK(probs[i] >= 0.0f, "sample_from: weight of token " << i << " is " << probs[i]
                                                                 << "; weights must be >= 0");
    total += probs[i];
  }
  SPEC_CHECK(total > 0.0, "sample_from: all " << vocab << " weights are 0; nothing to sample");
  const double target = u * total;
  double cumulative = 0.0;
  int last_nonzero = -1;
  for (int i = 0; i < vocab; ++i) {
    if (probs[i] > 0.0f) {
      cumulative += probs[i];
      last_nonzero = i;
      if (target < cumulative) return i;
    }
  }
  return last_nonzero;
}

int argmax(const float* logits, int vocab) {
  SPEC_CHECK(vocab >= 1, "argmax over an empty row");
  const int best = cpu::argmax(logits, vocab);
  SPEC_CHECK(best >= 0, "argmax over " << vocab << " logits found no non-NaN value");
  return best;
}

}  // namespace specrun
