// The pieces every model graph shares and the backend interface's optional parts:
//  - a backend without the fused ops (their default compositions, backend/default_ops.h) gives
//    bitwise the logits of one with them, through prefill, batched decode and a token tree, for
//    a dense and a mixture-of-experts model;
//  - the CPU backend's KV blocks, attention, token trees, keep and read_kv with key and value
//    widths that differ (MLA's shape), against a float64 reference;
//  - per-layer kinds: the weight schema's per-layer rows are held by the layers of their kind;
//  - the residual stream (model/graph_base.h): a projection's delta is added by settle or the
//    next norm, and a norm over other rows than those pending is refused.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/default_ops.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/graph_base.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "model/weight_schema.h"
#include "single_rank_comm.h"

namespace fs = std::filesystem;
using namespace specrun;

namespace {

// The CPU backend without its fused members: every fused op runs its default composition.
class ComposedCpuBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  void add_rmsnorm(F, CF, int, int, const Weight&, float, F) = delete;
  void linear_multi(CF, int, std::span<const LinearOut>) = delete;
  void moe_experts(CF, int, int, std::span<const Weight>, std::span<const Weight>,
                   const ExpertGroups&, F, F, F, F) = delete;
};
static_assert(Backend<ComposedCpuBackend>, "the fused ops are not part of the Backend concept");
static_assert(!FusesAddRmsnorm<ComposedCpuBackend> && !FusesLinearMulti<ComposedCpuBackend> &&
                  !FusesLinearResidual<ComposedCpuBackend> &&
                  !FusesAddRmsnormLinearMulti<ComposedCpuBackend> &&
                  !FusesAddRmsnormSwiglu<ComposedCpuBackend> &&
                  !FusesRopeAttend<ComposedCpuBackend> && !FusesMoeRoute<ComposedCpuBackend> &&
                  !FusesMoeExperts<ComposedCpuBackend>,
              "ComposedCpuBackend has no fused op");

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A forward call's logits, copied to the host.
std::vector<float> logits_of(LanguageModel& m, std::span<const SeqChunk> batch, bool all) {
  std::vector<float> logits;
  m.forward(batch, all, logits);
  return logits;
}

}  // namespace

TEST(FusedOps, ABackendWithoutThemComputesBitwiseTheSameModel) {
  // qwen3: q/k norms too; qwen3_moe: the MoE block's fused ops too.
  for (const char* arch : {"qwen3", "qwen3_moe"}) {
    SCOPED_TRACE(arch);
    const fs::path dir =
        fs::temp_directory_path() / ("specrun_test_graph_" + std::to_string(::getpid()));
    SyntheticSpec spec;
    spec.architecture = arch;
    spec.hidden = 128;
    spec.head_dim = 32;
    spec.layers = 3;
    spec.heads = 8;
    spec.kv_heads = 4;
    spec.intermediate = 256;
    spec.vocab = 512;
    make_model_pair(spec, dir.string());
    const Checkpoint checkpoint((dir / "target").string());
    test::SingleRankComm comm;
    LlamaModel<CpuBackend> fused(checkpoint, CpuBackend(2), comm);
    LlamaModel<ComposedCpuBackend> composed(checkpoint, ComposedCpuBackend(2), comm);

    const std::vector<std::int32_t> a = {1, 17, 300, 42, 9, 77, 5}, b = {1, 250, 3};
    LanguageModel* models[2] = {&fused, &composed};
    std::vector<float> got[2][4];
    for (int i = 0; i < 2; ++i) {
      LanguageModel& m = *models[i];
      auto ca = m.new_cache(32), cb = m.new_cache(32);
      // Prefill of two sequences, every token's logits.
      const SeqChunk prefill[2] = {{ca.get(), a.data(), 6}, {cb.get(), b.data(), 3}};
      got[i][0] = logits_of(m, prefill, true);
      // Batched decode, last logits only (the last layer computes the rest for those rows only).
      const std::int32_t next[2] = {a[6], 11};
      const SeqChunk decode[2] = {{ca.get(), &next[0], 1}, {cb.get(), &next[1], 1}};
      got[i][1] = logits_of(m, decode, false);
      // A token tree under a's last token, then the kept path and one more chain token.
      const std::int32_t nodes[4] = {8, 9, 10, 11}, parents[4] = {6, 7, 7, 6};
      const SeqChunk tree{ca.get(), nodes, 4, parents};
      got[i][2] = logits_of(m, {&tree, 1}, true);
      const int path[2] = {0, 2};
      m.keep(*ca, 7, path);
      const std::int32_t after = 12;
      const SeqChunk step{ca.get(), &after, 1};
      got[i][3] = logits_of(m, {&step, 1}, false);
    }
    for (int call = 0; call < 4; ++call) {
      ASSERT_EQ(got[0][call].size(), got[1][call].size()) << "call " << call;
      ASSERT_FALSE(got[0][call].empty());
      EXPECT_EQ(std::memcmp(got[0][call].data(), got[1][call].data(),
                            got[0][call].size() * sizeof(float)),
                0)
          << "call " << call << ": the default compositions differ from the CPU's fused kernels";
    }
    fs::remove_all(dir);
  }
}

