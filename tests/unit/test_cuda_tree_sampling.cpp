// Top-k selection and tree verification by sampling on the device (kernels/cuda/sampling.h)
// against the CPU reference (spec/sampling.h, spec/verifier.h) on seeded random inputs (label
// "gpu"); the rest of the device token decisions: test_cuda_sampling.cpp. Every output buffer is
// poisoned before the launch (floats NaN, ints 0x7f7f7f7f), and every comparison fails on NaN.
//
// Tolerances and what may legitimately differ (see kernels/cuda/sampling.cu and
// sampling_verify.cu):
//   top_k_rows: ids exact (ties to the lower id, NaN never chosen); log-probabilities within
//     1e-6 relative (+ 1e-12 absolute, for values near 0) of the double reference logit -
//     (max + log(sum exp(logit - max))): the device sums in another order, with its own exp
//     and log, then rounds to float.
//   verify_trees_sampling: accepted count, path and token exactly verify_tree_sampling_with's
//     (driven by sample_from), except when the uniform of the first level where they differ
//     lies within 1e-12 of a cumulative boundary of the row sampled there (counted, bounded);
//     every device walk must still be one the rule can produce.
// Skips visibly without a CUDA build or without a device.
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaTreeSampling, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no device sampling to test";
}

#else

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_sampling_test_util.h"
#include "cuda_test_util.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/sampling.h"
#include "spec/sampling.h"
#include "spec/verifier.h"

using namespace specrun;
using namespace specrun::test::sampling;

namespace {

// ---- top_k_rows --------------------------------------------------------------------------------

// The CPU reference of top_k_rows: the k first ids in the order (larger logit first, lower id on
// ties, NaN after every number) and logit - logsumexp(row) in double: max + log(sum over the
// numbers of exp(x_i - max)), max the largest logit.
struct TopKReference {
  std::vector<int> ids;
  std::vector<double> logprobs;
};

TopKReference cpu_top_k(const float* x, int vocab, int k) {
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [x](int a, int b) {
    const bool nan_a = std::isnan(x[a]), nan_b = std::isnan(x[b]);
    if (nan_a != nan_b) return nan_b;                // numbers first
    if (!nan_a && x[a] != x[b]) return x[a] > x[b];  // larger logit first
    return a < b;                                    // ties (-0 == +0): lower id
  });
  const double max = x[order[0]];
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i)
    if (!std::isnan(x[i])) sum += std::exp(static_cast<double>(x[i]) - max);
  const double lse = max + std::log(sum);
  TopKReference r;
  for (int j = 0; j < k; ++j) {
    r.ids.push_back(order[j]);
    r.logprobs.push_back(static_cast<double>(x[order[j]]) - lse);
  }
  return r;
}

