// Verification of a chain of k draft tokens against the target, per Leviathan et al. 2023 /
// Chen et al. 2023 (docs/reference.md, "Chain speculative sampling").
//
// Greedy: accept while the draft token equals the target argmax; emit the target argmax at the
// first mismatch (or after all k). Sampling: accept x_i with probability min(1, p_i(x_i)/q_i(x_i));
// at the first rejection emit a sample of norm(max(0, p - q)); after k acceptances emit a bonus
// sample of p_{k+1}. The emitted tokens are then distributed exactly as target sampling.
//
// EOS: the verifier does not know about EOS. The caller appends the n accepted draft tokens and
// the emitted token to the sequence and then truncates at the first EOS, keeping it
// (tokens_until_eos below). This covers HF's rule (an accepted EOS as the last draft token emits
// no bonus) and also an EOS accepted in the middle of the draft: in both cases baseline decoding
// would have stopped there, so the truncated output has the baseline's distribution.
#pragma once

#include <array>
#include <cstdint>

#include "spec/rng.h"
#include "spec/sampling.h"

namespace specrun {

// The outcome of verifying one chain of k draft tokens. The step emits accepted + 1 tokens:
// draft[0..accepted) and then `token`.
struct VerifyResult {
  int accepted = 0;  // n: number of leading draft tokens accepted, 0..k
  int token = -1;    // the token after them: the correction (n < k) or the bonus (n == k)
};

// Greedy: draft_tokens[0..k), target_argmax[0..k] (the target's argmax at each of the k+1 scored
// positions; target_argmax[i] is the target's choice for the slot of draft_tokens[i]). Returns
// the accepted count n; the emitted token is target_argmax[n].
int greedy_accept(const int* draft_tokens, int k, const int* target_argmax);

// The acceptance rule for one draft token x with target probability p_x and draft probability
// q_x, given u in [0, 1): accept iff u <= p_x / q_x. Never accepts when p_x == 0 (a token the
// target cannot produce, e.g. outside its top-k); always accepts when q_x == 0 < p_x (the draft
// could not have sampled it, but the ratio is then infinite).
inline bool accept_draft_token(double u, float p_x, float q_x) {
  if (!(p_x > 0.0f)) return false;
  if (!(q_x > 0.0f)) return true;
  return u <= static_cast<double>(p_x) / static_cast<double>(q_x);
}

// out[0..vocab) = norm(max(0, p - q)). Returns the unnormalised mass sum(max(0, p - q)). When
// that mass is 0 (p == q up to rounding, so a rejection had probability 0), writes p itself
// (the documented fallback) and returns 0.
double residual_distribution(const float* p, const float* q, int vocab, float* out);

// Samples the residual norm(max(0, p - q)) by inverse CDF with uniform u, without materialising
// it; falls back to sample_from(p, u) when the residual mass is 0. Same result as
// sample_from(out of residual_distribution, u) up to the rounding of the normalisation.
int sample_residual(const float* p, const float* q, int vocab, double u);

// Sampling verification with caller-supplied uniforms.
//   draft_tokens[0..k): x_1..x_k as sampled by the draft;
//   draft_probs:  k rows of vocab floats, row i = q_{i+1}, the distribution x_{i+1} was drawn
//                 from (after the same sampling transforms as the target);
//   target_probs: k+1 rows of vocab floats, row i = p_{i+1};
//   uniform_at(purpose, offset) returns u in [0, 1): called with (kAccept, i) for x_{i+1}, then
//                 once with (kResidual, n) or (kBonus, k).
// k may be 0 (then this is plain target sampling of the bonus).
template <class UniformAt>
VerifyResult verify_sampling_with(const int* draft_tokens, int k, const float* draft_probs,
                                  const float* target_probs, int vocab, UniformAt&& uniform_at) {
  VerifyResult result;
  for (int i = 0; i < k; ++i) {
    const float* q = draft_probs + static_cast<std::int64_t>(i) * vocab;
    const float* p = target_probs + static_cast<std::int64_t>(i) * vocab;
    const int x = draft_tokens[i];
    if (!accept_draft_token(uniform_at(RandPurpose::kAccept, i), p[x], q[x])) {
      result.accepted = i;
      result.token = sample_residual(p, q, vocab, uniform_at(RandPurpose::kResidual, i));
      return result;
    }
  }
  result.accepted = k;
  result.token = sample_from(target_probs + static_cast<std::int64_t>(k) * vocab, vocab,
                             uniform_at(RandPurpose::kBonus, k));
  return result;
}

// Sampling verification with the counter RNG: x_{i+1} occupies sequence position
// first_position + i, and the emitted token position first_position + n (see rng.h for why
// positions, not step indices, key the draws). Checks that draft tokens are in the vocabulary.
VerifyResult verify_sampling(const int* draft_tokens, int k, const float* draft_probs,
                             const float* target_probs, int vocab, const SeqRandKey& key,
                             std::int64_t first_position);

// ---- token trees (a chain being parents -1, 0, 1, ...) ------------------------------------
// A tree under a root (the last committed token): node i has token tokens[i] and parent
// parents[i] (another node's index, or -1 for the root), parents before children.
struct TreeView {
  const std::int32_t* tokens = nullptr;
  const std::int32_t* parents = nullptr;
  int n = 0;
};

inline constexpr int kMaxTreeDepth = 64;

// The outcome of verifying a tree: the accepted path (node indices, root first) and the token
// emitted after it (the correction, or the bonus when the path ends in a leaf).
struct TreeVerdict {
  int accepted = 0;
  int token = -1;
  std::array<int, kMaxTreeDepth> path{};
};

// The child of `node` (-1: the root) whose token is `token`, or -1. Children are searched in
// node order, so with duplicate tokens the first sibling wins.
int child_with_token(const TreeView& tree, int node, int token);

// Greedy: from the root, descend into the child whose token is the target's argmax at the
// current node, while there is one; the token emitted is the argmax at the last node reached.
// argmax_at(node) gives the target's argmax after node (-1: the root). For a chain this is
// greedy_accept.
template <class ArgmaxAt>
TreeVerdict verify_tree_greedy_with(const TreeView& tree, ArgmaxAt&& argmax_at) {
  TreeVerdict v;
  int node = -1;
  while (true) {
    const int t = argmax_at(node);
    const int child = child_with_token(tree, node, t);
    if (child < 0 || v.accepted == kMaxTreeDepth) {
      v.token = t;
      return v;
    }
    v.path[v.accepted++] = child;
    node = child;
  }
}

// Sampling against a tree of deterministic drafts (top-k children, n-gram continuations: no
// draft distribution q): at each node reached, sample y from the target's distribution p after
// it (sample_at(node, level): inverse-CDF sampling of the transformed row with a uniform keyed
// by the position of the token decided, level = path length so far); descend into the child
// whose token is y if there is one, else emit y. Each emitted token is a sample of the target's
// distribution given the tokens before it, so the output is distributed as target sampling
// (lossless). This is SGLang's target-only tree sampling with its thresholds at 1 and, in
// distribution, EAGLE's rule for deterministic drafts (docs/reference.md, "Verification rules"): a
// child x is accepted with probability p(x), whichever sibling order.
template <class SampleAt>
TreeVerdict verify_tree_sampling_with(const TreeView& tree, SampleAt&& sample_at) {
  TreeVerdict v;
  int node = -1;
  while (true) {
    const int y = sample_at(node, v.accepted);
    const int child = child_with_token(tree, node, y);
    if (child < 0 || v.accepted == kMaxTreeDepth) {
      v.token = y;
      return v;
    }
    v.path[v.accepted++] = child;
    node = child;
  }
}

// Checks a proposal's shape: n nodes, every parent -1 or an earlier node, depth at most
// max_depth. Throws naming `who` (the drafter) otherwise.
void check_tree(const TreeView& tree, int max_depth, const char* who);

// How many of tokens[0..count) to keep: up to and including the first eos_id, or all of them
// when there is none or eos_id < 0.
int tokens_until_eos(const int* tokens, int count, int eos_id);

}  // namespace specrun
