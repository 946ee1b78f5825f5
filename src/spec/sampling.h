// Sampling transforms shared by the target and the draft: logits -> probabilities (temperature,
// top-k, top-p, in that order, as HF transformers applies its warpers), inverse-CDF sampling from
// a uniform, and argmax. Both models go through the same code so that p and q in the verifier are
// transformed identically. CPU reference; deterministic (ties always go to the lower token id).
#pragma once

#include <vector>

namespace specrun {

struct SamplingParams {
  float temperature = 1.0f;  // > 0 for sampling; <= 0 means greedy (callers use argmax)
  int top_k = 0;             // keep the k most likely tokens; 0 = off
  float top_p = 1.0f;        // keep the smallest most-likely prefix with mass >= top_p; 1 = off

  bool greedy() const { return temperature <= 0.0f; }
};

// Throws (exit code 2) with advice when a field is out of range: temperature negative or not
// finite, top_k < 0, top_p outside (0, 1]. Greedy parameters are valid.
void validate_sampling_params(const SamplingParams& params);

// Keeps the scratch that the transforms need, so that a decoding loop does not allocate per
// token. One Sampler per thread; it holds no state between calls besides capacity.
class Sampler {
 public:
  // probs[0..vocab) = the distribution obtained from logits[0..vocab):
  //   1. softmax(logits / temperature)  (temperature > 0 required; throws otherwise)
  //   2. top-k: keep the top_k largest logits (ties: lower id first), if 0 < top_k < vocab
  //   3. top-p: over the remaining tokens sorted by probability (ties: lower id first), keep the
  //      smallest prefix whose mass is >= top_p of the remaining mass; always at least one token
  //   4. renormalise; removed tokens get exactly 0.
  // Logits may contain -inf (masked tokens) but not NaN, and not only -inf (throws).
  void logits_to_probs(const float* logits, int vocab, const SamplingParams& params, float* probs);

 private:
  std::vector<int> order_;  // token ids sorted by logit, descending
};

// Convenience form of Sampler::logits_to_probs (allocates its scratch per call).
void logits_to_probs(const float* logits, int vocab, const SamplingParams& params, float* probs);

// Inverse-CDF sample: the smallest i with u * total < probs[0] + ... + probs[i] and probs[i] > 0,
// where total is the sum of probs (so the weights need not be normalised; they must be >= 0).
// u must be in [0, 1). Never returns a token of weight 0: if rounding leaves u * total at or past
// the accumulated sum, returns the last token of nonzero weight. Throws if all weights are 0.
int sample_from(const float* probs, int vocab, double u);

// Index of the largest logit; the lowest id wins ties. NaN entries are never chosen (throws if
// all are NaN). The kernel cpu::argmax with the all-NaN case made an error.
int argmax(const float* logits, int vocab);

}  // namespace specrun
