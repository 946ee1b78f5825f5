// Token decisions on the device: argmax, the sampling transforms, inverse-CDF sampling and the
// verification of speculative chains, on logits where the model left them. The contracts are
// those of the CPU reference (src/spec/sampling.h, src/spec/verifier.h); only token ids and
// accepted counts go back to the host. Uniforms are drawn on the host by the counter-based RNG
// (src/spec/rng.h, a few per sequence and step) and copied in with the other inputs, so the
// random stream is the CPU's.
//
// Every pointer is device memory. Launchers check their arguments, launch on `stream` and never
// synchronise. Row indices are int32 device arrays; a "row" of a [*, vocab] buffer starts at
// row * vocab floats.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specrun::cuda {

// The sampling transforms (the CPU's Sampler::logits_to_probs), in this order: softmax of
// logits / temperature (shifted by the row maximum), top-k (keep the top_k largest logits, ties
// to the lower id; off when top_k <= 0 or >= vocab), top-p (over the survivors sorted by logit,
// ties to the lower id, keep the smallest prefix whose mass reaches top_p times the survivors'
// mass, at least one token; off when top_p >= 1), renormalise (removed tokens exactly 0).
// Mass sums are accumulated in double, like the CPU's, but in another order: a token whose
// cumulative mass lies within rounding of the top-p threshold may fall on the other side.
struct SamplingConfig {
  float temperature = 1.0f;  // > 0
  int top_k = 0;
  float top_p = 1.0f;
};

// probs[dst_rows[r], :] = transform(logits[src_rows[r], :]) for r < n_rows. A row with a NaN
// logit, or without a finite maximum, sets *error to 1 (the caller checks it after its next
// synchronisation; error may be nullptr) and its output is all zeros. probs must not alias
// logits.
void logits_to_probs(cudaStream_t stream, const float* logits, int vocab,
                     const std::int32_t* src_rows, const std::int32_t* dst_rows, int n_rows,
                     const SamplingConfig& config, float* probs, int* error);

// out[r] = index of the largest x[rows[r], :] (lowest index on ties, NaN never chosen; -1 when
// the row is all NaN).
void argmax_rows(cudaStream_t stream, const float* x, int vocab, const std::int32_t* rows,
                 int n_rows, std::int32_t* out);

// out[r] = the inverse-CDF sample of the non-negative weights w = probs[rows[r], :] with the
// uniform u[r] in [0, 1): the smallest i with w[i] > 0 and u * sum(w) < w[0] + ... + w[i]; the
// last token of nonzero weight when rounding leaves u * sum at or past the total; -1 when every
// weight is 0 (the CPU's sample_from throws there).
void sample_rows(cudaStream_t stream, const float* probs, int vocab, const std::int32_t* rows,
                 int n_rows, const double* u, std::int32_t* out);

// One chain of k drafted tokens to verify.
//   target_row: row of p_1 in the target buffer; p_1..p_{k+1} are rows target_row..+k.
//   q_row:      row of q_1 in the draft buffer (sampling only); q_1..q_k are q_row..+k-1.
//   first_draft: index of x_1 in the drafts array.
//   first_uniform: index of this chain's uniforms (sampling only): accept[0..k),
//                  residual[0..k), then bonus: 2k + 1 values.
struct ChainSpec {
  int k = 0;
  int target_row = 0;
  int q_row = 0;
  int first_draft = 0;
  int first_uniform = 0;
};

// Lossless sampling verification (the CPU's verify_sampling_with): for i = 0..k-1 with
// x = drafts[first_draft + i], p = target_probs row target_row + i, q = draft_probs row
// q_row + i: accept iff p[x] > 0 and (q[x] == 0 or u_accept[i] <= p[x] / q[x]) (the ratio in
// double); at the first rejection emit the inverse-CDF sample of max(0, p - q) with
// u_residual[i] (of p itself when that mass is 0); after k acceptances emit the sample of row
// target_row + k with u_bonus. out[2c] = accepted, out[2c + 1] = token.
void verify_chains_sampling(cudaStream_t stream, const float* target_probs,
                            const float* draft_probs, int vocab, const ChainSpec* chains,
                            int n_chains, const std::int32_t* drafts, const double* uniforms,
                            std::int32_t* out);

// Top-k of log-softmax, for building draft trees: for each r < n_rows, the k largest logits
// of row rows[r] of x (ties to the lower id; NaN never chosen), as ids out_ids[r * k + j]
// (j = 0 the largest) and log-probabilities out_logprobs[r * k + j] = logit - logsumexp(row)
// (the sum of exp(logit - max) accumulated in double, as the CPU's TokenOps::top_k does).
// 1 <= k <= kMaxTopK and k <= vocab.
inline constexpr int kMaxTopK = 64;
void top_k_rows(cudaStream_t stream, const float* x, int vocab, const std::int32_t* rows,
                int n_rows, int k, std::int32_t* out_ids, float* out_logprobs);

// One drafted token tree to verify by sampling (src/spec/verifier.h verify_tree_sampling_with).
//   n_nodes: nodes under the root; tokens/parents of node i at first_node + i (parents: node
//            index within this tree, -1 for the root; parents before children);
//   first_row: probs row of the distribution after the root; after node i: first_row + 1 + i;
//   first_uniform: the uniform of path level l (0 = the root's) is uniforms[first_uniform + l],
//                  for l = 0 .. depth of the tree (depth + 1 values);
//   first_path: the accepted path (node indices, root first) goes to paths[first_path ..].
struct TreeSpec {
  int n_nodes = 0;
  int first_node = 0;
  int first_row = 0;
  int first_uniform = 0;
  int first_path = 0;
};

// For each tree: starting at the root, y = the inverse-CDF sample (sample_rows' rule) of the
// probs row after the current node with the current level's uniform; if a child of the current
// node (the first in node order) has token y, descend into it and go on; else stop and emit y.
// out[2c] = accepted nodes, out[2c + 1] = the emitted token (-1 when a row had no mass).
// probs: transformed distributions (logits_to_probs) [*, vocab].
void verify_trees_sampling(cudaStream_t stream, const float* probs, int vocab,
                           const TreeSpec* trees, int n_trees, const std::int32_t* tokens,
                           const std::int32_t* parents, const double* uniforms, std::int32_t* out,
                           std::int32_t* paths);

}  // namespace specrun::cuda