namespace {

// float64 attention of one query (kd wide per head) over `keys` / `values` rows (kv_heads x kd
// and kv_heads x vd floats): out [heads * vd].
std::vector<double> reference(const float* q, const std::vector<const float*>& keys,
                              const std::vector<const float*>& values, const AttentionHeads& h) {
  std::vector<double> out(static_cast<std::size_t>(h.heads) * h.value_dim, 0.0);
  for (int head = 0; head < h.heads; ++head) {
    const int g = head / (h.heads / h.kv_heads);
    std::vector<double> s(keys.size());
    double mx = -1e300, sum = 0;
    for (std::size_t p = 0; p < keys.size(); ++p) {
      double d = 0;
      for (int i = 0; i < h.key_dim; ++i)
        d += static_cast<double>(q[head * h.key_dim + i]) * keys[p][g * h.key_dim + i];
      s[p] = d / std::sqrt(static_cast<double>(h.key_dim));
      mx = std::max(mx, s[p]);
    }
    for (double& e : s) sum += (e = std::exp(e - mx));
    for (std::size_t p = 0; p < keys.size(); ++p)
      for (int i = 0; i < h.value_dim; ++i)
        out[head * h.value_dim + i] += s[p] / sum * values[p][g * h.value_dim + i];
  }
  return out;
}

void expect_near_reference(const float* got, const std::vector<double>& want,
                           const std::string& what) {
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    if (d > worst) worst = d, at = i;
  }
  // Outputs are convex combinations of N(0, 1) values.
  EXPECT_LT(worst, 2e-5) << what << ": element " << at << " expected " << want[at] << " actual "
                         << got[at];
}

// Rows [rows, width] of a cache, read back.
std::vector<float> read_rows(CpuBackend& b, CpuBackend::KvBlock& kv, int layer, int which,
                             int rows) {
  std::vector<float> host(static_cast<std::size_t>(rows) * kv.floats(which));
  b.read_kv(kv, layer, which, rows, host.data());
  return host;
}

