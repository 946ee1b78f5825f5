// TokenOps on the CUDA backend: kernels/cuda/sampling.h on the rows where the model left its
// logits. Each call stages its inputs (row indices, uniforms, drafts) with one host-to-device
// copy from pinned memory, launches on the rank's stream, and copies back only token ids and
// accepted counts (one device-to-host copy, then the deadline-bounded synchronisation).
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "spec/token_ops.h"

#ifdef SPECRUN_HAVE_CUDA
#include "backend/cuda_backend.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/sampling.h"
#endif

namespace specrun {

#ifndef SPECRUN_HAVE_CUDA

std::unique_ptr<TokenOps> make_cuda_token_ops(CudaContext*) {
  SPEC_INPUT_FAIL("the CUDA backend was asked for but this specrun was built without CUDA");
}

#else

namespace {

// Bump allocator over a staging buffer: the same offsets serve the pinned host copy and the
// device copy.
class Staging {
 public:
  void clear() { used_ = 0; }
  template <typename T>
  std::size_t add(std::size_t count) {
    used_ = (used_ + alignof(double) - 1) / alignof(double) * alignof(double);
    const std::size_t at = used_;
    used_ += count * sizeof(T);
    return at;
  }
  std::size_t bytes() const { return used_; }

 private:
  std::size_t used_ = 0;
};

class CudaTokenOps final : public TokenOps {
 public:
  explicit CudaTokenOps(CudaContext& ctx) : ctx_(ctx), stream_(ctx.stream()) {}
  BackendKind backend() const override { return BackendKind::kCuda; }

  void argmax(const RowsView& logits, std::span<const int> rows,
              std::span<std::int32_t> out) override {
    check(logits, rows);
    const int n = static_cast<int>(rows.size());
    Staging s;
    const std::size_t at_rows = s.add<std::int32_t>(n), at_out = s.add<std::int32_t>(n);
    stage(s);
    copy_ints(at_rows, rows);
    upload(s);
    cuda::argmax_rows(stream_, logits.data, logits.width, dev<std::int32_t>(at_rows), n,
                      dev<std::int32_t>(at_out));
    download(at_out, n * sizeof(std::int32_t));
    for (int i = 0; i < n; ++i) {
      out[i] = host<std::int32_t>(at_out)[i];
      SPEC_CHECK(out[i] >= 0, "argmax over " << logits.width << " logits of row " << rows[i]
                                             << " found no non-NaN value");
    }
  }

  void sample(const RowsView& logits, std::span<const int> rows, const SamplingParams& params,
              std::span<const double> u, std::span<std::int32_t> out) override {
    check(logits, rows);
    const int n = static_cast<int>(rows.size());
    probs_.grow(static_cast<std::size_t>(n) * logits.width * sizeof(float));
    std::vector<int> dst(n);
    for (int i = 0; i < n; ++i) dst[i] = i;
    transform_and_sample(logits, rows, dst, params, u, probs_.as<float>(), out);
  }

  void sample_and_keep(const RowsView& logits, std::span<const int> rows,
                       const SamplingParams& params, std::span<const double> u,
                       std::span<const int> keep_at, std::span<std::int32_t> out) override {
    check(logits, rows);
    SPEC_CHECK(logits.width == draft_vocab_, "sample_and_keep: reserve_draft was given vocab "
                                                 << draft_vocab_ << ", the logits have "
                                                 << logits.width);
    for (int r : keep_at)
      SPEC_CHECK(r >= 0 && r < draft_rows_,
                 "sample_and_keep: store row " << r << " outside 0.." << draft_rows_);
    transform_and_sample(logits, rows, keep_at, params, u, draft_.as<float>(), out);
  }

  void reserve_draft(int rows, int vocab) override {
    draft_rows_ = rows;
    draft_vocab_ = vocab;
    draft_.grow(std::max<std::size_t>(static_cast<std::size_t>(rows) * vocab * sizeof(float), 1));
  }

  // The argmax of every row on the device; the walk down each tree on the host (a few dozen
  // ids).
  void verify_tree_greedy(const RowsView& logits, std::span<const TreeToVerify> trees,
                          std::span<TreeVerdict> out) override {
    SPEC_CHECK(logits.backend == BackendKind::kCuda, "CUDA token ops given a host view");
    Staging s;
    const std::size_t at_rows = s.add<std::int32_t>(logits.rows);
    const std::size_t at_argmax = s.add<std::int32_t>(logits.rows);
    stage(s);
    for (int r = 0; r < logits.rows; ++r) host<std::int32_t>(at_rows)[r] = r;
    upload(s);
    cuda::argmax_rows(stream_, logits.data, logits.width, dev<std::int32_t>(at_rows), logits.rows,
                      dev<std::int32_t>(at_argmax));
    download(at_argmax, logits.rows * sizeof(std::int32_t));
    const std::int32_t* argmax = host<std::int32_t>(at_argmax);
    for (std::size_t c = 0; c < trees.size(); ++c) {
      const TreeToVerify& t = trees[c];
      out[c] = verify_tree_greedy_with(t.tree, [&](int node) {
        const int id = argmax[t.root_row + 1 + node];
        SPEC_CHECK(id >= 0, "argmax of logits row " << t.root_row + 1 + node << " is all NaN");
        return id;
      });
    }
  }

