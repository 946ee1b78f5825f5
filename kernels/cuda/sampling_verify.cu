// Token decisions on the device (kernels/cuda/sampling.h), part 2: inverse-CDF sampling
// (sample_rows) and the verification of speculative chains and trees by sampling; sampling.cu
// has the sampling transforms and the top-k of log-softmax.
// Layout: logits and probabilities are [*, vocab] float32 row-major, a row selected by an int32
// index; chains and trees are ChainSpec and TreeSpec arrays; every array is device memory. One
// block of kThreads threads per row (or per chain or tree: its rows are visited one after
// another); rows are read in strides, so any vocabulary works (nothing assumes a row fits in
// shared memory). The block-wide reductions are in sampling_block.cuh.
//
// sample_rows / the residual and bonus samples: the total (double, fixed order), then chunked
// block-wide prefix sums in double in id order (each thread owns kItems consecutive ids of a
// chunk); the first id of positive weight where target = u * total < cumulative. Same rule as
// sample_from; the cumulative sums are rounded in another order, so a uniform whose target lies
// within rounding of a cumulative boundary may pick the neighbouring token. Weights that are not
// > 0 (zero, negative, NaN) count as 0 (the CPU throws on negative or NaN weights); a row without
// positive weight gives -1 (the CPU throws).
//
// Chain verification: a draft token outside [0, vocab) is rejected (the CPU's verify_sampling
// throws). Greedy verification of trees needs no kernel of its own: argmax_rows, then a walk
// over a few dozen ids on the host (src/spec/cuda_token_ops.cpp).
//
// Tree verification (verify_trees_sampling): one tree per block, walking from the root: the
// row after the current node is sampled as above (so a uniform within rounding of a cumulative
// boundary may pick the neighbouring token there, and the walk goes on from another place), and
// the first child in node order with that token is found by a block-wide minimum over the
// tree's nodes. A sample of -1 (a row without mass) ends the walk and is emitted. A path never
// exceeds the tree's n_nodes entries (or kMaxTreeDepth), so a malformed tree (a node its own
// parent) cannot write past its share of `paths`.
#include <climits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/sampling_block.cuh"

namespace specrun::cuda {
namespace {

using sampling_detail::block_extreme;
using sampling_detail::block_sum;
using sampling_detail::kFullMask;
using sampling_detail::kThreads;
using sampling_detail::kWarps;
constexpr int kItems = 8;          // sampling: consecutive ids per thread and chunk
constexpr int kMaxTreeDepth = 64;  // spec/verifier.h's: the longest path a tree verdict holds

// Block-wide exclusive prefix sum of one double per thread, in thread order; *total gets the
// block's sum (the same value for every thread). `shared` holds kWarps doubles.
__device__ __forceinline__ double block_exclusive_scan(double v, double* shared, double* total) {
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  double inclusive = v;
#pragma unroll
  for (int off = 1; off < detail::kWarp; off <<= 1) {
    const double o = __shfl_up_sync(kFullMask, inclusive, off);
    if (lane >= off) inclusive += o;
  }
  double exclusive = __shfl_up_sync(kFullMask, inclusive, 1);
  if (lane == 0) exclusive = 0.0;
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == detail::kWarp - 1) shared[warp] = inclusive;
  __syncthreads();
  double before = 0.0, sum = 0.0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) before = sum;
    sum += shared[w];
  }
  *total = sum;
  return before + exclusive;
}

// ---- inverse-CDF sampling ------------------------------------------------------------------

struct SampleScratch {
  double red_d[kWarps];
  int red_i[kWarps];
};