// A forward call of attention alone on layer `layer`: random keys and values for the n staged
// tokens and queries for m rows (n, or one per sequence with last_only), appended and attended.
struct AttendPass {
  std::vector<float> k, v, q, out;
  const float* key(int row, const AttentionHeads& h) const { return &k[row * h.key_floats()]; }
  const float* value(int row, const AttentionHeads& h) const { return &v[row * h.value_floats()]; }
};
AttendPass attend_pass(CpuBackend& b, std::span<const SeqSpan<CpuBackend::KvBlock>> seqs,
                       const std::vector<std::int32_t>& positions, int m, bool last_only, int layer,
                       const AttentionHeads& h, std::mt19937& rng) {
  const int n = static_cast<int>(positions.size());
  const std::vector<std::int32_t> tokens(n, 0);
  b.begin_forward(seqs, tokens.data(), positions.data(), n);
  const CpuBackend::KvRows rows = b.kv_rows(layer, h);
  AttendPass p{random_floats(static_cast<std::size_t>(n) * h.key_floats(), rng),
               random_floats(static_cast<std::size_t>(n) * h.value_floats(), rng),
               random_floats(static_cast<std::size_t>(m) * h.q_width(), rng),
               std::vector<float>(static_cast<std::size_t>(m) * h.out_width())};
  std::memcpy(rows.k.get(), p.k.data(), p.k.size() * sizeof(float));
  std::memcpy(rows.v.get(), p.v.data(), p.v.size() * sizeof(float));
  b.attend(layer, CpuBackend::CF(p.q.data()), m, last_only, CpuBackend::F(p.out.data()), h);
  b.end_forward();
  return p;
}

// The keys and values a query sees, in position order.
struct Visible {
  std::vector<const float*> keys, values;
  void add(const AttendPass& p, int row, const AttentionHeads& h) {
    keys.push_back(p.key(row, h));
    values.push_back(p.value(row, h));
  }
};

}  // namespace