TEST(CudaTreeSampling, TopKRowsMatchesCpu) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(108);
  double worst = 0.0;  // worst |error| / tolerance
  for (const int vocab : {7, 1000, 32000, 151936}) {
    // The six kinds of make_logits (ties at the cut in quantized, flat and signed-zero rows,
    // -inf in masked rows) and a normal row with ~10% NaN (token 0 among them); each row
    // again for every k, fresh logits for every vocabulary.
    std::vector<std::vector<float> > rows;
    for (RowKind kind : kRowKinds) rows.push_back(make_logits(vocab, kind, rng));
    auto nans = make_logits(vocab, RowKind::kNormal, rng);
    for (float& v : nans)
      if (uniform01(rng) < 0.1) v = std::nanf("");
    nans[0] = std::nanf("");
    nans[vocab - 1] = 50.0f;  // the largest logit is the last token
    rows.push_back(nans);
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    const int n = static_cast<int>(rows.size());
    auto d_x = upload(flat);
    for (const int k_wanted : {1, 3, 10, 64}) {
      const int k = std::min(k_wanted, vocab);
      // Rows out of order, one twice.
      std::vector<std::int32_t> pick(n);
      std::iota(pick.begin(), pick.end(), 0);
      std::shuffle(pick.begin(), pick.end(), rng);
      pick.push_back(pick[1]);
      const std::size_t n_out = pick.size() * static_cast<std::size_t>(k);
      auto d_rows = upload(pick);
      auto d_ids = poisoned<std::int32_t>(n_out, 0x7f);
      auto d_lp = poisoned<float>(n_out, 0xff);
      cuda::top_k_rows(stream(), d_x.as<float>(), vocab, d_rows.as<std::int32_t>(),
                       static_cast<int>(pick.size()), k, d_ids.as<std::int32_t>(),
                       d_lp.as<float>());
      const auto ids = download<std::int32_t>(d_ids, n_out);
      const auto lp = download<float>(d_lp, n_out);
      for (std::size_t r = 0; r < pick.size(); ++r) {
        const float* x = rows[pick[r]].data();
        // Fewer numbers than k (the NaN row of the smallest vocabulary): not in the contract.
        if (std::count_if(x, x + vocab, [](float v) { return !std::isnan(v); }) < k) continue;
        const TopKReference ref = cpu_top_k(x, vocab, k);
        for (int j = 0; j < k; ++j) {
          const std::size_t at = r * k + j;
          const std::string what = "vocab " + std::to_string(vocab) + " k " + std::to_string(k) +
                                   " row " + std::to_string(pick[r]) + " rank " + std::to_string(j);
          ASSERT_EQ(ids[at], ref.ids[j]) << what;
          ASSERT_FALSE(std::isnan(x[ids[at]])) << what << ": a NaN logit was chosen";
          const double expected = ref.logprobs[j];
          if (std::isinf(expected)) {  // a -inf logit among the k
            ASSERT_EQ(lp[at], expected) << what;
            continue;
          }
          // float32 of a double computed in another order: within 1e-6 relative (one float
          // rounding is 6e-8), plus 1e-12 absolute for log-probabilities near 0, where the
          // double's own rounding (~1e-15 of the log-sum-exp) dominates.
          const double tolerance = 1e-6 * std::fabs(expected) + 1e-12;
          const double error = std::fabs(static_cast<double>(lp[at]) - expected);
          ASSERT_TRUE(error <= tolerance)  // NaN fails
              << what << ": logprob " << lp[at] << ", expected " << expected;
          worst = std::max(worst, error / tolerance);
        }
      }
    }
  }
  std::printf("  worst logprob error: %.3g of the tolerance\n", worst);
}

// ---- tree verification by sampling -------------------------------------------------------------

// Trees of one launch: probability rows, the TreeSpecs, their nodes and uniforms, and the size
// of the paths array (each tree's share followed by one spare entry that must stay untouched).
struct TreeBatch {
  int vocab = 0;
  std::vector<float> probs;
  std::vector<cuda::TreeSpec> specs;
  std::vector<std::int32_t> tokens, parents;
  std::vector<double> uniforms;
  int path_entries = 0;

  const float* row(int r) const { return probs.data() + static_cast<std::size_t>(r) * vocab; }
  int n_rows() const { return static_cast<int>(probs.size() / vocab); }
  // The row after `node` (-1: the root) of tree c.
  const float* row_after(int c, int node) const { return row(specs[c].first_row + 1 + node); }
  TreeView view(int c) const {
    const cuda::TreeSpec& s = specs[c];
    return TreeView{tokens.data() + s.first_node, parents.data() + s.first_node, s.n_nodes};
  }
  void add_row(const std::vector<float>& p) { probs.insert(probs.end(), p.begin(), p.end()); }
  // Appends a tree's spec for nodes tokens/parents [node_begin, end) whose rows start at
  // first_row; `levels` uniforms from `u`.
  void add_spec(int node_begin, int first_row, const std::vector<double>& u) {
    cuda::TreeSpec s;
    s.n_nodes = static_cast<int>(tokens.size()) - node_begin;
    s.first_node = node_begin;
    s.first_row = first_row;
    uniforms.push_back(0.5);  // a gap: trees' uniforms do not start at 0
    s.first_uniform = static_cast<int>(uniforms.size());
    uniforms.insert(uniforms.end(), u.begin(), u.end());
    s.first_path = path_entries;
    path_entries += s.n_nodes + 1;
    specs.push_back(s);
  }
};

struct TreeResults {
  std::vector<std::int32_t> out, paths;
};

