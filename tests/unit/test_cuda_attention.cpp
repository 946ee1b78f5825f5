// Attention on the GPU against an independent float64 reference (label "gpu"; the shared
// checks in cuda_kernel_checks.h: fresh seeded inputs, NaN-poisoned outputs, relative L2 error,
// bitwise comparisons):
//  - the KV append and causal GQA attention over two sequences, for every register size of the
//    kernel (head_dim 32 to 256), within 1e-5;
//  - long contexts split over blocks (kAttentionSplitPositions) within 1e-5, each token bitwise
//    the same alone and in a window, with more chunks than needed, and as dependent launches;
//  - RoPE fused into the append and attention (rope_kv_append, attention_rope) bitwise the four
//    launches it replaces, plain and as dependent launches in a graph;
//  - the latent attention (attention_latent.h: keys and values of different widths, values
//    inside the keys, an explicit scale; MLA's) over a token tree and a chain within 1e-5, a
//    token alone bitwise as in the batch, and kv_keep_split moving exactly the kept rows.
// Skips visibly without a CUDA build or without a device.
#include <gtest/gtest.h>

#ifndef SPECRUN_HAVE_CUDA

TEST(CudaAttention, RequiresCudaBuild) {
  GTEST_SKIP() << "built without CUDA (-DSPECRUN_CUDA=OFF): no CUDA attention to test";
}

#else

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_kernel_checks.h"
#include "kernels/cuda/attention_latent.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"

using namespace specrun;
using namespace specrun::test;

namespace {

// Captures what `record` launches on the kernels' stream into a graph (as a step graph issues
// its launches), runs it once and waits for it.
template <class Record>
void run_as_graph(Record&& record) {
  graph_replays(
      record, [] {},
      [] {
        CUDA_CHECK(cudaStreamSynchronize(stream()));
        return 0;
      },
      1);
}

// Causal GQA attention in float64: token t belongs to sequence t / win and sits at position
// lens[s] + t % win; it attends to positions 0..that of layer `layer` of caches[s] (float32
// [layers][K, V][cap][kv_heads * hd], the KvSlot layout), query head h to kv head
// h / (heads / kv_heads).
std::vector<double> ref_attention(const std::vector<float>& q, int n, int heads, int kv_heads,
                                  int hd, int win, const int* lens,
                                  const std::vector<std::vector<float> >& caches, int layer,
                                  int cap) {
  const std::size_t row = static_cast<std::size_t>(kv_heads) * hd;
  const std::size_t plane = static_cast<std::size_t>(cap) * row;
  std::vector<double> ref(static_cast<std::size_t>(n) * heads * hd);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int t = 0; t < n; ++t) {
    const int s = t / win, pos = lens[s] + t % win;
    const float* K = caches[s].data() + layer * 2 * plane;
    const float* V = K + plane;
    for (int h = 0; h < heads; ++h) {
      const int kv = h / (heads / kv_heads);
      std::vector<double> sc(pos + 1);
      double mx = -INFINITY;
      for (int p = 0; p <= pos; ++p) {
        double d = 0;
        for (int e = 0; e < hd; ++e)
          d += static_cast<double>(q[(static_cast<std::size_t>(t) * heads + h) * hd + e]) *
               K[p * row + kv * hd + e];
        sc[p] = d * scale;
        mx = std::max(mx, sc[p]);
      }
      double sum = 0;
      for (double& v : sc) sum += (v = std::exp(v - mx));
      for (int e = 0; e < hd; ++e) {
        double o = 0;
        for (int p = 0; p <= pos; ++p) o += sc[p] * V[p * row + kv * hd + e];
        ref[(static_cast<std::size_t>(t) * heads + h) * hd + e] = o / sum;
      }
    }
  }
  return ref;
}

}  // namespace

