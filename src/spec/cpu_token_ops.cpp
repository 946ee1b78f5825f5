// TokenOps on the CPU: the reference rules (spec/sampling.h, spec/verifier.h) on host rows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "spec/token_ops.h"

namespace specrun {

std::unique_ptr<TokenOps> make_cuda_token_ops(CudaContext* cuda);  // cuda_token_ops.cpp

namespace {

class CpuTokenOps final : public TokenOps {
 public:
  BackendKind backend() const override { return BackendKind::kCpu; }

  void argmax(const RowsView& logits, std::span<const int> rows,
              std::span<std::int32_t> out) override {
    check(logits, rows, out.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
      out[i] = specrun::argmax(logits.row(rows[i]), logits.width);
  }

  void sample(const RowsView& logits, std::span<const int> rows, const SamplingParams& params,
              std::span<const double> u, std::span<std::int32_t> out) override {
    check(logits, rows, out.size());
    probs_.resize(logits.width);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      sampler_.logits_to_probs(logits.row(rows[i]), logits.width, params, probs_.data());
      out[i] = sample_from(probs_.data(), logits.width, u[i]);
    }
  }

  void sample_and_keep(const RowsView& logits, std::span<const int> rows,
                       const SamplingParams& params, std::span<const double> u,
                       std::span<const int> keep_at, std::span<std::int32_t> out) override {
    check(logits, rows, out.size());
    SPEC_CHECK(logits.width == draft_vocab_, "sample_and_keep: reserve_draft was given vocab "
                                                 << draft_vocab_ << ", the logits have "
                                                 << logits.width);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      SPEC_CHECK(keep_at[i] >= 0 && keep_at[i] < draft_rows_,
                 "sample_and_keep: store row " << keep_at[i] << " outside 0.." << draft_rows_);
      float* q = draft_row(keep_at[i]);
      sampler_.logits_to_probs(logits.row(rows[i]), logits.width, params, q);
      out[i] = sample_from(q, logits.width, u[i]);
    }
  }

  void reserve_draft(int rows, int vocab) override {
    draft_rows_ = rows;
    draft_vocab_ = vocab;
    const std::size_t n = static_cast<std::size_t>(rows) * vocab;
    if (draft_.size() < n) draft_.resize(n);
  }

  void verify_tree_greedy(const RowsView& logits, std::span<const TreeToVerify> trees,
                          std::span<TreeVerdict> out) override {
    for (std::size_t c = 0; c < trees.size(); ++c) {
      const TreeToVerify& t = trees[c];
      out[c] = verify_tree_greedy_with(t.tree, [&](int node) {
        return specrun::argmax(logits.row(t.root_row + 1 + node), logits.width);
      });
    }
  }

  void verify_tree_sampling(const RowsView& logits, const SamplingParams& params,
                            std::span<const TreeToVerify> trees,
                            std::span<TreeVerdict> out) override {
    probs_.resize(logits.width);
    for (std::size_t c = 0; c < trees.size(); ++c) {
      const TreeToVerify& t = trees[c];
      out[c] = verify_tree_sampling_with(t.tree, [&](int node, int level) {
        sampler_.logits_to_probs(logits.row(t.root_row + 1 + node), logits.width, params,
                                 probs_.data());
        return sample_from(probs_.data(), logits.width,
                           t.key.uniform(t.first_position + level, RandPurpose::kTreeSample));
      });
    }
  }

  void top_k(const RowsView& logits, std::span<const int> rows, int k, std::span<std::int32_t> ids,
             std::span<float> logprobs) override {
    check(logits, rows, ids.size() / std::max(k, 1));
    SPEC_CHECK(k >= 1 && k <= logits.width, "top_k: k = " << k << " for " << logits.width);
    order_.resize(logits.width);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const float* x = logits.row(rows[r]);
      for (int i = 0; i < logits.width; ++i) order_[i] = i;
      std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [x](int a, int b) {
        return x[a] > x[b] || (x[a] == x[b] && a < b) || (x[a] == x[a] && x[b] != x[b]);
      });
      const double max = x[order_[0]];
      double sum = 0;
      for (int i = 0; i < logits.width; ++i)
        if (x[i] == x[i]) sum += std::exp(static_cast<double>(x[i]) - max);
      const double lse = max + std::log(sum);
      for (int j = 0; j < k; ++j) {
        ids[r * k + j] = order_[j];
        logprobs[r * k + j] = static_cast<float>(static_cast<double>(x[order_[j]]) - lse);
      }
    }
  }

  void verify_sampling(const RowsView& logits, const SamplingParams& params,
                       std::span<const ChainToVerify> chains,
                       std::span<VerifyResult> out) override {
    const int V = logits.width;
    for (std::size_t c = 0; c < chains.size(); ++c) {
      const ChainToVerify& ch = chains[c];
      const int k = static_cast<int>(ch.drafts.size());
      probs_.resize(static_cast<std::size_t>(k + 1) * V);
      for (int j = 0; j <= k; ++j)
        sampler_.logits_to_probs(logits.row(ch.target_row + j), V, params,
                                 &probs_[static_cast<std::size_t>(j) * V]);
      drafts_.assign(ch.drafts.begin(), ch.drafts.end());
      SPEC_CHECK(k == 0 || (ch.q_row >= 0 && ch.q_row + k <= draft_rows_ && draft_vocab_ == V),
                 "verify_sampling: draft distributions " << ch.q_row << ".." << ch.q_row + k
                                                         << " are not kept");
      out[c] = specrun::verify_sampling(drafts_.data(), k, k > 0 ? draft_row(ch.q_row) : nullptr,
                                        probs_.data(), V, ch.key, ch.first_position);
    }
  }

 private:
  static void check(const RowsView& logits, std::span<const int> rows, std::size_t out) {
    SPEC_CHECK(logits.backend == BackendKind::kCpu, "CPU token ops given a device view");
    SPEC_CHECK(out >= rows.size(), "token ops: output shorter than the rows");
    for (int r : rows)
      SPEC_CHECK(r >= 0 && r < logits.rows, "token ops: row " << r << " of " << logits.rows);
  }
  float* draft_row(int r) { return draft_.data() + static_cast<std::size_t>(r) * draft_vocab_; }

  Sampler sampler_;
  std::vector<float> probs_, draft_;
  int draft_rows_ = 0, draft_vocab_ = 0;
  std::vector<int> drafts_, order_;
};

}  // namespace

std::unique_ptr<TokenOps> make_token_ops(BackendKind backend, CudaContext* cuda) {
  if (backend == BackendKind::kCuda) return make_cuda_token_ops(cuda);
  return std::make_unique<CpuTokenOps>();
}

}  // namespace specrun