TreeResults run_trees(const TreeBatch& b) {
  auto d_probs = upload(b.probs);
  auto d_specs = upload(b.specs);
  auto d_tokens = upload(b.tokens), d_parents = upload(b.parents);
  auto d_u = upload(b.uniforms);
  auto d_out = poisoned<std::int32_t>(2 * b.specs.size(), 0x7f);
  auto d_paths = poisoned<std::int32_t>(b.path_entries, 0x7f);
  cuda::verify_trees_sampling(stream(), d_probs.as<float>(), b.vocab, d_specs.as<cuda::TreeSpec>(),
                              static_cast<int>(b.specs.size()), d_tokens.as<std::int32_t>(),
                              d_parents.as<std::int32_t>(), d_u.as<double>(),
                              d_out.as<std::int32_t>(), d_paths.as<std::int32_t>());
  TreeResults r;
  r.out = download<std::int32_t>(d_out, 2 * b.specs.size());
  r.paths = download<std::int32_t>(d_paths, b.path_entries);
  return r;
}

// The CPU's verdict on tree c: verify_tree_sampling_with driven by sample_from on the same rows
// and uniforms.
TreeVerdict cpu_tree_verdict(const TreeBatch& b, int c) {
  const double* u = b.uniforms.data() + b.specs[c].first_uniform;
  return verify_tree_sampling_with(b.view(c), [&](int node, int level) {
    return sample_from(b.row_after(c, node), b.vocab, u[level]);
  });
}

// The device's verdict on tree c (path entries past `accepted` are not read).
TreeVerdict device_tree_verdict(const TreeBatch& b, const TreeResults& r, int c) {
  TreeVerdict v;
  v.accepted = r.out[2 * c];
  v.token = r.out[2 * c + 1];
  for (int j = 0; j < v.accepted && j < kMaxTreeDepth; ++j)
    v.path[j] = r.paths[b.specs[c].first_path + j];
  return v;
}

// Checks that v is a walk the rule can produce on tree c whatever the uniforms: a path of first
// children by token from the root, each token of positive weight in the row it was drawn from,
// and an emitted token of positive weight that no child of the last node carries.
void check_tree_walk(const std::string& what, const TreeBatch& b, int c, const TreeVerdict& v) {
  const TreeView tree = b.view(c);
  ASSERT_TRUE(v.accepted >= 0 && v.accepted <= tree.n) << what << ": accepted " << v.accepted;
  int node = -1;
  for (int j = 0; j < v.accepted; ++j) {
    const int next = v.path[j];
    ASSERT_TRUE(next >= 0 && next < tree.n) << what << ": path[" << j << "] = " << next;
    const int y = tree.tokens[next];
    ASSERT_EQ(child_with_token(tree, node, y), next) << what << ": path[" << j << "]";
    ASSERT_GT(b.row_after(c, node)[y], 0.0f) << what << ": path[" << j << "] of weight 0";
    node = next;
  }
  ASSERT_TRUE(v.token >= 0 && v.token < b.vocab) << what << ": token " << v.token;
  ASSERT_GT(b.row_after(c, node)[v.token], 0.0f) << what << ": token of weight 0";
  ASSERT_EQ(child_with_token(tree, node, v.token), -1)
      << what << ": token " << v.token << " has a child to descend into";
}

// The token sampled at level l of a verdict: the token of path[l], or the emitted token.
int sampled_at(const TreeView& tree, const TreeVerdict& v, int level) {
  return level < v.accepted ? tree.tokens[v.path[level]] : v.token;
}

// Compares the device's verdict on tree c with the CPU's: equal, or first different at a level
// whose uniform lies within 1e-12 of a cumulative boundary of the row sampled there (counted in
// *boundary). Paths are compared node by node.
void compare_tree(const std::string& what, const TreeBatch& b, int c, const TreeVerdict& got,
                  const TreeVerdict& expected, long* boundary) {
  const TreeView tree = b.view(c);
  const double* u = b.uniforms.data() + b.specs[c].first_uniform;
  int node = -1;
  for (int level = 0;; ++level) {
    const int y_got = sampled_at(tree, got, level), y_expected = sampled_at(tree, expected, level);
    const bool got_ends = level == got.accepted, expected_ends = level == expected.accepted;
    if (y_got != y_expected || got_ends != expected_ends) {
      ASSERT_TRUE(near_cumulative_boundary(b.row_after(c, node), b.vocab, u[level]))
          << what << ": level " << level << " (u " << u[level] << ") gave token " << y_got
          << (got_ends ? " (emitted)" : "") << ", the CPU " << y_expected
          << (expected_ends ? " (emitted)" : "");
      ++*boundary;
      return;
    }
    if (got_ends) return;
    ASSERT_EQ(got.path[level], expected.path[level]) << what << ": path[" << level << "]";
    node = got.path[level];
  }
}