TEST(CudaAttention, AttentionOverTwoSequencesAgainstFloat64) {
  REQUIRE_DEVICE();
  // Two sequences with caches of 37 and 90 positions; 3 new tokens each (a verify window).
  // head_dim 32, 64, 80, 128 and 256: each of the kernel's register sizes (1, 2, 4 and 8
  // elements a lane; 80 in the 4-lane one with lanes left idle).
  for (int hd : {32, 64, 80, 128, 256}) {
    const int heads = 8, kv_heads = 2, layers = 2, layer = 1, cap = 128, win = 3;
    const int lens[2] = {37, 90};
    const std::size_t row = static_cast<std::size_t>(kv_heads) * hd;
    std::vector<std::vector<float> > caches(2);
    std::vector<cuda::DeviceBuffer> dcache;
    for (int s = 0; s < 2; ++s) {
      caches[s] = randn(static_cast<std::size_t>(layers) * 2 * cap * row, 500 + s + hd);
      dcache.push_back(upload(caches[s]));
    }
    const int n = 2 * win;
    const auto q = randn(static_cast<std::size_t>(n) * heads * hd, 510 + hd);
    const auto knew = randn(static_cast<std::size_t>(n) * row, 511 + hd);
    const auto vnew = randn(static_cast<std::size_t>(n) * row, 512 + hd);
    std::vector<cuda::KvSlot> slots;
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < win; ++i)
        slots.push_back(
            cuda::KvSlot{dcache[s].as<float>(), cap, lens[s] + i, lens[s] + i, 0, nullptr});
    auto dslots = upload(slots), dq = upload(q), dk = upload(knew), dv = upload(vnew);
    auto out = poisoned(q.size());
    cuda::kv_append(stream(), dk.as<float>(), dv.as<float>(), n, kv_heads, hd,
                    dslots.as<cuda::KvSlot>(), layer);
    cuda::attention(stream(), dq.as<float>(), n, heads, kv_heads, hd, dslots.as<cuda::KvSlot>(),
                    layer, out.as<float>());
    // Reference: the caches with the new keys and values written, causal softmax in float64.
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < win; ++i)
        for (std::size_t e = 0; e < row; ++e) {
          const std::size_t plane = static_cast<std::size_t>(cap) * row;
          const std::size_t at = static_cast<std::size_t>(lens[s] + i) * row + e;
          caches[s][(layer * 2) * plane + at] = knew[(s * win + i) * row + e];
          caches[s][(layer * 2 + 1) * plane + at] = vnew[(s * win + i) * row + e];
        }
    const auto ref = ref_attention(q, n, heads, kv_heads, hd, win, lens, caches, layer, cap);
    expect_l2("kv_append + attention (2 sequences, window 3, head_dim " + std::to_string(hd) + ")",
              download(out, q.size()), ref, 1e-5);
  }
}