  void verify_tree_sampling(const RowsView& logits, const SamplingParams& params,
                            std::span<const TreeToVerify> trees,
                            std::span<TreeVerdict> out) override {
    SPEC_CHECK(logits.backend == BackendKind::kCuda, "CUDA token ops given a host view");
    const int V = logits.width;
    const int n_trees = static_cast<int>(trees.size());
    int n_nodes = 0, n_rows = 0, n_uniforms = 0;
    for (const TreeToVerify& t : trees) {
      n_nodes += t.tree.n;
      n_rows += t.tree.n + 1;
      n_uniforms += t.tree.n + 1;  // one per level, depth <= n
    }
    Staging s;
    const std::size_t at_src = s.add<std::int32_t>(n_rows), at_dst = s.add<std::int32_t>(n_rows);
    const std::size_t at_trees = s.add<cuda::TreeSpec>(n_trees);
    const std::size_t at_tokens = s.add<std::int32_t>(std::max(n_nodes, 1));
    const std::size_t at_parents = s.add<std::int32_t>(std::max(n_nodes, 1));
    const std::size_t at_u = s.add<double>(n_uniforms);
    const std::size_t at_error = s.add<int>(1);
    const std::size_t at_out = s.add<std::int32_t>(2 * n_trees);
    const std::size_t at_paths = s.add<std::int32_t>(std::max(n_nodes, 1));
    stage(s);
    for (int c = 0, row = 0, node = 0, u = 0; c < n_trees; ++c) {
      const TreeToVerify& t = trees[c];
      host<cuda::TreeSpec>(at_trees)[c] = cuda::TreeSpec{t.tree.n, node, row, u, node};
      for (int i = 0; i <= t.tree.n; ++i, ++row) {
        host<std::int32_t>(at_src)[row] = t.root_row + i;
        host<std::int32_t>(at_dst)[row] = row;
      }
      for (int i = 0; i < t.tree.n; ++i, ++node) {
        host<std::int32_t>(at_tokens)[node] = t.tree.tokens[i];
        host<std::int32_t>(at_parents)[node] = t.tree.parents[i];
      }
      for (int level = 0; level <= t.tree.n; ++level, ++u)
        host<double>(at_u)[u] = t.key.uniform(t.first_position + level, RandPurpose::kTreeSample);
    }
    host<int>(at_error)[0] = 0;
    upload(s);
    probs_.grow(static_cast<std::size_t>(n_rows) * V * sizeof(float));
    cuda::logits_to_probs(stream_, logits.data, V, dev<std::int32_t>(at_src),
                          dev<std::int32_t>(at_dst), n_rows, config(params), probs_.as<float>(),
                          dev<int>(at_error));
    cuda::verify_trees_sampling(stream_, probs_.as<float>(), V, dev<cuda::TreeSpec>(at_trees),
                                n_trees, dev<std::int32_t>(at_tokens),
                                dev<std::int32_t>(at_parents), dev<double>(at_u),
                                dev<std::int32_t>(at_out), dev<std::int32_t>(at_paths));
    download(at_error, s.bytes() - at_error);
    SPEC_CHECK(host<int>(at_error)[0] == 0,
               "verify_tree_sampling: a target logit row has a NaN or no finite maximum");
    for (int c = 0, node = 0; c < n_trees; node += trees[c].tree.n, ++c) {
      TreeVerdict& v = out[c];
      v.accepted = host<std::int32_t>(at_out)[2 * c];
      v.token = host<std::int32_t>(at_out)[2 * c + 1];
      SPEC_CHECK(v.token >= 0 && v.accepted <= kMaxTreeDepth,
                 "tree verification of sequence " << c << " found no token to emit");
      for (int j = 0; j < v.accepted; ++j) v.path[j] = host<std::int32_t>(at_paths)[node + j];
    }
  }

