// Token decisions on the device (kernels/cuda/sampling.h), part 1: the sampling transforms
// (logits_to_probs) and the top-k of log-softmax (top_k_rows); sampling_verify.cu has
// inverse-CDF sampling and the verification of chains and trees.
// Layout: logits and probabilities are [*, vocab] float32 row-major, a row selected by an int32
// index; chains and trees are ChainSpec and TreeSpec arrays; every array is device memory. One
// block of kThreads threads per row (or per chain or tree: its rows are visited one after
// another); rows are read in strides, so any vocabulary works (nothing assumes a row fits in
// shared memory). The block-wide reductions are in sampling_block.cuh.
//
// logits_to_probs, per row (the output row serves as scratch for the exponentials):
//   1. max and NaN check; e_i = exp((x_i - max) * (1 / T)), the argument in float32 like the
//      CPU's, the exponential in double rounded to float (correctly rounded but for ~2^-28 of
//      the arguments). glibc's expf is within 0.502 ulp, so e_i is the CPU's value except for
//      about 0.06% of the arguments, where it differs in the last bit.
//   2. top-k without sorting: logits map to order-preserving uint32 keys; a radix select
//      (8-bit digits, 4 passes, block histograms with integer shared atomics, so exact and
//      deterministic) finds the k-th largest key K. Tokens with key > K are kept; of those with
//      key == K the lowest ids fill the remaining places (a block-wide count in id order finds
//      the cut id).
//   3. top-p over the top-k survivors: the boundary key P where mass(key > P) < threshold <=
//      mass(key >= P), threshold = top_p * kept mass, by a radix search over the key with 4-bit
//      digits (8 passes): each pass accumulates the mass of the 16 sub-ranges of the current
//      range in double, each thread into its own shared-memory slots, summed in a fixed order
//      (deterministic run to run). Tokens tied at P all have the same e, so the number of them
//      to keep follows from the count; the lowest ids are kept (id-order cut as for top-k).
//   4. renormalise: the kept mass summed in double, e_i * (1 / total) rounded to float; removed
//      tokens exactly 0.
// Where the result may differ from the CPU: the double sums (kept mass, top-p prefix masses,
// total) are taken in another order than the CPU's, so they differ from it by rounding (about
// 1e-16 relative): a token whose cumulative mass lies within that of the top-p threshold may be
// kept on one side and not the other, and a probability may differ in its last bit.
//
// top_k_rows: the same radix select as the top-k transform, on keys that put every NaN below
// every number (so NaN is chosen only when a row has fewer than k numbers: then the lowest NaN
// ids, with logprob NaN), finds the cut; the k tokens it keeps are gathered into shared memory
// and ranked (k threads, each counting the tokens before its own: exact, deterministic). The
// log-sum-exp is the CPU's expression, max + log(sum of exp((double)x_i - max)) over the
// non-NaN logits with max the first token's logit, summed in double in another order and with
// the device's exp and log (within 1-2 ulp): logprobs agree with the CPU's to within rounding
// (~1e-15 absolute in the double, then one rounding to float).
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/sampling_block.cuh"

namespace specrun::cuda {
namespace {

using sampling_detail::block_sum;
using sampling_detail::kFullMask;
using sampling_detail::kThreads;
using sampling_detail::kWarps;
using sampling_detail::warp_sum;
constexpr int kDigits = 16;  // top-p search: 4-bit digits

// The id of the n-th (1-based) i in [0, vocab) with pred(i), in id order; vocab when there are
// fewer than n. Walks the row in chunks of kThreads ids with a block-wide count per chunk.
// `counts` holds kWarps ints, `found` one.
template <class Pred>
__device__ int nth_index(int vocab, int n, Pred pred, int* counts, int* found) {
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  int seen = 0;  // hits before this chunk (the same in every thread)
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const bool hit = i < vocab && pred(i);
    const unsigned ballot = __ballot_sync(kFullMask, hit);
    __syncthreads();  // `counts` may still be read from the previous chunk
    if (lane == 0) counts[warp] = __popc(ballot);
    __syncthreads();
    int before = seen, total = seen;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += counts[w];
      total += counts[w];
    }
    if (total >= n) {  // the n-th hit is in this chunk (uniform: every thread sees the same total)
      const int rank = before + __popc(ballot & ((1u << lane) - 1u));  // 0-based, among hits
      if (hit && rank == n - 1) *found = i;
      __syncthreads();
      return *found;  // rewritten only by a later call, after its barriers
    }
    seen = total;
  }
  return vocab;
}