// Attention over long contexts split over blocks of kAttentionSplitPositions positions, their
// states merged in a second launch: against float64 (1e-5); the same bits for a token alone and
// in a window, and with more chunks than needed; tokens before the first split bitwise the
// unsplit kernel's; as dependent launches in a graph (attention_rope with the identity rotation,
// after the kernel that makes its table), bitwise the plain launch; with a states' buffer for 1,
// 2 or 4 tokens (the tokens in groups), bitwise the same, with queries rotated for their own
// positions too. Three sequences of 1000, 300 and 37 cached positions (4, 2 and 1 chunks),
// windows of 3.
TEST(CudaAttention, AttentionSplitOverLongContexts) {
  REQUIRE_DEVICE();
  const int heads = 8, kv_heads = 2, hd = 64, cap = 1024, win = 3, n_seqs = 3, n = n_seqs * win;
  const int lens[n_seqs] = {1000, 300, 37};
  const std::size_t row = static_cast<std::size_t>(kv_heads) * hd;
  const std::size_t plane = static_cast<std::size_t>(cap) * row;
  const std::size_t q_row = static_cast<std::size_t>(heads) * hd;
  std::vector<std::vector<float> > caches(n_seqs);
  std::vector<cuda::DeviceBuffer> dcache;
  for (int s = 0; s < n_seqs; ++s) {
    caches[s] = randn(2 * plane, 600 + s);  // one layer: keys, then values
    dcache.push_back(upload(caches[s]));
  }
  const auto q = randn(static_cast<std::size_t>(n) * q_row, 610, 0.5f);
  std::vector<cuda::KvSlot> slots;
  std::vector<std::int32_t> zeros(n, 0), positions;
  int max_pos = 0;
  for (int s = 0; s < n_seqs; ++s)
    for (int i = 0; i < win; ++i) {
      slots.push_back(
          cuda::KvSlot{dcache[s].as<float>(), cap, lens[s] + i, lens[s] + i, 0, nullptr});
      positions.push_back(lens[s] + i);
      max_pos = std::max(max_pos, lens[s] + i);
    }
  const int chunks = cuda::attention_chunks(max_pos);
  ASSERT_EQ(chunks, 4);
  EXPECT_EQ(cuda::attention_chunks(255), 1);
  EXPECT_EQ(cuda::attention_chunks(256), 2);
  EXPECT_EQ(cuda::attention_chunks(767), 4);  // 3 needed: a power of two
  std::vector<float> inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[j] = static_cast<float>(std::pow(10000.0, -2.0 * j / hd));
  auto dslots = upload(slots), dq = upload(q), dinv = upload(inv), dzeros = upload(zeros),
       dpositions = upload(positions);
  auto table = poisoned(static_cast<std::size_t>(n) * hd);
  // tokens [first, first + count) of the window; split_chunks 0: unsplit; the states' buffer
  // holds `fit` tokens' states plus a part of one (0: all of them); rotate: in the graph, the
  // queries rotated for the tokens' own positions (else for position 0, the identity).
  auto run = [&](int first, int count, int split_chunks, bool dependent_graph, int fit = 0,
                 bool rotate = false) {
    const int c = std::max(1, split_chunks);
    const std::size_t one = cuda::attention_split_floats(1, heads, hd, c);
    const std::size_t floats = fit > 0 ? fit * one + one / 2 : count * one;
    cuda::DeviceBuffer states(floats * sizeof(float));
    const cuda::AttentionSplit how = split_chunks > 0
                                         ? cuda::AttentionSplit{states.as<float>(), c, floats}
                                         : cuda::AttentionSplit{};
    if (split_chunks > 0) {
      EXPECT_EQ(cuda::attention_split_group(count, heads, hd, how), fit > 0 ? fit : count);
    }
    auto out = poisoned(static_cast<std::size_t>(count) * q_row);
    const float* qf = dq.as<float>() + first * q_row;
    const cuda::KvSlot* sl = dslots.as<cuda::KvSlot>() + first;
    if (!dependent_graph) {
      cuda::attention(stream(), qf, count, heads, kv_heads, hd, sl, 0, out.as<float>(), how);
    } else {
      run_as_graph([&] {
        // Positions 0 (unless rotate): cos 1, sin 0, a rotation that changes no bit of q.
        const std::int32_t* at =
            rotate ? dpositions.as<std::int32_t>() + first : dzeros.as<std::int32_t>();
        cuda::rope_table(stream(), dinv.as<float>(), hd, at, count, table.as<float>());
        cuda::attention_rope(stream(), qf, count, heads, kv_heads, hd, table.as<float>(), sl, 0,
                             out.as<float>(), how, true);
      });
    }
    return download(out, static_cast<std::size_t>(count) * q_row);
  };
  const auto split = run(0, n, chunks, false);
  const auto ref = ref_attention(q, n, heads, kv_heads, hd, win, lens, caches, 0, cap);
  expect_l2("attention split (contexts 1000, 300, 37)", split, ref, 1e-5);
  expect_bitwise("attention split, 8 chunks vs 4", run(0, n, 8, false), split);
  expect_bitwise("attention split, dependent launches in a graph", run(0, n, chunks, true), split);
  // A buffer for fewer tokens than the call's: groups launched in turn, the same bits (the
  // groups' dependent launches too: a group waits for the previous one's merge).
  for (int fit : {1, 2, 4}) {
    const std::string what = "attention split in groups of " + std::to_string(fit) + " tokens";
    expect_bitwise(what, run(0, n, chunks, false, fit), split);
    expect_bitwise(what + ", dependent launches in a graph", run(0, n, chunks, true, fit), split);
  }
  // Queries rotated for their own positions (a different table row per token): the groups take
  // their tokens' rows, bitwise one launch.
  const auto rotated = run(0, n, chunks, true, 0, true);
  EXPECT_NE(0, std::memcmp(rotated.data(), split.data(), split.size() * sizeof(float)))
      << "the rotation changed nothing";
  for (int fit : {1, 4})
    expect_bitwise("attention_rope split in groups of " + std::to_string(fit) + " tokens",
                   run(0, n, chunks, true, fit, true), rotated);
  // A buffer smaller than one token's states is refused before any launch.
  const std::size_t one = cuda::attention_split_floats(1, heads, hd, chunks);
  cuda::DeviceBuffer small(one * sizeof(float));
  auto out = poisoned(static_cast<std::size_t>(n) * q_row);
  EXPECT_THROW(
      cuda::attention(stream(), dq.as<float>(), n, heads, kv_heads, hd, dslots.as<cuda::KvSlot>(),
                      0, out.as<float>(), cuda::AttentionSplit{small.as<float>(), chunks, one - 1}),
      Error);
  for (int t = 0; t < n; ++t) {
    const auto alone = run(t, 1, cuda::attention_chunks(lens[t / win] + t % win), false);
    const std::vector<float> in_window(split.begin() + t * q_row, split.begin() + (t + 1) * q_row);
    expect_bitwise("attention split, token " + std::to_string(t) + " alone vs in the window", alone,
                   in_window);
  }
  // The short sequence's tokens (positions 37..39) take one block: the unsplit kernel's bits.
  const auto unsplit = run(2 * win, win, 0, false);
  const std::vector<float> short_split(split.begin() + 2 * win * q_row, split.end());
  expect_bitwise("attention split vs unsplit before the first split", short_split, unsplit);
}

