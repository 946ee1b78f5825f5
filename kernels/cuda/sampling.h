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

// Greedy verification: with a = target_argmax (one id per target row, argmax_rows' output),
// accepted = the longest prefix of drafts with x_i == a[target_row + i - 1], token =
// a[target_row + accepted]. out[2c] = accepted, out[2c + 1] = token for chain c.
void verify_chains_greedy(cudaStream_t stream, const std::int32_t* target_argmax,
                          const ChainSpec* chains, int n_chains, const std::int32_t* drafts,
                          std::int32_t* out);

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

}  // namespace specrun::cuda