// ---- the sampling transforms ---------------------------------------------------------------

// Order-preserving key of a non-NaN float: key(a) > key(b) iff a > b and key(a) == key(b) iff
// a == b (so -0 and +0, which compare equal, share a key). -inf has the smallest key of any
// non-NaN value.
__device__ __forceinline__ std::uint32_t order_key(float x) {
  const std::uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

// A cut of the order "larger logit first, lower id first on ties": token i (with key k_i) is
// kept iff k_i > key, or k_i == key and i < id. {0, vocab} keeps every token.
struct Cut {
  std::uint32_t key;
  int id;
};

__device__ __forceinline__ bool kept_by(const Cut& c, std::uint32_t key, int i) {
  return key > c.key || (key == c.key && i < c.id);
}

struct TransformScratch {
  double acc[kDigits][kThreads];  // top-p: each thread's mass per digit (32 KB)
  double bucket[kDigits];         // top-p: the digits' masses
  unsigned hist[256];             // top-k: the digits' counts
  float red_f[detail::kWarp];
  double red_d[kWarps];
  int red_i[kWarps];
  int found;
  int pick[3];
  double pick_d;
};

// Keys of a logit row for the transforms (the rows have no NaN).
struct LogitKey {
  const float* x;
  __device__ std::uint32_t operator()(int i) const { return order_key(x[i]); }
};

// Top-k cut: the k-th largest key K (1 <= k < vocab), by radix select over 8-bit digits from
// the top, and the id cut among the tokens with key K. key_of(i) is token i's key; the scratch
// has hist, pick, red_i and found as TransformScratch's.
template <class KeyOf, class Scratch>
__device__ Cut top_k_cut(KeyOf key_of, int vocab, int k, Scratch& s) {
  std::uint32_t prefix = 0, mask = 0;
  int remaining = k;  // tokens still to place among those whose key matches `prefix`
  int tied = 0;       // tokens whose key is the final prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += kThreads) s.hist[d] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const std::uint32_t key = key_of(i);
      if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // Invariant: remaining <= the tokens matching prefix, so digit 0 always suffices.
      int d = 255;
      while (d > 0 && remaining > static_cast<int>(s.hist[d])) remaining -= s.hist[d--];
      s.pick[0] = d;
      s.pick[1] = remaining;
      s.pick[2] = static_cast<int>(s.hist[d]);
    }
    __syncthreads();
    prefix |= static_cast<std::uint32_t>(s.pick[0]) << shift;
    mask |= 255u << shift;
    remaining = s.pick[1];
    tied = s.pick[2];
    // s.pick is rewritten only after the two barriers of the next pass.
  }
  Cut cut{prefix, vocab};
  if (remaining < tied) {  // only the `remaining` lowest ids of the tied tokens are kept
    const int nth = nth_index(
        vocab, remaining, [key_of, prefix](int i) { return key_of(i) == prefix; }, s.red_i,
        &s.found);
    cut.id = nth + 1;
  }
  return cut;
}