// RoPE with the KV append and attention in two launches (the keys rotated as they are appended,
// the queries as attention loads them) against the four launches they replace (rope_apply of k
// and q, kv_append, attention): the caches and the outputs bitwise equal, q and k left as they
// were; the same as programmatic dependent launches in a graph after the kernel that makes the
// table (as a step graph issues them). Two sequences with windows of 3 at different positions;
// head_dim 32, 64, 80, 128 and 256 (every register size of the kernel; a pair's two elements in
// one lane or in two); a table from real frequencies.
TEST(CudaAttention, RopeAttendEqualsRopeAppendAttention) {
  REQUIRE_DEVICE();
  for (int hd : {32, 64, 80, 128, 256}) {
    const int heads = 8, kv_heads = 2, layers = 2, layer = 1, cap = 128, win = 3;
    const int lens[2] = {37, 90};
    const std::size_t row = static_cast<std::size_t>(kv_heads) * hd;
    const int n = 2 * win;
    const std::string what = "rope_attend head_dim " + std::to_string(hd);
    std::vector<float> inv(hd / 2);
    for (int j = 0; j < hd / 2; ++j) inv[j] = static_cast<float>(std::pow(10000.0, -2.0 * j / hd));
    std::vector<std::int32_t> pos;
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < win; ++i) pos.push_back(lens[s] + i);
    auto dinv = upload(inv), dpos = upload(pos);
    auto table = poisoned(static_cast<std::size_t>(n) * hd);
    auto make_table = [&] {
      cuda::rope_table(stream(), dinv.as<float>(), hd, dpos.as<std::int32_t>(), n,
                       table.as<float>());
    };
    make_table();
    const auto q = randn(static_cast<std::size_t>(n) * heads * hd, 520 + hd);
    const auto k = randn(static_cast<std::size_t>(n) * row, 521 + hd);
    const auto v = randn(static_cast<std::size_t>(n) * row, 522 + hd);
    const auto cache0 = randn(static_cast<std::size_t>(layers) * 2 * cap * row, 523 + hd);
    // 0: the composition, 1: fused, 2: fused as dependent launches in a graph.
    std::vector<float> caches[3], outs[3], q_after, k_after;
    for (int fused = 0; fused < 3; ++fused) {
      auto dq = upload(q), dk = upload(k), dv = upload(v);
      std::vector<cuda::DeviceBuffer> dcache;
      std::vector<cuda::KvSlot> slots;
      for (int s = 0; s < 2; ++s) dcache.push_back(upload(cache0));
      for (int s = 0; s < 2; ++s)
        for (int i = 0; i < win; ++i)
          slots.push_back(
              cuda::KvSlot{dcache[s].as<float>(), cap, lens[s] + i, lens[s] + i, 0, nullptr});
      auto dslots = upload(slots);
      auto out = poisoned(q.size());
      const cuda::KvSlot* sl = dslots.as<cuda::KvSlot>();
      if (fused == 1) {
        cuda::rope_kv_append(stream(), dk.as<float>(), dv.as<float>(), n, kv_heads, hd,
                             table.as<float>(), sl, layer);
        cuda::attention_rope(stream(), dq.as<float>(), n, heads, kv_heads, hd, table.as<float>(),
                             sl, layer, out.as<float>());
        q_after = download(dq, q.size());
        k_after = download(dk, k.size());
      } else if (fused == 2) {
        run_as_graph([&] {
          make_table();
          cuda::rope_kv_append(stream(), dk.as<float>(), dv.as<float>(), n, kv_heads, hd,
                               table.as<float>(), sl, layer, true);
          cuda::attention_rope(stream(), dq.as<float>(), n, heads, kv_heads, hd, table.as<float>(),
                               sl, layer, out.as<float>(), {}, true);
        });
      } else {
        cuda::rope_apply(stream(), dk.as<float>(), n, kv_heads, hd, kv_heads * hd,
                         table.as<float>());
        cuda::rope_apply(stream(), dq.as<float>(), n, heads, hd, heads * hd, table.as<float>());
        cuda::kv_append(stream(), dk.as<float>(), dv.as<float>(), n, kv_heads, hd, sl, layer);
        cuda::attention(stream(), dq.as<float>(), n, heads, kv_heads, hd, sl, layer,
                        out.as<float>());
      }
      outs[fused] = download(out, q.size());
      for (int s = 0; s < 2; ++s) {
        const auto c = download(dcache[s], cache0.size());
        caches[fused].insert(caches[fused].end(), c.begin(), c.end());
      }
    }
    expect_bitwise(what + " (attention output)", outs[1], outs[0]);
    expect_bitwise(what + " (caches)", caches[1], caches[0]);
    expect_bitwise(what + " (attention output, dependent launches)", outs[2], outs[0]);
    expect_bitwise(what + " (caches, dependent launches)", caches[2], caches[0]);
    expect_bitwise(what + " (q left as it was)", q_after, q);
    expect_bitwise(what + " (k left as it was)", k_after, k);
    // The rotation did happen: a new key in the cache differs from the unrotated one.
    const std::size_t at = (static_cast<std::size_t>(layer) * 2 * cap + lens[1] + 2) * row + 1;
    EXPECT_NE(caches[1][cache0.size() + at], k[(n - 1) * row + 1]) << what << seed_note();
    bool finite = true;
    for (float o : outs[1]) finite = finite && std::isfinite(o);
    EXPECT_TRUE(finite) << what << ": a NaN or infinity in the output" << seed_note();
  }
}