// Keys 24 floats per head, values 16 (MLA's shape, smaller): the KV blocks, the staged rows of
// several sequences, direct appends, a token tree, keep and read_kv each follow their own width.
TEST(CpuBackendAttention, KeyAndValueWidthsMayDiffer) {
  std::mt19937 rng(41);
  const AttentionHeads h{4, 2, 24, 16};
  const int layers = 2, layer = 1, cap = 16;
  const std::size_t kf = h.key_floats(), vf = h.value_floats();
  CpuBackend b(2);
  CpuBackend::KvBlock A = b.new_kv_block(KvShape{layers, h.key_floats(), h.value_floats()}, cap);
  CpuBackend::KvBlock B = b.new_kv_block(KvShape{layers, h.key_floats(), h.value_floats()}, cap);
  ASSERT_EQ(A.data.size(), static_cast<std::size_t>(layers) * cap * (kf + vf));

  // 1. Two sequences (their rows staged in scratch): A 5 tokens, B 3, from slot 0.
  const SeqSpan<CpuBackend::KvBlock> two[2] = {{&A, 0, 5, 0, 5, nullptr},
                                               {&B, 0, 3, 5, 3, nullptr}};
  const AttendPass p1 = attend_pass(b, two, {0, 1, 2, 3, 4, 0, 1, 2}, 8, false, layer, h, rng);
  for (int t = 0; t < 8; ++t) {
    Visible seen;
    for (int r = t < 5 ? 0 : 5; r <= t; ++r) seen.add(p1, r, h);  // from the sequence's first row
    expect_near_reference(&p1.out[t * h.out_width()],
                          reference(&p1.q[t * h.q_width()], seen.keys, seen.values, h),
                          "two sequences, row " + std::to_string(t));
  }
  EXPECT_EQ(read_rows(b, A, layer, 0, 5), std::vector<float>(p1.k.begin(), p1.k.begin() + 5 * kf));
  EXPECT_EQ(read_rows(b, A, layer, 1, 5), std::vector<float>(p1.v.begin(), p1.v.begin() + 5 * vf));
  EXPECT_EQ(read_rows(b, B, layer, 0, 3), std::vector<float>(p1.k.begin() + 5 * kf, p1.k.end()));
  EXPECT_EQ(read_rows(b, B, layer, 1, 3), std::vector<float>(p1.v.begin() + 5 * vf, p1.v.end()));
  for (int which : {0, 1})  // the other layer untouched
    for (float x : read_rows(b, A, 0, which, cap)) ASSERT_EQ(x, 0.0f);

  // 2. A alone, one token at slot 5 (rows straight into the cache), last row only.
  const SeqSpan<CpuBackend::KvBlock> one{&A, 5, 1, 0, 6, nullptr};
  const AttendPass p2 = attend_pass(b, {&one, 1}, {5}, 1, true, layer, h, rng);
  Visible chain;  // A's chain: slots 0..5
  for (int r = 0; r < 5; ++r) chain.add(p1, r, h);
  chain.add(p2, 0, h);
  expect_near_reference(p2.out.data(), reference(p2.q.data(), chain.keys, chain.values, h),
                        "direct append");

  // 3. A token tree under slot 5: nodes at slots 6, 7, 8 with parents 5, 6, 5.
  const std::int32_t parents[3] = {5, 6, 5};
  const SeqSpan<CpuBackend::KvBlock> tree{&A, 6, 3, 0, 6, parents};
  const AttendPass p3 = attend_pass(b, {&tree, 1}, {6, 7, 6}, 3, false, layer, h, rng);
  for (int node = 0; node < 3; ++node) {
    Visible seen = chain;  // then the node's ancestors and itself
    if (node == 1) seen.add(p3, 0, h);
    seen.add(p3, node, h);
    expect_near_reference(&p3.out[node * h.out_width()],
                          reference(&p3.q[node * h.q_width()], seen.keys, seen.values, h),
                          "tree node " + std::to_string(node));
  }
  // The region is back in slot order.
  const std::vector<float> keys_after = read_rows(b, A, layer, 0, 9);
  const std::vector<float> values_after = read_rows(b, A, layer, 1, 9);
  EXPECT_EQ(std::vector<float>(keys_after.begin() + 6 * kf, keys_after.end()), p3.k);
  EXPECT_EQ(std::vector<float>(values_after.begin() + 6 * vf, values_after.end()), p3.v);

  // 4. Keeping node 8 (region row 2) moves its key and value to slot 6, in every layer.
  const int kept[1] = {2};
  b.kv_keep(A, layers, 6, kept);
  const std::vector<float> keys_kept = read_rows(b, A, layer, 0, 7);
  const std::vector<float> values_kept = read_rows(b, A, layer, 1, 7);
  EXPECT_EQ(std::vector<float>(keys_kept.begin() + 6 * kf, keys_kept.end()),
            std::vector<float>(p3.k.begin() + 2 * kf, p3.k.end()));
  EXPECT_EQ(std::vector<float>(values_kept.begin() + 6 * vf, values_kept.end()),
            std::vector<float>(p3.v.begin() + 2 * vf, p3.v.end()));
  EXPECT_EQ(std::vector<float>(keys_kept.begin(), keys_kept.begin() + 5 * kf),
            std::vector<float>(p1.k.begin(), p1.k.begin() + 5 * kf));

  // Heads of other widths than the cache's are refused, not read past its rows.
  const AttentionHeads swapped{4, 2, 16, 24};
  const std::int32_t zero = 0, at = 7;
  const SeqSpan<CpuBackend::KvBlock> next{&A, 7, 1, 0, 8, nullptr};
  b.begin_forward({&next, 1}, &zero, &at, 1);
  EXPECT_THROW(b.kv_rows(layer, swapped), Error);
  std::vector<float> q(swapped.q_width()), out(swapped.out_width());
  EXPECT_THROW(
      b.attend(layer, CpuBackend::CF(q.data()), 1, false, CpuBackend::F(out.data()), swapped),
      Error);
  b.end_forward();
}