// Top-p cut among the tokens kept by `kcut` with exponentials e: the first token in the order
// whose cumulative mass reaches `threshold` (> 0, at most the kept mass) is the last kept one.
__device__ Cut top_p_cut(const float* x, const float* e, int vocab, const Cut& kcut,
                         double threshold, TransformScratch& s) {
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  std::uint32_t prefix = 0, mask = 0;
  double above = 0.0;  // mass of the kept tokens with keys above the range `prefix` (< threshold)
  for (int shift = 28; shift >= 0; shift -= 4) {
    // Each thread sums its tokens of the current range by digit, in its own slots (the slots
    // were last read before the two barriers at the end of the previous pass).
#pragma unroll
    for (int d = 0; d < kDigits; ++d) s.acc[d][threadIdx.x] = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const std::uint32_t key = order_key(x[i]);
      if ((key & mask) == prefix && kept_by(kcut, key, i))
        s.acc[(key >> shift) & (kDigits - 1)][threadIdx.x] += e[i];
    }
    __syncthreads();
    // Digit masses in a fixed order: warp w sums digits w, w + kWarps, ...
    for (int d = warp; d < kDigits; d += kWarps) {
      double v = 0.0;
      for (int t = lane; t < kThreads; t += detail::kWarp) v += s.acc[d][t];
      v = warp_sum(v);
      if (lane == 0) s.bucket[d] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // The first digit from the top whose cumulative mass reaches the threshold. It has
      // positive mass (the mass before it is < threshold); if rounding leaves every prefix
      // short of the threshold (the range's digits sum to slightly less than the range's mass
      // did one level up), the threshold lies at the end of the range: take its last digit of
      // positive mass.
      double cum = above;
      int chosen = -1, last_positive = -1;
      double before_last = above;
      for (int d = kDigits - 1; d >= 0; --d) {
        const double m = s.bucket[d];
        if (!(m > 0.0)) continue;
        if (cum + m >= threshold) {
          chosen = d;
          break;
        }
        last_positive = d;
        before_last = cum;
        cum += m;
      }
      if (chosen < 0) {
        chosen = last_positive < 0 ? 0 : last_positive;  // last_positive >= 0 (see above)
        cum = before_last;
      }
      s.pick[0] = chosen;
      s.pick_d = cum;
    }
    __syncthreads();
    prefix |= static_cast<std::uint32_t>(s.pick[0]) << shift;
    mask |= static_cast<std::uint32_t>(kDigits - 1) << shift;
    above = s.pick_d;
    // s.pick is rewritten only after the barriers of the next pass (or of block_sum below).
  }
  // Tokens tied at the boundary key `prefix` share one exponential: count them and take it.
  int count = 0;
  float e_tied = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const std::uint32_t key = order_key(x[i]);
    if (key == prefix && kept_by(kcut, key, i)) {
      ++count;
      e_tied = e[i];
    }
  }
  count = block_sum(count, s.red_i);
  e_tied = detail::block_reduce<true>(e_tied, s.red_f);
  // Keep the smallest number j of them with above + j * e >= threshold (all when none does).
  if (threadIdx.x == 0) {
    const double e_d = e_tied;  // > 0: the boundary range has positive mass
    double first_guess = e_d > 0.0 ? ceil((threshold - above) / e_d) : count;
    first_guess = fmin(fmax(first_guess, 1.0), static_cast<double>(count));
    int j = static_cast<int>(first_guess);
    while (j > 1 && above + static_cast<double>(j - 1) * e_d >= threshold) --j;
    while (j < count && above + static_cast<double>(j) * e_d < threshold) ++j;
    s.pick[0] = j;
  }
  __syncthreads();
  const int keep = s.pick[0];
  Cut cut{prefix, vocab};
  if (keep < count) {
    const int nth = nth_index(
        vocab, keep,
        [x, kcut, prefix](int i) {
          const std::uint32_t key = order_key(x[i]);
          return key == prefix && kept_by(kcut, key, i);
        },
        s.red_i, &s.found);
    cut.id = nth + 1;
  }
  return cut;
}