// The latent attention (cuda::latent_attention, attention_latent.h) against float64: MLA's
// absorbed shape (one kv head of 576 floats whose first 512 are the values), key_dim 1024 (the
// limit) and separate values of another width over 2 kv heads. Two sequences: a token tree of 4
// nodes over a cache of 40 positions (nodes read their ancestors' slots through KvSlot::path) and
// a chain of 2 tokens; each token alone is bitwise its row of the batch; kv_keep_split then moves
// exactly the kept path's rows of every layer (keys and values), the others untouched.
TEST(CudaAttention, LatentAttentionOverATreeAndAChainAgainstFloat64) {
  REQUIRE_DEVICE();
  struct Shape {
    int heads, kv_heads, key_dim, value_dim;
    bool values_in_keys;
    float scale;
  };
  for (const Shape& sh : {Shape{4, 1, 576, 512, true, 0.07f}, Shape{2, 1, 1024, 1024, true, 0.03f},
                          Shape{4, 2, 192, 128, false, 0.0721f}}) {
    const std::string what = "latent attention (key_dim " + std::to_string(sh.key_dim) +
                             ", value_dim " + std::to_string(sh.value_dim) + ")";
    const int layers = 2, layer = 1, cap = 48, base = 40;
    const int kf = sh.kv_heads * sh.key_dim;
    const int vf = sh.values_in_keys ? 0 : sh.kv_heads * sh.value_dim;
    const std::size_t per_layer = static_cast<std::size_t>(cap) * (kf + vf);
    std::vector<std::vector<float> > caches = {randn(layers * per_layer, 700 + sh.key_dim),
                                               randn(layers * per_layer, 701 + sh.key_dim)};
    auto dc0 = upload(caches[0]), dc1 = upload(caches[1]);
    // Tree nodes at slots 40..43: node 0 under the chain, 1 and 2 under node 0, 3 under node 2.
    const std::vector<std::int32_t> paths = {40, 40, 41, 40, 42, 40, 42, 43};
    const int path_at[4] = {0, 1, 3, 5}, pos[4] = {40, 41, 41, 42};
    auto dpaths = upload(paths);
    const std::int32_t* dp = dpaths.as<std::int32_t>();
    std::vector<cuda::KvSlot> slots;
    for (int i = 0; i < 4; ++i)
      slots.push_back(cuda::KvSlot{dc0.as<float>(), cap, pos[i], base + i, base, dp + path_at[i]});
    for (int i = 0; i < 2; ++i)  // the chain: positions 20, 21 of the second cache
      slots.push_back(cuda::KvSlot{dc1.as<float>(), cap, 20 + i, 20 + i, 0, nullptr});
    const int n = 6;
    const auto q = randn(static_cast<std::size_t>(n) * sh.heads * sh.key_dim, 710 + sh.key_dim);
    const auto knew = randn(static_cast<std::size_t>(n) * kf, 711 + sh.key_dim);
    const auto vnew = randn(static_cast<std::size_t>(n) * std::max(vf, 1), 712 + sh.key_dim);
    auto dslots = upload(slots), dq = upload(q), dk = upload(knew), dv = upload(vnew);
    auto out = poisoned(static_cast<std::size_t>(n) * sh.heads * sh.value_dim);
    cuda::latent_kv_append(stream(), dk.as<float>(), dv.as<float>(), n, kf, vf,
                           dslots.as<cuda::KvSlot>(), layer);
    cuda::latent_attention(stream(), dq.as<float>(), n, sh.heads, sh.kv_heads, sh.key_dim,
                           sh.value_dim, sh.scale, sh.values_in_keys, dslots.as<cuda::KvSlot>(),
                           layer, out.as<float>());
    const auto got = download(out, static_cast<std::size_t>(n) * sh.heads * sh.value_dim);
    // The reference: the new rows written at their slots, then softmax(scale q.k) v in float64.
    auto key = [&](int s, int slot) {
      return caches[s].data() + layer * per_layer + static_cast<std::size_t>(slot) * kf;
    };
    auto value = [&](int s, int slot) {
      return sh.values_in_keys
                 ? key(s, slot)
                 : caches[s].data() + layer * per_layer + static_cast<std::size_t>(cap) * kf +
                       static_cast<std::size_t>(slot) * vf;
    };
    for (int t = 0; t < n; ++t) {
      const int s = t < 4 ? 0 : 1, slot = slots[t].slot;
      std::copy(knew.begin() + t * kf, knew.begin() + (t + 1) * kf, key(s, slot));
      if (!sh.values_in_keys)
        std::copy(vnew.begin() + t * vf, vnew.begin() + (t + 1) * vf, value(s, slot));
    }
    std::vector<double> ref(got.size());
    for (int t = 0; t < n; ++t) {
      const int s = t < 4 ? 0 : 1;
      for (int h = 0; h < sh.heads; ++h) {
        const int kv = h / (sh.heads / sh.kv_heads);
        const float* qh = q.data() + (static_cast<std::size_t>(t) * sh.heads + h) * sh.key_dim;
        std::vector<double> sc(slots[t].position + 1);
        std::vector<int> at(sc.size());
        double mx = -INFINITY;
        for (int p = 0; p <= slots[t].position; ++p) {
          at[p] = s == 1 || p < base ? p : paths[path_at[t] + (p - base)];
          const float* k = key(s, at[p]) + kv * sh.key_dim;
          double d = 0;
          for (int e = 0; e < sh.key_dim; ++e) d += static_cast<double>(qh[e]) * k[e];
          sc[p] = d * sh.scale;
          mx = std::max(mx, sc[p]);
        }
        double sum = 0;
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int e = 0; e < sh.value_dim; ++e) {
          double o = 0;
          for (std::size_t p = 0; p < sc.size(); ++p)
            o += sc[p] * value(s, at[p])[kv * sh.value_dim + e];
          ref[(static_cast<std::size_t>(t) * sh.heads + h) * sh.value_dim + e] = o / sum;
        }
      }
    }
    expect_l2(what, got, ref, 1e-5);
    // Tree node 3 alone (its rows already in the cache): bitwise its row of the batch.
    const std::size_t width = static_cast<std::size_t>(sh.heads) * sh.value_dim;
    auto alone = poisoned(width);
    cuda::latent_attention(stream(), dq.as<float>() + 3 * sh.heads * sh.key_dim, 1, sh.heads,
                           sh.kv_heads, sh.key_dim, sh.value_dim, sh.scale, sh.values_in_keys,
                           dslots.as<cuda::KvSlot>() + 3, layer, alone.as<float>());
    expect_bitwise(what + ": a token alone vs in the batch", download(alone, width),
                   std::vector<float>(got.begin() + 3 * width, got.begin() + 4 * width));
    // Keep the path node 0 -> node 2 -> node 3 (rows 0, 2, 3 from slot 40) in every layer.
    const std::vector<std::int32_t> keep = {0, 2, 3};
    auto drows = upload(keep);
    cuda::DeviceBuffer scratch(layers * keep.size() * (kf + vf) * sizeof(float));
    cuda::kv_keep_split(stream(), dc0.as<float>(), cap, layers, kf, vf, base,
                        drows.as<std::int32_t>(), 3, scratch.as<float>());
    std::vector<float> want = caches[0];  // the cache after the append, rows moved on the host
    for (int l = 0; l < layers; ++l)
      for (std::size_t j = 0; j < keep.size(); ++j) {
        const std::size_t from = base + keep[j], to = base + j;
        float* k = want.data() + l * per_layer;
        std::copy(k + from * kf, k + (from + 1) * kf, k + to * kf);
        float* v = k + static_cast<std::size_t>(cap) * kf;
        if (vf > 0) std::copy(v + from * vf, v + (from + 1) * vf, v + to * vf);
      }
    expect_bitwise(what + ": kv_keep_split", download(dc0, caches[0].size()), want);
  }
}

#endif  // SPECRUN_HAVE_CUDA