  void top_k(const RowsView& logits, std::span<const int> rows, int k, std::span<std::int32_t> ids,
             std::span<float> logprobs) override {
    check(logits, rows);
    SPEC_CHECK(k >= 1 && k <= cuda::kMaxTopK && k <= logits.width,
               "top_k: k = " << k << " outside 1.." << std::min(cuda::kMaxTopK, logits.width));
    const int n = static_cast<int>(rows.size());
    Staging s;
    const std::size_t at_rows = s.add<std::int32_t>(n);
    const std::size_t at_ids = s.add<std::int32_t>(static_cast<std::size_t>(n) * k);
    const std::size_t at_lp = s.add<float>(static_cast<std::size_t>(n) * k);
    stage(s);
    copy_ints(at_rows, rows);
    upload(s);
    cuda::top_k_rows(stream_, logits.data, logits.width, dev<std::int32_t>(at_rows), n, k,
                     dev<std::int32_t>(at_ids), dev<float>(at_lp));
    download(at_ids, s.bytes() - at_ids);
    std::copy(host<std::int32_t>(at_ids), host<std::int32_t>(at_ids) + n * k, ids.begin());
    std::copy(host<float>(at_lp), host<float>(at_lp) + n * k, logprobs.begin());
  }

  void verify_sampling(const RowsView& logits, const SamplingParams& params,
                       std::span<const ChainToVerify> chains,
                       std::span<VerifyResult> out) override {
    SPEC_CHECK(logits.backend == BackendKind::kCuda, "CUDA token ops given a host view");
    const int V = logits.width;
    const int n_chains = static_cast<int>(chains.size());
    int n_drafts = 0, n_rows = 0;
    for (const ChainToVerify& c : chains) {
      const int k = static_cast<int>(c.drafts.size());
      n_drafts += k;
      n_rows += k + 1;
      SPEC_CHECK(k == 0 || (c.q_row >= 0 && c.q_row + k <= draft_rows_ && draft_vocab_ == V),
                 "verify_sampling: draft distributions " << c.q_row << ".." << c.q_row + k
                                                         << " are not kept");
    }
    const int n_uniforms = 2 * n_drafts + n_chains;
    Staging s;
    const std::size_t at_src = s.add<std::int32_t>(n_rows), at_dst = s.add<std::int32_t>(n_rows);
    const std::size_t at_chains = s.add<cuda::ChainSpec>(n_chains);
    const std::size_t at_drafts = s.add<std::int32_t>(std::max(n_drafts, 1));
    const std::size_t at_u = s.add<double>(n_uniforms);
    const std::size_t at_error = s.add<int>(1);
    const std::size_t at_out = s.add<std::int32_t>(2 * n_chains);
    stage(s);
    // The target rows of every chain, transformed into probs_ rows 0.. in chain order.
    for (int c = 0, row = 0; c < n_chains; ++c)
      for (int j = 0; j <= static_cast<int>(chains[c].drafts.size()); ++j, ++row) {
        host<std::int32_t>(at_src)[row] = chains[c].target_row + j;
        host<std::int32_t>(at_dst)[row] = row;
      }
    fill_chains(chains, at_chains, at_drafts, host<double>(at_u));
    host<int>(at_error)[0] = 0;
    upload(s);
    probs_.grow(static_cast<std::size_t>(n_rows) * V * sizeof(float));
    cuda::logits_to_probs(stream_, logits.data, V, dev<std::int32_t>(at_src),
                          dev<std::int32_t>(at_dst), n_rows, config(params), probs_.as<float>(),
                          dev<int>(at_error));
    cuda::verify_chains_sampling(
        stream_, probs_.as<float>(), draft_.as<float>(), V, dev<cuda::ChainSpec>(at_chains),
        n_chains, dev<std::int32_t>(at_drafts), dev<double>(at_u), dev<std::int32_t>(at_out));
    download(at_error, s.bytes() - at_error);
    SPEC_CHECK(host<int>(at_error)[0] == 0,
               "verify_sampling: a target logit row has a NaN or no finite maximum");
    read_results(at_out, out, n_chains);
  }

 private:
  static cuda::SamplingConfig config(const SamplingParams& p) {
    SPEC_CHECK(p.temperature > 0.0f, "sampling needs temperature > 0; greedy decoding uses argmax");
    return cuda::SamplingConfig{p.temperature, p.top_k, p.top_p};
  }
  static void check(const RowsView& logits, std::span<const int> rows) {
    SPEC_CHECK(logits.backend == BackendKind::kCuda, "CUDA token ops given a host view");
    for (int r : rows)
      SPEC_CHECK(r >= 0 && r < logits.rows, "token ops: row " << r << " of " << logits.rows);
  }