// One row per block: probs row dst_rows[b] = transform(logits row src_rows[b]). top_k is 0
// when off (normalised by the launcher), top_p 1 when off.
__global__ void __launch_bounds__(kThreads)
    logits_to_probs_kernel(const float* __restrict__ logits, int vocab,
                           const std::int32_t* __restrict__ src_rows,
                           const std::int32_t* __restrict__ dst_rows, float inv_temperature,
                           int top_k, float top_p, float* probs, int* error) {
  __shared__ TransformScratch s;
  const float* x = logits + static_cast<std::size_t>(src_rows[blockIdx.x]) * vocab;
  float* e = probs + static_cast<std::size_t>(dst_rows[blockIdx.x]) * vocab;

  // 1. Maximum (NaN-free rows only) and the exponentials, kept in the output row.
  float m = -INFINITY;
  int has_nan = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = x[i];
    if (isnan(v))
      has_nan = 1;
    else
      m = fmaxf(m, v);
  }
  has_nan = __syncthreads_or(has_nan);
  m = detail::block_reduce<true>(m, s.red_f);
  if (has_nan || !isfinite(m)) {
    for (int i = threadIdx.x; i < vocab; i += kThreads) e[i] = 0.0f;
    if (threadIdx.x == 0 && error != nullptr) *error = 1;
    return;
  }
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    // The argument rounded exactly as the CPU's float expression (no contraction).
    const float arg = __fmul_rn(__fsub_rn(x[i], m), inv_temperature);
    e[i] = static_cast<float>(exp(static_cast<double>(arg)));
  }

  // 2. Top-k, 3. top-p over the survivors (relative to their mass).
  Cut kcut{0u, vocab}, pcut{0u, vocab};
  if (top_k > 0) kcut = top_k_cut(LogitKey{x}, vocab, top_k, s);
  if (top_p < 1.0f) {
    double mass = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (kept_by(kcut, order_key(x[i]), i)) mass += e[i];
    mass = block_sum(mass, s.red_d);
    pcut = top_p_cut(x, e, vocab, kcut, static_cast<double>(top_p) * mass, s);
  }

  // 4. Renormalise over the survivors; removed tokens get exactly 0.
  const bool filtered = top_k > 0 || top_p < 1.0f;
  double total = 0.0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    if (filtered) {
      const std::uint32_t key = order_key(x[i]);
      if (!kept_by(kcut, key, i) || !kept_by(pcut, key, i)) continue;
    }
    total += e[i];
  }
  total = block_sum(total, s.red_d);
  const double inv_total = 1.0 / total;  // total >= 1: the top token (e = 1) is always kept
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    bool keep = true;
    if (filtered) {
      const std::uint32_t key = order_key(x[i]);
      keep = kept_by(kcut, key, i) && kept_by(pcut, key, i);
    }
    e[i] = keep ? static_cast<float>(e[i] * inv_total) : 0.0f;
  }
}

// ---- top-k of log-softmax ------------------------------------------------------------------

// top_k_rows' order: order_key for numbers, every NaN below them (key 0: order_key gives no
// number that key, -inf has 0x007fffff), so NaN is chosen only when a row has fewer than k
// numbers.
struct RankKey {
  const float* x;
  __device__ std::uint32_t operator()(int i) const {
    const float v = x[i];
    return isnan(v) ? 0u : order_key(v);
  }
};

struct TopKScratch {
  unsigned hist[256];  // top_k_cut
  int red_i[kWarps];
  int found;
  int pick[3];
  double red_d[kWarps];
  unsigned count;  // the chosen tokens, gathered in any order
  std::uint32_t keys[kMaxTopK];
  int ids[kMaxTopK];
  float top;  // the largest logit
};