// Every entry of `paths` not on a device path (the first `accepted` entries of each tree's
// share) must keep the poison.
void check_paths_untouched(const std::string& what, const TreeBatch& b, const TreeResults& r) {
  std::vector<bool> written(b.path_entries, false);
  for (std::size_t c = 0; c < b.specs.size(); ++c)
    for (int j = 0; j < r.out[2 * c] && j < b.specs[c].n_nodes; ++j)
      written[b.specs[c].first_path + j] = true;
  for (int i = 0; i < b.path_entries; ++i)
    if (!written[i]) {
      ASSERT_EQ(r.paths[i], kPoisonInt) << what << ": paths[" << i << "] written";
    }
}

TEST(CudaTreeSampling, VerifyTreesSamplingMatchesVerifyTreeSamplingWith) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(109);
  long boundary = 0, trees = 0;
  for (const int vocab : {50, 1000, 32000}) {
    // Mostly concentrated rows (temperature 0.25, top-k 8) so that drafted tokens are often
    // accepted, some wider ones (top-k 40, top-p).
    const SamplingParams params_a{0.25f, 8, 1.0f}, params_b{1.0f, 40, 0.9f};
    // A chain's rows are peaked (one token far above the rest) half of the time: deep walks.
    auto fresh_row = [&](bool chain) {
      const double kind = uniform01(rng);
      const auto x = make_logits(vocab,
                                 chain && kind < 0.5 ? RowKind::kPeaked
                                 : kind < 0.8        ? RowKind::kNormal
                                                     : RowKind::kMasked,
                                 rng);
      std::vector<float> p(vocab);
      logits_to_probs(x.data(), vocab, uniform01(rng) < 0.7 ? params_a : params_b, p.data());
      return p;
    };
    TreeBatch b;
    b.vocab = vocab;
    b.add_row(std::vector<float>(vocab, 0.25f));  // a row no tree uses
    // A drafted token for a child of a node whose row is p: mostly likely tokens (sampled from
    // p or its argmax), sometimes a token of probability 0 or any token.
    auto draft_token = [&](const std::vector<float>& p) {
      const double r = uniform01(rng);
      if (r < 0.3) return sample_from(p.data(), vocab, uniform01(rng));
      if (r < 0.85) return argmax(p.data(), vocab);
      if (r < 0.92) {
        const int t = static_cast<int>(rng() % vocab);
        if (p[t] == 0.0f) return t;
      }
      return static_cast<int>(rng() % vocab);
    };
    // Each node has its own row: fewer and smaller trees for the large vocabulary.
    const int n_trees = vocab > 10000 ? 100 : 240, max_nodes = vocab > 10000 ? 12 : 30;
    for (int c = 0; c < n_trees; ++c) {
      // Shapes: 0 nodes (plain sampling), chains, random trees, wide trees, trees with
      // duplicate sibling tokens.
      const int shape = c % 5;
      int n = 0;
      if (shape == 1) n = 1 + static_cast<int>(rng() % 7);
      if (shape == 2 || shape == 4) n = 2 + static_cast<int>(rng() % (max_nodes - 1));
      if (shape == 3) n = 8 + static_cast<int>(rng() % (max_nodes - 7));
      const int node_begin = static_cast<int>(b.tokens.size());
      const int first_row = b.n_rows();
      std::vector<std::vector<float> > rows = {fresh_row(shape == 1)};  // the root's, node i's
      std::vector<int> depth;
      for (int i = 0; i < n; ++i) {
        int parent = -1;
        if (shape == 1) parent = i - 1;
        if (shape == 2 || shape == 4)  // often the previous node: deeper trees
          parent = uniform01(rng) < 0.4 ? i - 1 : static_cast<int>(rng() % (i + 1)) - 1;
        if (shape == 3) parent = i < 6 ? -1 : static_cast<int>(rng() % 6);
        int token = draft_token(rows[parent + 1]);
        if (shape == 4 && uniform01(rng) < 0.5) {  // the token of an earlier sibling
          for (int s = 0; s < i; ++s)
            if (b.parents[node_begin + s] == parent) token = b.tokens[node_begin + s];
        }
        b.tokens.push_back(token);
        b.parents.push_back(parent);
        depth.push_back(parent < 0 ? 1 : depth[parent] + 1);
        rows.push_back(fresh_row(shape == 1));
      }
      for (const auto& p : rows) b.add_row(p);
      const int levels = 1 + (n > 0 ? *std::max_element(depth.begin(), depth.end()) : 0);
      std::vector<double> u(levels);
      for (double& v : u) v = uniform01(rng);
      if (c % 37 == 5) u[0] = 0.0;  // the extremes
      if (c % 37 == 6) u[0] = 1.0 - 0x1.0p-53;
      b.add_spec(node_begin, first_row, u);
    }
    // Two trees with a row without mass (the CPU's sample_from throws; the device emits -1):
    // the root's row all zeros; and a root row with all its mass on token 3, drafted by two
    // siblings (the first is taken), whose row is all zeros.
    const int zero_root = static_cast<int>(b.specs.size());
    {
      const int node_begin = static_cast<int>(b.tokens.size()), first_row = b.n_rows();
      b.tokens.insert(b.tokens.end(), {1, 2});
      b.parents.insert(b.parents.end(), {-1, 0});
      b.add_row(std::vector<float>(vocab, 0.0f));
      b.add_row(fresh_row(false));
      b.add_row(fresh_row(false));
      b.add_spec(node_begin, first_row, {0.3, 0.3, 0.3});
    }
    {
      const int node_begin = static_cast<int>(b.tokens.size()), first_row = b.n_rows();
      b.tokens.insert(b.tokens.end(), {3, 3});
      b.parents.insert(b.parents.end(), {-1, -1});
      std::vector<float> one_hot(vocab, 0.0f);
      one_hot[3] = 1.0f;
      b.add_row(one_hot);
      b.add_row(std::vector<float>(vocab, 0.0f));
      b.add_row(fresh_row(false));
      b.add_spec(node_begin, first_row, {0.7, 0.7});
    }

    const TreeResults r = run_trees(b);
    const std::string v_what = "vocab " + std::to_string(vocab);
    check_paths_untouched(v_what, b, r);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(r.out[2 * zero_root], 0) << v_what << ": root row without mass";
    EXPECT_EQ(r.out[2 * zero_root + 1], -1) << v_what << ": root row without mass";
    EXPECT_EQ(r.out[2 * zero_root + 2], 1) << v_what << ": node row without mass";
    EXPECT_EQ(r.out[2 * zero_root + 3], -1) << v_what << ": node row without mass";
    EXPECT_EQ(r.paths[b.specs[zero_root + 1].first_path], 0) << v_what << ": first sibling";

    int partial = 0, deep = 0, to_leaf = 0, duplicate_taken = 0;
    for (int c = 0; c < n_trees; ++c) {
      const std::string what = v_what + " tree " + std::to_string(c) + " (" +
                               std::to_string(b.specs[c].n_nodes) + " nodes)";
      const TreeVerdict got = device_tree_verdict(b, r, c);
      check_tree_walk(what, b, c, got);
      if (::testing::Test::HasFatalFailure()) return;
      compare_tree(what, b, c, got, cpu_tree_verdict(b, c), &boundary);
      if (::testing::Test::HasFatalFailure()) return;
      ++trees;
      // Coverage: how far the walks went.
      const TreeView tree = b.view(c);
      partial += got.accepted > 0;
      deep += got.accepted >= 3;
      if (got.accepted > 0) {
        const int last = got.path[got.accepted - 1];
        to_leaf += std::find(tree.parents, tree.parents + tree.n, last) == tree.parents + tree.n;
      }
      for (int j = 0; j < got.accepted; ++j) {
        const int node = got.path[j];
        for (int s = node + 1; s < tree.n; ++s)
          duplicate_taken +=
              tree.parents[s] == tree.parents[node] && tree.tokens[s] == tree.tokens[node];
      }
    }
    std::printf(
        "  %s: %d trees, %d with an accepted node, %d with 3 or more, %d to a leaf, "
        "%d duplicate siblings passed over\n",
        v_what.c_str(), n_trees, partial, deep, to_leaf, duplicate_taken);
    EXPECT_GE(partial, n_trees / 3) << v_what;
    EXPECT_GE(deep, n_trees / 25) << v_what;
    EXPECT_GE(to_leaf, n_trees / 20) << v_what;
    EXPECT_GE(duplicate_taken, n_trees / 20) << v_what;
  }
  std::printf("  %ld trees, %ld differing at a cumulative boundary\n", trees, boundary);
  // Random uniforms land within 1e-12 of a boundary with probability ~1e-12 * vocab per level.
  EXPECT_LE(boundary, 1);
}

