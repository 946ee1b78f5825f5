#include "spec/verifier.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

int greedy_accept(const int* draft_tokens, int k, const int* target_argmax) {
  SPEC_CHECK(k >= 0, "greedy_accept: draft length " << k << " is negative");
  int n = 0;
  while (n < k && draft_tokens[n] == target_argmax[n]) ++n;
  return n;
}

double residual_distribution(const float* p, const float* q, int vocab, float* out) {
  double mass = 0.0;
  for (int i = 0; i < vocab; ++i) {
    out[i] = std::max(0.0f, p[i] - q[i]);
    mass += out[i];
  }
  if (!(mass > 0.0)) {
    std::copy(p, p + vocab, out);
    return 0.0;
  }
  const double inv_mass = 1.0 / mass;
  for (int i = 0; i < vocab; ++i) out[i] = static_cast<float>(out[i] * inv_mass);
  return mass;
}

int sample_residual(const float* p, const float* q, int vocab, double u) {
  SPEC_CHECK(u >= 0.0 && u < 1.0, "sample_residual needs a uniform in [0, 1), got " << u);
  double mass = 0.0;
  for (int i = 0; i < vocab; ++i) mass += std::max(0.0f, p[i] - q[i]);
  if (!(mass > 0.0)) return sample_from(p, vocab, u);
  const double target = u * mass;
  double cumulative = 0.0;
  int last_nonzero = -1;
  for (int i = 0; i < vocab; ++i) {
    const float w = std::max(0.0f, p[i] - q[i]);
    if (w > 0.0f) {
      cumulative += w;
      last_nonzero = i;
      if (target < cumulative) return i;
    }
  }
  return last_nonzero;
}

VerifyResult verify_sampling(const int* draft_tokens, int k, const float* draft_probs,
                             const float* target_probs, int vocab, const SeqRandKey& key,
                             std::int64_t first_position) {
  SPEC_CHECK(k >= 0, "verify_sampling: draft length " << k << " is negative");
  for (int i = 0; i < k; ++i) {
    SPEC_CHECK(draft_tokens[i] >= 0 && draft_tokens[i] < vocab,
               "draft token " << draft_tokens[i] << " at draft slot " << i << " of prompt "
                              << key.prompt_id << " is outside the vocabulary of " << vocab);
  }
  return verify_sampling_with(draft_tokens, k, draft_probs, target_probs, vocab,
                              [&](RandPurpose purpose, int offset) {
                                return key.uniform(first_position + offset, purpose);
                              });
}

int child_with_token(const TreeView& tree, int node, int token) {
  for (int i = 0; i < tree.n; ++i)
    if (tree.parents[i] == node && tree.tokens[i] == token) return i;
  return -1;
}

void check_tree(const TreeView& tree, int max_depth, const char* who) {
  SPEC_CHECK(max_depth <= kMaxTreeDepth, "trees deeper than " << kMaxTreeDepth << " nodes");
  int depth[kMaxTreeDepth * 8];
  SPEC_CHECK(tree.n <= static_cast<int>(sizeof(depth) / sizeof(depth[0])),
             who << " proposed " << tree.n << " nodes, more than a tree may hold");
  for (int i = 0; i < tree.n; ++i) {
    const int p = tree.parents[i];
    SPEC_CHECK(p >= -1 && p < i, who << " proposed node " << i << " with parent " << p
                                     << ": parents must come before their children");
    depth[i] = p < 0 ? 1 : depth[p] + 1;
    SPEC_CHECK(depth[i] <= max_depth,
               who << " proposed a path of " << depth[i] << " tokens, deeper than " << max_depth);
  }
}

int tokens_until_eos(const int* tokens, int count, int eos_id) {
  if (eos_id < 0) return count;
  for (int i = 0; i < count; ++i) {
    if (tokens[i] == eos_id) return i + 1;
  }
  return count;
}

}  // namespace specrun