// One row per block: the cut of the k first tokens in the order (top_k_cut), the k tokens
// gathered and ranked, then the log-sum-exp shifted by the largest logit.
__global__ void __launch_bounds__(kThreads)
    top_k_rows_kernel(const float* __restrict__ x_rows, int vocab,
                      const std::int32_t* __restrict__ rows, int k,
                      std::int32_t* __restrict__ out_ids, float* __restrict__ out_logprobs) {
  __shared__ TopKScratch s;
  const float* x = x_rows + static_cast<std::size_t>(rows[blockIdx.x]) * vocab;
  const RankKey key_of{x};
  const Cut cut = k < vocab ? top_k_cut(key_of, vocab, k, s) : Cut{0u, vocab};

  // Exactly k tokens are kept by the cut: gather them, then each of the first k threads ranks
  // one of them (its place in the order among the k).
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const std::uint32_t key = key_of(i);
    if (kept_by(cut, key, i)) {
      const unsigned slot = atomicAdd(&s.count, 1u);
      if (slot < static_cast<unsigned>(kMaxTopK)) {
        s.keys[slot] = key;
        s.ids[slot] = i;
      }
    }
  }
  __syncthreads();
  int id = -1, rank = 0;
  if (static_cast<int>(threadIdx.x) < k) {
    const std::uint32_t key = s.keys[threadIdx.x];
    id = s.ids[threadIdx.x];
    for (int j = 0; j < k; ++j) rank += s.keys[j] > key || (s.keys[j] == key && s.ids[j] < id);
    if (rank == 0) s.top = x[id];
  }
  __syncthreads();

  // logsumexp = max + log(sum of exp(x_i - max)) over the numbers, in double (max: the first
  // token's logit, as the CPU's; NaN only when the row has no number).
  const double m = s.top;
  double sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = x[i];
    if (!isnan(v)) sum += exp(static_cast<double>(v) - m);
  }
  sum = block_sum(sum, s.red_d);
  const double lse = m + log(sum);
  if (static_cast<int>(threadIdx.x) < k) {
    const std::size_t at = static_cast<std::size_t>(blockIdx.x) * k + rank;
    out_ids[at] = id;
    out_logprobs[at] = static_cast<float>(static_cast<double>(x[id]) - lse);
  }
}

}  // namespace

void logits_to_probs(cudaStream_t stream, const float* logits, int vocab,
                     const std::int32_t* src_rows, const std::int32_t* dst_rows, int n_rows,
                     const SamplingConfig& config, float* probs, int* error) {
  CUDA_OP_CHECK("logits_to_probs", vocab >= 1 && n_rows >= 0,
                "bad sizes: vocab " << vocab << ", rows " << n_rows);
  CUDA_OP_CHECK("logits_to_probs", config.temperature > 0.0f && std::isfinite(config.temperature),
                "temperature " << config.temperature
                               << " must be > 0 and finite (greedy decoding uses argmax)");
  CUDA_OP_CHECK("logits_to_probs", config.top_k >= 0,
                "top_k " << config.top_k << " must be >= 0 (0 = off)");
  CUDA_OP_CHECK("logits_to_probs", config.top_p > 0.0f && config.top_p <= 1.0f,
                "top_p " << config.top_p << " must be in (0, 1] (1 = off)");
  if (n_rows == 0) return;
  CUDA_OP_CHECK("logits_to_probs",
                logits != nullptr && probs != nullptr && src_rows != nullptr && dst_rows != nullptr,
                "needs logits, probs, src_rows and dst_rows");
  CUDA_OP_CHECK("logits_to_probs", static_cast<const void*>(probs) != logits,
                "probs must not alias logits");
  const int top_k = config.top_k < vocab ? config.top_k : 0;  // top_k >= vocab keeps everything
  logits_to_probs_kernel<<<n_rows, kThreads, 0, stream>>>(logits, vocab, src_rows, dst_rows,
                                                          1.0f / config.temperature, top_k,
                                                          config.top_p, probs, error);
  CUDA_CHECK_LAUNCH();
}

void top_k_rows(cudaStream_t stream, const float* x, int vocab, const std::int32_t* rows,
                int n_rows, int k, std::int32_t* out_ids, float* out_logprobs) {
  CUDA_OP_CHECK("top_k_rows", vocab >= 1 && n_rows >= 0,
                "bad sizes: vocab " << vocab << ", rows " << n_rows);
  CUDA_OP_CHECK("top_k_rows", k >= 1 && k <= kMaxTopK && k <= vocab,
                "k " << k << " outside 1.." << (vocab < kMaxTopK ? vocab : kMaxTopK));
  if (n_rows == 0) return;
  CUDA_OP_CHECK("top_k_rows",
                x != nullptr && rows != nullptr && out_ids != nullptr && out_logprobs != nullptr,
                "needs x, rows, out_ids and out_logprobs");
  top_k_rows_kernel<<<n_rows, kThreads, 0, stream>>>(x, vocab, rows, k, out_ids, out_logprobs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace specrun::cuda