TEST(LayerKinds, TheSchemasPerLayerRowsAreHeldByTheLayersOfTheirKind) {
  const LayerKind llama{AttentionKind::kGqa, MlpKind::kDenseSwiGlu};
  EXPECT_FALSE(Scope::model().holds(llama));
  EXPECT_TRUE(Scope::every_layer().holds(llama));
  EXPECT_TRUE(Scope::in(AttentionKind::kGqa).holds(llama));
  EXPECT_TRUE(Scope::in(MlpKind::kDenseSwiGlu).holds(llama));

  SyntheticSpec spec;
  spec.architecture = "qwen3";
  spec.head_dim = 32;
  const ModelConfig c = synthetic_config(spec, false);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    EXPECT_EQ(c.layer_kind(layer), llama) << "layer " << layer;
    for (const TensorSpec& s : llama_schema()) {
      if (!s.per_layer()) continue;
      // Rows of another layer kind (the MoE MLP's) are in no layer of a dense model.
      if (!s.scope.holds(llama)) {
        EXPECT_FALSE(present(s, c, layer)) << s.name << " in layer " << layer;
        continue;
      }
      // Every layer holds every per-layer row of the family; of those Qwen3 has all but the
      // biases (q/k norms included).
      const bool bias = s.presence == Presence::kQkvBias || s.presence == Presence::kOBias;
      EXPECT_EQ(present(s, c, layer), !bias) << s.name << " in layer " << layer;
      EXPECT_FALSE(schema_shape(c, tensor_name(s, layer)).empty()) << s.name;
    }
  }
  EXPECT_EQ(layer_kind_name(llama), "GQA attention + dense SwiGLU MLP");
  EXPECT_THROW(c.layer_kind(c.num_layers), Error);
  EXPECT_THROW(c.layer_kind(-1), Error);
}

TEST(ResidualStream, APendingProjectionIsAddedOnceAndOnlyToItsRows) {
  std::mt19937 rng(43);
  const int dim = 16, in = 8, m = 3;
  CpuBackend b(1);
  const std::vector<float> w = random_floats(static_cast<std::size_t>(dim) * in, rng);
  const std::vector<float> ones(dim, 1.0f);
  const HostTensor wt{reinterpret_cast<const std::byte*>(w.data()), DType::kF32, dim, in};
  const HostTensor nt{reinterpret_cast<const std::byte*>(ones.data()), DType::kF32, 1, dim};
  b.reserve_weights(b.weight_bytes(wt, WeightUse::kLinear) +
                    b.weight_bytes(nt, WeightUse::kVector));
  const CpuBackend::Weight W = b.prepare(wt, WeightUse::kLinear);
  const CpuBackend::Weight norm = b.prepare(nt, WeightUse::kVector);

  const std::vector<float> x0 = random_floats(static_cast<std::size_t>(m) * dim, rng);
  const std::vector<float> a = random_floats(static_cast<std::size_t>(m) * in, rng);
  std::vector<float> y(static_cast<std::size_t>(m) * dim), want = x0;
  b.linear(CpuBackend::CF(a.data()), m, W, nullptr, CpuBackend::F(y.data()));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += y[i];

  ResidualStream<CpuBackend> r(b);
  CpuBackend::F x = r.begin(m, dim, 1e-5f, nullptr);
  std::memcpy(x.get(), x0.data(), x0.size() * sizeof(float));
  r.add_projection(CpuBackend::CF(a.data()), m, W, nullptr);
  const CpuBackend::F settled = r.settle(m);
  EXPECT_EQ(std::vector<float>(settled.get(), settled.get() + want.size()), want);
  r.settle(m);  // nothing left to add
  EXPECT_EQ(std::vector<float>(settled.get(), settled.get() + want.size()), want);

  // A norm over other rows than those pending would add a delta of the wrong shape.
  r.add_projection(CpuBackend::CF(a.data()), m, W, nullptr);
  std::vector<float> xn(static_cast<std::size_t>(m) * dim);
  EXPECT_THROW(r.norm(m - 1, norm, CpuBackend::F(xn.data())), Error);
  r.norm(m, norm, CpuBackend::F(xn.data()));
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(r.x().get()[i], want[i] + y[i]) << "element " << i;
}