TEST(CudaTreeSampling, VerifiedTreeOutputIsDistributedAsTheTarget) {
  // A fixed tree on a 6-token vocabulary and fixed distributions, verified many times with
  // fresh uniforms. The emitted sequence (the accepted path's tokens, then the token) must be
  // distributed as sampling the target step by step: each possible sequence (a prefix-free
  // set: the walks of the rule) has the product of its tokens' probabilities, and the first
  // emitted token follows the root's row (chi-square at p = 0.001 each). Power checks on the
  // same uniforms: a rule that tests the first child with its probability and otherwise
  // samples the root's row again (the first token), descending into the last of two sibling
  // duplicates, and one uniform for every level (the sequence) must fail by a wide margin.
  REQUIRE_DEVICE();
  const int vocab = 6, n = 60000;
  // node:          0   1   2   3  4  5  6
  // parent:       -1  -1  -1   0  1  2  3
  // token:         0   2   2   1  3  4  0   (node 2 duplicates node 1: never reached)
  const std::vector<std::int32_t> tokens = {0, 2, 2, 1, 3, 4, 0};
  const std::vector<std::int32_t> parents = {-1, -1, -1, 0, 1, 2, 3};
  const int n_nodes = static_cast<int>(tokens.size()), levels = 4;  // depth 3
  std::mt19937_64 rng(110);
  // Logits uniform in [-1, 1], top-k 5 (one token of each row has probability 0); node 2's row
  // has node 1's logits reversed, so that the duplicates lead to different distributions. Tokens
  // 0 and 2 are kept at the root.
  std::vector<std::vector<float> > logits(n_nodes + 1, std::vector<float>(vocab));
  std::uniform_real_distribution<float> spread(-1.0f, 1.0f);
  for (auto& x : logits)
    for (float& v : x) v = spread(rng);
  logits[0][0] = 1.0f;
  logits[0][2] = 0.9f;
  std::reverse_copy(logits[2].begin(), logits[2].end(), logits[3].begin());
  std::vector<float> probs;  // the root's row, then node i's
  for (const auto& x : logits) {
    std::vector<float> p(vocab);
    logits_to_probs(x.data(), vocab, SamplingParams{1.0f, 5, 1.0f}, p.data());
    probs.insert(probs.end(), p.begin(), p.end());
  }
  const float* root_row = probs.data();
  auto row_after = [&](int node) {
    return probs.data() + static_cast<std::size_t>(node + 1) * vocab;
  };

  // The cells: every sequence the rule can emit, with its probability.
  std::map<std::vector<int>, int> cell_of;
  std::vector<float> cell_p;
  const TreeView tree{tokens.data(), parents.data(), n_nodes};
  std::function<void(int, std::vector<int>, double)> enumerate =
      [&](int node, std::vector<int> prefix, double mass) {
        for (int y = 0; y < vocab; ++y) {
          const double p = row_after(node)[y];
          if (p == 0.0) continue;
          std::vector<int> seq = prefix;
          seq.push_back(y);
          const int child = child_with_token(tree, node, y);
          if (child >= 0) {
            enumerate(child, seq, mass * p);
          } else {
            cell_of[seq] = static_cast<int>(cell_p.size());
            cell_p.push_back(static_cast<float>(mass * p));
          }
        }
      };
  enumerate(-1, {}, 1.0);
  ASSERT_GE(*std::min_element(cell_p.begin(), cell_p.end()) * n, 5.0) << "cells too small";

  std::vector<cuda::TreeSpec> specs(n);
  std::vector<double> uniforms(static_cast<std::size_t>(levels) * n);
  for (int c = 0; c < n; ++c) {
    specs[c] = cuda::TreeSpec{n_nodes, 0, 0, levels * c, (levels - 1) * c};
    for (int l = 0; l < levels; ++l) uniforms[levels * c + l] = uniform01(rng);
  }
  auto d_probs = upload(probs);
  auto d_specs = upload(specs);
  auto d_tokens = upload(tokens), d_parents = upload(parents);
  auto d_u = upload(uniforms);
  auto d_out = poisoned<std::int32_t>(2 * static_cast<std::size_t>(n), 0x7f);
  auto d_paths = poisoned<std::int32_t>((levels - 1) * static_cast<std::size_t>(n), 0x7f);
  cuda::verify_trees_sampling(stream(), d_probs.as<float>(), vocab, d_specs.as<cuda::TreeSpec>(), n,
                              d_tokens.as<std::int32_t>(), d_parents.as<std::int32_t>(),
                              d_u.as<double>(), d_out.as<std::int32_t>(),
                              d_paths.as<std::int32_t>());
  const auto out = download<std::int32_t>(d_out, 2 * static_cast<std::size_t>(n));
  const auto paths = download<std::int32_t>(d_paths, (levels - 1) * static_cast<std::size_t>(n));

  // A walk with a variant of the rule: `last_duplicate` descends into the last sibling with the
  // token, `one_uniform` uses level 0's uniform at every level.
  auto walk = [&](const double* u, bool last_duplicate, bool one_uniform) {
    std::vector<int> seq;
    int node = -1;
    while (true) {
      const int y = sample_from(row_after(node), vocab, u[one_uniform ? 0 : seq.size()]);
      seq.push_back(y);
      int child = -1;
      for (int i = 0; i < n_nodes; ++i)
        if (parents[i] == node && tokens[i] == y && (child < 0 || last_duplicate)) child = i;
      if (child < 0) return seq;
      node = child;
    }
  };

  const int cells = static_cast<int>(cell_p.size());
  std::vector<long> seq_count(cells, 0), wrong_dup(cells, 0), wrong_u(cells, 0);
  std::vector<long> first(vocab, 0), wrong_first(vocab, 0);
  long mismatches = 0, unknown = 0, wrong_unknown = 0;
  for (int c = 0; c < n; ++c) {
    const int accepted = out[2 * c], token = out[2 * c + 1];
    ASSERT_TRUE(accepted >= 0 && accepted < levels) << "tree " << c << ": accepted " << accepted;
    ASSERT_TRUE(token >= 0 && token < vocab) << "tree " << c << ": token " << token;
    std::vector<int> seq;
    TreeVerdict got;
    got.accepted = accepted;
    got.token = token;
    for (int j = 0; j < accepted; ++j) {
      const int node = paths[(levels - 1) * c + j];
      ASSERT_TRUE(node >= 0 && node < n_nodes) << "tree " << c << ": path[" << j << "]";
      got.path[j] = node;
      seq.push_back(tokens[node]);
    }
    seq.push_back(token);
    const double* u = uniforms.data() + levels * c;
    const TreeVerdict expected = verify_tree_sampling_with(
        tree, [&](int node, int level) { return sample_from(row_after(node), vocab, u[level]); });
    mismatches +=
        got.accepted != expected.accepted || got.token != expected.token ||
        !std::equal(got.path.begin(), got.path.begin() + got.accepted, expected.path.begin());
    const auto it = cell_of.find(seq);
    if (it == cell_of.end()) {
      ++unknown;
    } else {
      ++seq_count[it->second];
    }
    ++first[seq[0]];
    for (const auto& [wrong, count] : {std::make_pair(walk(u, true, false), &wrong_dup),
                                       std::make_pair(walk(u, false, true), &wrong_u)}) {
      const auto w = cell_of.find(wrong);
      if (w == cell_of.end())
        ++wrong_unknown;
      else
        ++(*count)[w->second];
    }
    // The first token by a wrong rule: the first child is accepted with its probability (u_0 <
    // p(token)); else the root's row is sampled again with u_1 (the child not excluded).
    const int t0 = tokens[0];
    ++wrong_first[u[0] < root_row[t0] ? t0 : sample_from(root_row, vocab, u[1])];
  }
  EXPECT_LE(mismatches, 1) << "device results differing from verify_tree_sampling_with";
  EXPECT_EQ(unknown, 0) << "emitted sequences the rule cannot produce";

  int df = 0;
  long impossible = 0;
  const double critical_seq = chi2_critical_001(cells - 1);
  const double stat = chi_square(seq_count, cell_p, n - unknown, &df, &impossible);
  std::printf("  emitted sequence:       chi2 %9.2f  df %d  critical(0.001) %.2f\n", stat, df,
              critical_seq);
  EXPECT_LT(stat, critical_seq);
  const std::vector<float> p_root(root_row, root_row + vocab);
  const double stat_first = chi_square(first, p_root, n, &df, &impossible);
  const double critical_first = chi2_critical_001(df);
  std::printf("  first token:            chi2 %9.2f  df %d  critical(0.001) %.2f\n", stat_first, df,
              critical_first);
  EXPECT_EQ(impossible, 0) << "first tokens of root probability 0 were emitted";
  EXPECT_LT(stat_first, critical_first);

  long ignored = 0;
  const double dup_stat = chi_square(wrong_dup, cell_p, n, &df, &ignored);
  const double u_stat = chi_square(wrong_u, cell_p, n, &df, &ignored);
  const double first_stat = chi_square(wrong_first, p_root, n, &df, &ignored);
  std::printf(
      "  wrong: last duplicate  chi2 %9.2f; one uniform chi2 %9.2f; first child tested "
      "then p resampled chi2 %9.2f (%ld sequences outside the cells)\n",
      dup_stat, u_stat, first_stat, wrong_unknown);
  EXPECT_GT(dup_stat, 10.0 * critical_seq) << "no power against the last duplicate sibling";
  EXPECT_GT(u_stat, 10.0 * critical_seq) << "no power against reusing one uniform";
  EXPECT_GT(first_stat, 10.0 * critical_first) << "no power against resampling the root row";
}