  // Transforms rows src[i] into `store` rows dst[i] and samples each with u[i].
  void transform_and_sample(const RowsView& logits, std::span<const int> src,
                            std::span<const int> dst, const SamplingParams& params,
                            std::span<const double> u, float* store, std::span<std::int32_t> out) {
    const int n = static_cast<int>(src.size());
    Staging s;
    const std::size_t at_src = s.add<std::int32_t>(n), at_dst = s.add<std::int32_t>(n);
    const std::size_t at_u = s.add<double>(n);
    const std::size_t at_error = s.add<int>(1);
    const std::size_t at_out = s.add<std::int32_t>(n);
    stage(s);
    copy_ints(at_src, src);
    copy_ints(at_dst, dst);
    std::memcpy(host<double>(at_u), u.data(), n * sizeof(double));
    host<int>(at_error)[0] = 0;
    upload(s);
    cuda::logits_to_probs(stream_, logits.data, logits.width, dev<std::int32_t>(at_src),
                          dev<std::int32_t>(at_dst), n, config(params), store, dev<int>(at_error));
    cuda::sample_rows(stream_, store, logits.width, dev<std::int32_t>(at_dst), n, dev<double>(at_u),
                      dev<std::int32_t>(at_out));
    download(at_error, s.bytes() - at_error);
    SPEC_CHECK(host<int>(at_error)[0] == 0,
               "sampling: a logit row has a NaN or no finite maximum; the model output is broken");
    for (int i = 0; i < n; ++i) {
      out[i] = host<std::int32_t>(at_out)[i];
      SPEC_CHECK(out[i] >= 0, "sampling: no probability mass left in row " << src[i]);
    }
  }

  // ChainSpecs (target rows renumbered as transformed into probs_, in chain order), drafts and
  // each chain's 2k + 1 uniforms: accept, residual, bonus, keyed as verify_sampling keys them.
  void fill_chains(std::span<const ChainToVerify> chains, std::size_t at_chains,
                   std::size_t at_drafts, double* uniforms) {
    int draft = 0, uniform = 0, row = 0;
    for (std::size_t c = 0; c < chains.size(); ++c) {
      const ChainToVerify& ch = chains[c];
      const int k = static_cast<int>(ch.drafts.size());
      cuda::ChainSpec spec;
      spec.k = k;
      spec.target_row = row;
      spec.q_row = ch.q_row;
      spec.first_draft = draft;
      spec.first_uniform = uniform;
      host<cuda::ChainSpec>(at_chains)[c] = spec;
      for (int i = 0; i < k; ++i) host<std::int32_t>(at_drafts)[draft + i] = ch.drafts[i];
      for (int i = 0; i < k; ++i) {
        uniforms[uniform + i] = ch.key.uniform(ch.first_position + i, RandPurpose::kAccept);
        uniforms[uniform + k + i] = ch.key.uniform(ch.first_position + i, RandPurpose::kResidual);
      }
      uniforms[uniform + 2 * k] = ch.key.uniform(ch.first_position + k, RandPurpose::kBonus);
      draft += k;
      uniform += 2 * k + 1;
      row += k + 1;
    }
  }

  void read_results(std::size_t at_out, std::span<VerifyResult> out, int n_chains) {
    for (int c = 0; c < n_chains; ++c) {
      out[c].accepted = host<std::int32_t>(at_out)[2 * c];
      out[c].token = host<std::int32_t>(at_out)[2 * c + 1];
      SPEC_CHECK(out[c].token >= 0, "verification of chain " << c << " found no token to emit");
    }
  }

  void stage(const Staging& s) {
    host_.grow(std::max<std::size_t>(s.bytes(), 1));
    device_.grow(std::max<std::size_t>(s.bytes(), 1));
    staged_ = s.bytes();
  }
  void copy_ints(std::size_t at, std::span<const int> v) {
    for (std::size_t i = 0; i < v.size(); ++i) host<std::int32_t>(at)[i] = v[i];
  }
  void upload(const Staging&) {
    CUDA_CHECK(
        cudaMemcpyAsync(device_.get(), host_.get(), staged_, cudaMemcpyHostToDevice, stream_));
  }
  void download(std::size_t at, std::size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(host_.as<std::byte>() + at, device_.as<std::byte>() + at, bytes,
                               cudaMemcpyDeviceToHost, stream_));
    ctx_.synchronize();
  }
  template <typename T>
  T* host(std::size_t at) {
    return reinterpret_cast<T*>(host_.as<std::byte>() + at);
  }
  template <typename T>
  T* dev(std::size_t at) {
    return reinterpret_cast<T*>(device_.as<std::byte>() + at);
  }

  CudaContext& ctx_;
  cudaStream_t stream_;
  cuda::PinnedBuffer host_;
  cuda::DeviceBuffer device_, probs_, draft_;
  std::size_t staged_ = 0;
  int draft_rows_ = 0, draft_vocab_ = 0;
};

}  // namespace

std::unique_ptr<TokenOps> make_cuda_token_ops(CudaContext* cuda) {
  SPEC_CHECK(cuda != nullptr, "CUDA token ops need the rank's CUDA context");
  return std::make_unique<CudaTokenOps>(*cuda);
}

#endif  // SPECRUN_HAVE_CUDA

}  // namespace specrun