// The inverse-CDF sample of the weights weight(0..vocab) with uniform u: the smallest i with
// weight(i) > 0 and u * total < cumulative(i); the last id of positive weight when rounding
// leaves u * total at or past every cumulative sum; -1 when no weight is > 0. Called by every
// thread of the block; every thread gets the result.
template <class Weight>
__device__ int block_sample(int vocab, double u, Weight weight, SampleScratch& s) {
  // Pass 1: the total (fixed order) and the last id of positive weight.
  double local = 0.0;
  int last = -1;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float w = weight(i);
    if (w > 0.0f) {
      local += w;
      last = i;
    }
  }
  const double total = block_sum(local, s.red_d);
  last = block_extreme<true>(last, s.red_i);
  if (last < 0) return -1;
  const double target = u * total;

  // Pass 2: chunks of kThreads * kItems ids; thread t owns ids base + t * kItems + [0, kItems).
  double running = 0.0;  // cumulative mass before the chunk (the same in every thread)
  for (int base = 0; base < vocab; base += kThreads * kItems) {
    const int first = base + static_cast<int>(threadIdx.x) * kItems;
    float w[kItems];
    double mine = 0.0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = first + j;
      w[j] = i < vocab ? weight(i) : 0.0f;
      if (w[j] > 0.0f) mine += w[j];
    }
    double chunk_total;
    double cum = running + block_exclusive_scan(mine, s.red_d, &chunk_total);
    int hit = INT_MAX;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (hit == INT_MAX && w[j] > 0.0f) {
        cum += w[j];
        if (target < cum) hit = first + j;
      }
    }
    hit = block_extreme<false>(hit, s.red_i);
    if (hit != INT_MAX) return hit;
    running += chunk_total;
  }
  return last;
}

struct RowWeight {
  const float* w;
  __device__ float operator()(int i) const { return w[i]; }
};

// max(0, p - q) in float, as the CPU's sample_residual (NaN differences count as 0).
struct ResidualWeight {
  const float* p;
  const float* q;
  __device__ float operator()(int i) const { return fmaxf(0.0f, __fsub_rn(p[i], q[i])); }
};

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* __restrict__ probs, int vocab,
                       const std::int32_t* __restrict__ rows, const double* __restrict__ u,
                       std::int32_t* __restrict__ out) {
  __shared__ SampleScratch s;
  const float* w = probs + static_cast<std::size_t>(rows[blockIdx.x]) * vocab;
  const int token = block_sample(vocab, u[blockIdx.x], RowWeight{w}, s);
  if (threadIdx.x == 0) out[blockIdx.x] = token;
}

// ---- verification --------------------------------------------------------------------------

// The CPU's accept_draft_token (spec/verifier.h).
__device__ __forceinline__ bool accept_draft_token(double u, float p_x, float q_x) {
  if (!(p_x > 0.0f)) return false;
  if (!(q_x > 0.0f)) return true;
  return u <= static_cast<double>(p_x) / static_cast<double>(q_x);
}

// One chain per block. The acceptance decisions read a few scalars (every thread reads the same,
// so the block takes the same branch); the residual or bonus sample is block-wide.
__global__ void __launch_bounds__(kThreads)
    verify_sampling_kernel(const float* __restrict__ target_probs,
                           const float* __restrict__ draft_probs, int vocab,
                           const ChainSpec* __restrict__ chains,
                           const std::int32_t* __restrict__ drafts,
                           const double* __restrict__ uniforms, std::int32_t* __restrict__ out) {
  __shared__ SampleScratch s;
  const ChainSpec chain = chains[blockIdx.x];
  const double* u = uniforms + chain.first_uniform;  // accept[0..k), residual[0..k), bonus
  int accepted = chain.k;
  for (int i = 0; i < chain.k; ++i) {
    const int x = drafts[chain.first_draft + i];
    const float* p = target_probs + static_cast<std::size_t>(chain.target_row + i) * vocab;
    const float* q = draft_probs + static_cast<std::size_t>(chain.q_row + i) * vocab;
    if (x < 0 || x >= vocab || !accept_draft_token(u[i], p[x], q[x])) {
      accepted = i;
      break;
    }
  }
  const float* p = target_probs + static_cast<std::size_t>(chain.target_row + accepted) * vocab;
  int token;
  if (accepted < chain.k) {
    // Rejected: sample norm(max(0, p - q)), or p itself when that mass is 0.
    const float* q = draft_probs + static_cast<std::size_t>(chain.q_row + accepted) * vocab;
    const double ur = u[chain.k + accepted];
    token = block_sample(vocab, ur, ResidualWeight{p, q}, s);
    if (token < 0) token = block_sample(vocab, ur, RowWeight{p}, s);
  } else {
    token = block_sample(vocab, u[2 * chain.k], RowWeight{p}, s);
  }
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = accepted;
    out[2 * blockIdx.x + 1] = token;
  }
}

