// Token decisions on the backend that holds the logits: argmax, sampling, the draft's proposals
// (with their distributions kept for verification) and the verification of drafted chains.
// Only token ids and accepted counts cross to the host.
//
//   CPU:  the reference rules of spec/sampling.h and spec/verifier.h on host rows.
//   CUDA: kernels/cuda/sampling.h on device rows, with the same counter-based uniforms (drawn on
//         the host: a few per sequence and step), so sampled tokens follow the same random
//         stream on both backends.
// Rows are rows of a model's logits view (LanguageModel::forward). Not thread-safe; every rank of
// a tp group may call these with the same inputs (the engine then broadcasts rank 0's choice).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "model/language_model.h"
#include "spec/rng.h"
#include "spec/sampling.h"
#include "spec/verifier.h"

namespace specrun {

class CudaContext;

// One drafted token tree to verify against a target forward pass (a chain being parents
// -1, 0, 1, ...).
struct TreeToVerify {
  TreeView tree;
  int root_row = 0;                 // logits row after the root; after node i: root_row + 1 + i
  SeqRandKey key;                   // the sequence's random stream
  std::int64_t first_position = 0;  // sequence position of the nodes under the root
};

// One drafted chain to verify against its kept draft distributions (lossless sampling with q).
struct ChainToVerify {
  std::span<const std::int32_t> drafts;  // x_1..x_k (k may be 0)
  int target_row = 0;  // logits row of p_1; p_1..p_{k+1} are rows target_row..target_row + k
  int q_row = 0;       // row of q_1 in the draft-distribution store (sampling only)
  SeqRandKey key;      // the sequence's random stream
  std::int64_t first_position = 0;  // sequence position of x_1 (keys the uniforms)
};

class TokenOps {
 public:
  virtual ~TokenOps() = default;
  virtual BackendKind backend() const = 0;

  // out[i] = argmax of logits row rows[i] (lowest id on ties, NaN never chosen; a row of NaNs
  // is an error).
  virtual void argmax(const RowsView& logits, std::span<const int> rows,
                      std::span<std::int32_t> out) = 0;

  // out[i] = a sample of the transformed row rows[i] (Sampler::logits_to_probs) with uniform
  // u[i] (sample_from).
  virtual void sample(const RowsView& logits, std::span<const int> rows,
                      const SamplingParams& params, std::span<const double> u,
                      std::span<std::int32_t> out) = 0;

  // The draft's proposals when sampling: like sample(), and the transformed rows are kept at
  // rows keep_at[i] of the draft-distribution store for verify_sampling (reserve_draft first).
  virtual void sample_and_keep(const RowsView& logits, std::span<const int> rows,
                               const SamplingParams& params, std::span<const double> u,
                               std::span<const int> keep_at, std::span<std::int32_t> out) = 0;
  // Room for `rows` kept distributions of `vocab` tokens (grows, never shrinks).
  virtual void reserve_draft(int rows, int vocab) = 0;

  // Greedy verification of each tree (verify_tree_greedy_with over the target's argmax rows).
  virtual void verify_tree_greedy(const RowsView& logits, std::span<const TreeToVerify> trees,
                                  std::span<TreeVerdict> out) = 0;
  // Sampling verification of each tree of deterministic drafts (verify_tree_sampling_with: the
  // target's sample at each reached node, a fresh uniform per level keyed by the position it
  // decides, RandPurpose::kTreeSample).
  virtual void verify_tree_sampling(const RowsView& logits, const SamplingParams& params,
                                    std::span<const TreeToVerify> trees,
                                    std::span<TreeVerdict> out) = 0;
  // Lossless sampling verification of each chain against its kept draft distributions
  // (verify_sampling: accept with min(1, p/q), residual or bonus sample).
  virtual void verify_sampling(const RowsView& logits, const SamplingParams& params,
                               std::span<const ChainToVerify> chains,
                               std::span<VerifyResult> out) = 0;

  // For building draft trees: the k largest logits of each row rows[r] (ties to the lower id),
  // ids[r * k + j] in descending order, and their log-probabilities logit - logsumexp(row)
  // (no temperature: the draft's own ranking).
  virtual void top_k(const RowsView& logits, std::span<const int> rows, int k,
                     std::span<std::int32_t> ids, std::span<float> logprobs) = 0;
};

// The decisions of `backend`; `cuda` is the rank's CUDA state (nullptr for the CPU).
std::unique_ptr<TokenOps> make_token_ops(BackendKind backend, CudaContext* cuda);

}  // namespace specrun