TEST(CudaTreeSampling, TreeAndTopKLaunchersRejectBadArguments) {
  REQUIRE_DEVICE();
  cuda::DeviceBuffer b(4096);
  const auto* rows = b.as<std::int32_t>();
  auto* ids = b.as<std::int32_t>() + 256;
  float* logprobs = b.as<float>() + 512;
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 100, rows, 1, 0, ids, logprobs),
               Error);  // k 0
  EXPECT_THROW(
      cuda::top_k_rows(stream(), b.as<float>(), 100, rows, 1, cuda::kMaxTopK + 1, ids, logprobs),
      Error);  // k > kMaxTopK
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 4, rows, 1, 5, ids, logprobs),
               Error);  // k > vocab
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 0, rows, 1, 1, ids, logprobs),
               Error);  // vocab 0
  EXPECT_THROW(cuda::top_k_rows(stream(), b.as<float>(), 100, rows, 1, 1, nullptr, logprobs),
               Error);  // no ids
  EXPECT_THROW(cuda::verify_trees_sampling(stream(), b.as<float>(), 4, nullptr, 1, nullptr, nullptr,
                                           b.as<double>(), ids, nullptr),
               Error);  // no trees
  EXPECT_THROW(cuda::verify_trees_sampling(stream(), b.as<float>(), 0, nullptr, 0, nullptr, nullptr,
                                           nullptr, nullptr, nullptr),
               Error);  // vocab 0
  // No rows / trees: nothing to do, no launch.
  cuda::top_k_rows(stream(), nullptr, 100, nullptr, 0, 5, nullptr, nullptr);
  cuda::verify_trees_sampling(stream(), nullptr, 4, nullptr, 0, nullptr, nullptr, nullptr, nullptr,
                              nullptr);
  // Trees of 0 nodes need no tokens, parents or paths: plain sampling of the root's row.
  auto d_p = upload(std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f});
  auto d_tree = upload(std::vector<cuda::TreeSpec>{cuda::TreeSpec{0, 0, 0, 0, 0}});
  auto d_u = upload(std::vector<double>{0.5});
  auto d_out = poisoned<std::int32_t>(2, 0x7f);
  cuda::verify_trees_sampling(stream(), d_p.as<float>(), 4, d_tree.as<cuda::TreeSpec>(), 1, nullptr,
                              nullptr, d_u.as<double>(), d_out.as<std::int32_t>(), nullptr);
  const auto got = download<std::int32_t>(d_out, 2);
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 1);
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

}  // namespace

#endif  // SPECRUN_HAVE_CUDA