// Tree verification by sampling: one tree per block. At each node reached, the block samples
// the row after it (block_sample) and looks for the first child with that token (a block-wide
// minimum of the matching node indices).
__global__ void __launch_bounds__(kThreads)
    verify_trees_sampling_kernel(const float* __restrict__ probs, int vocab,
                                 const TreeSpec* __restrict__ trees,
                                 const std::int32_t* __restrict__ tokens,
                                 const std::int32_t* __restrict__ parents,
                                 const double* __restrict__ uniforms,
                                 std::int32_t* __restrict__ out, std::int32_t* __restrict__ paths) {
  __shared__ SampleScratch s;
  const TreeSpec tree = trees[blockIdx.x];
  // A path holds at most n_nodes nodes (each node at most once: children come after their
  // parents) and kMaxTreeDepth; the bound only stops malformed trees.
  const int max_path = min(tree.n_nodes, kMaxTreeDepth);
  int node = -1, accepted = 0, token;
  while (true) {
    const float* p = probs + static_cast<std::size_t>(tree.first_row + 1 + node) * vocab;
    token = block_sample(vocab, uniforms[tree.first_uniform + accepted], RowWeight{p}, s);
    if (token < 0 || accepted == max_path) break;  // no mass: emit -1
    int child = INT_MAX;
    for (int i = threadIdx.x; i < tree.n_nodes; i += kThreads) {
      if (parents[tree.first_node + i] == node && tokens[tree.first_node + i] == token) {
        child = i;  // this thread's first match
        break;
      }
    }
    child = block_extreme<false>(child, s.red_i);
    if (child == INT_MAX) break;
    if (threadIdx.x == 0) paths[tree.first_path + accepted] = child;
    ++accepted;
    node = child;
  }
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = accepted;
    out[2 * blockIdx.x + 1] = token;
  }
}

}  // namespace

void sample_rows(cudaStream_t stream, const float* probs, int vocab, const std::int32_t* rows,
                 int n_rows, const double* u, std::int32_t* out) {
  CUDA_OP_CHECK("sample_rows", vocab >= 1 && n_rows >= 0,
                "bad sizes: vocab " << vocab << ", rows " << n_rows);
  if (n_rows == 0) return;
  CUDA_OP_CHECK("sample_rows",
                probs != nullptr && rows != nullptr && u != nullptr && out != nullptr,
                "needs probs, rows, u and out");
  sample_rows_kernel<<<n_rows, kThreads, 0, stream>>>(probs, vocab, rows, u, out);
  CUDA_CHECK_LAUNCH();
}

void verify_chains_sampling(cudaStream_t stream, const float* target_probs,
                            const float* draft_probs, int vocab, const ChainSpec* chains,
                            int n_chains, const std::int32_t* drafts, const double* uniforms,
                            std::int32_t* out) {
  CUDA_OP_CHECK("verify_chains_sampling", vocab >= 1 && n_chains >= 0,
                "bad sizes: vocab " << vocab << ", chains " << n_chains);
  if (n_chains == 0) return;
  // draft_probs and drafts may be nullptr when every chain has k == 0.
  CUDA_OP_CHECK(
      "verify_chains_sampling",
      target_probs != nullptr && chains != nullptr && uniforms != nullptr && out != nullptr,
      "needs target_probs, chains, uniforms and out");
  verify_sampling_kernel<<<n_chains, kThreads, 0, stream>>>(target_probs, draft_probs, vocab,
                                                            chains, drafts, uniforms, out);
  CUDA_CHECK_LAUNCH();
}

void verify_trees_sampling(cudaStream_t stream, const float* probs, int vocab,
                           const TreeSpec* trees, int n_trees, const std::int32_t* tokens,
                           const std::int32_t* parents, const double* uniforms, std::int32_t* out,
                           std::int32_t* paths) {
  CUDA_OP_CHECK("verify_trees_sampling", vocab >= 1 && n_trees >= 0,
                "bad sizes: vocab " << vocab << ", trees " << n_trees);
  if (n_trees == 0) return;
  // tokens, parents and paths may be nullptr when every tree has 0 nodes.
  CUDA_OP_CHECK("verify_trees_sampling",
                probs != nullptr && trees != nullptr && uniforms != nullptr && out != nullptr,
                "needs probs, trees, uniforms and out");
  verify_trees_sampling_kernel<<<n_trees, kThreads, 0, stream>>>(probs, vocab, trees, tokens,
                                                                 parents, uniforms, out, paths);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
