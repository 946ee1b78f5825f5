// The expert accounting (engine/expert_accounting.h): the counts of one pass against values
// computed by hand, a verify tree whose rejected nodes read experts the accepted path does not,
// the records' identities, and the decoder's records of every target pass (prefill, decode,
// verify) and of a draft model's passes apart, checked against the experts the fed tokens must
// have read (tests/unit/routed_model.h routes a dense model's tokens by their ids).
#include <gtest/gtest.h>
#include <map>
#include <set>

#include "common/error.h"
#include "engine/batch_codec.h"
#include "engine/bench.h"
#include "engine/decoder.h"
#include "engine/expert_accounting.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/routing_observer.h"
#include "model/synthetic.h"
#include "routed_model.h"
#include "single_rank_comm.h"
#include "small_pair.h"
#include "spec/model_drafter.h"
#include "spec/token_ops.h"

using namespace specrun;

namespace {

// A routing of `layers` MoE layers, n_experts, top_k, ep, from experts[l][t] = token t's list.
ExpertRouting routing_of(const std::vector<std::vector<std::vector<int>>>& experts, int n_experts,
                         int ep, std::int64_t expert_bytes) {
  ExpertRouting r;
  r.n_experts = n_experts;
  r.ep = ep;
  r.expert_bytes = expert_bytes;
  r.top_k = static_cast<int>(experts.at(0).at(0).size());
  r.n_tokens = static_cast<int>(experts.at(0).size());
  for (std::size_t l = 0; l < experts.size(); ++l) {
    r.layers.push_back(static_cast<int>(2 * l + 1));  // MoE layers 1, 3, ...: ids, not indices
    for (const auto& token : experts[l])
      for (int e : token) r.experts.push_back(e);
  }
  return r;
}

}  // namespace

// A decode pass of two sequences, one token each, two MoE layers, 8 experts on 2 EP ranks
// (experts 0-3 and 4-7), top-2, 1000 bytes per expert. By hand:
//   layer 1: seq 0 -> {3, 5}, seq 1 -> {5, 1}: unique {1, 3, 5} = 3, pairs 4, expert 5 has 2
//            tokens, rank 0 gets 3 and 1 (2 pairs), rank 1 gets 5 twice (2 pairs)
//   layer 3: seq 0 -> {0, 7}, seq 1 -> {6, 7}: unique {0, 6, 7} = 3, expert 7 has 2, rank 0
//            gets 0 (1 pair), rank 1 gets 7, 6, 7 (3 pairs)
TEST(ExpertAccounting, DecodePassCountsByHand) {
  const ExpertRouting r = routing_of({{{3, 5}, {5, 1}}, {{0, 7}, {6, 7}}}, 8, 2, 1000);
  const std::vector<int> per_seq = {1, 1};
  PassExpertCounts c;
  count_experts(r, PassTokens{per_seq, {}}, c);
  EXPECT_EQ(c.tokens, 2);
  EXPECT_EQ(c.kept_tokens, 2);
  EXPECT_EQ(c.unique, (std::vector<std::int32_t>{3, 3}));
  EXPECT_EQ(c.pairs, (std::vector<std::int32_t>{4, 4}));
  EXPECT_EQ(c.max_load, (std::vector<std::int32_t>{2, 2}));
  EXPECT_EQ(c.kept_unique, c.unique);
  EXPECT_EQ(c.kept_pairs, c.pairs);
  EXPECT_EQ(c.rank_pairs, (std::vector<std::int32_t>{2, 2, 1, 3}));
  EXPECT_EQ(c.seq_unique, (std::vector<std::int32_t>{2, 2, 2, 2}));

  ExpertRecords rec;
  const std::vector<std::int64_t> prompts = {10, 11};
  append_pass(rec, r, c, 4, 7, kPassDecode, prompts);
  EXPECT_EQ(rec.layers, (std::vector<std::int32_t>{1, 3}));
  EXPECT_EQ(rec.bytes(0, 0), 3000);
  EXPECT_EQ(rec.bytes(0, 1), 3000);
  EXPECT_EQ(rec.seq_prompt_index, prompts);
  EXPECT_EQ(expert_records_problem(rec), "");
}

// A verify pass: sequence A is the root and a tree of 4 nodes (n0, n1 children of the root, n2
// of n0, n3 of n1) whose accepted path is n0, n2; sequence B the root and a chain of 2 whose
// first node is accepted. One layer, 8 experts on 4 EP ranks (2 each), top-2:
//   A: root {0, 1}, n0 {1, 2}, n1 {6, 7} rejected, n2 {2, 0}, n3 {7, 5} rejected
//   B: root {3, 4}, c0 {3, 0}, c1 {4, 6} rejected
// All computed: unique {0..7} = 8, pairs 16, expert 0 has 3 tokens (A root, A n2, B c0).
// Kept (roots and accepted nodes): A {0, 1, 2}, B {0, 3, 4}: unique {0, 1, 2, 3, 4} = 5,
// pairs 10. Per sequence: A 6 unique (3 kept), B 4 unique (3 kept). Per rank (experts 0-1, 2-3,
// 4-5, 6-7): 3+2, 2+2, 2+1, 2+2.
TEST(ExpertAccounting, VerifyTreeCountsRejectedNodesApart) {
  const ExpertRouting r =
      routing_of({{{0, 1}, {1, 2}, {6, 7}, {2, 0}, {7, 5}, {3, 4}, {3, 0}, {4, 6}}}, 8, 4, 500);
  std::vector<std::uint8_t> kept;
  const std::vector<int> path_a = {0, 2}, path_b = {0};
  append_verify_kept(1, 4, path_a, kept);
  append_verify_kept(1, 2, path_b, kept);
  EXPECT_EQ(kept, (std::vector<std::uint8_t>{1, 1, 0, 1, 0, 1, 1, 0}));
  const std::vector<int> per_seq = {5, 3};
  PassExpertCounts c;
  count_experts(r, PassTokens{per_seq, kept}, c);
  EXPECT_EQ(c.tokens, 8);
  EXPECT_EQ(c.kept_tokens, 5);
  EXPECT_EQ(c.unique, (std::vector<std::int32_t>{8}));
  EXPECT_EQ(c.kept_unique, (std::vector<std::int32_t>{5}));
  EXPECT_EQ(c.pairs, (std::vector<std::int32_t>{16}));
  EXPECT_EQ(c.kept_pairs, (std::vector<std::int32_t>{10}));
  EXPECT_EQ(c.max_load, (std::vector<std::int32_t>{3}));
  EXPECT_EQ(c.rank_pairs, (std::vector<std::int32_t>{5, 4, 3, 4}));
  EXPECT_EQ(c.seq_tokens, (std::vector<std::int32_t>{5, 3}));
  EXPECT_EQ(c.seq_kept_tokens, (std::vector<std::int32_t>{3, 2}));
  EXPECT_EQ(c.seq_unique, (std::vector<std::int32_t>{6, 4}));
  EXPECT_EQ(c.seq_kept_unique, (std::vector<std::int32_t>{3, 3}));

  // The accepted path alone reads 5 experts' bytes, the pass 8: the rejected nodes' cost.
  ExpertRecords rec;
  const std::vector<std::int64_t> prompts = {0, 1};
  append_pass(rec, r, c, 0, 3, kPassVerify, prompts);
  EXPECT_EQ(rec.bytes(0, 0), 8 * 500);
  EXPECT_EQ(rec.kept_bytes(0, 0), 5 * 500);
  EXPECT_EQ(expert_records_problem(rec), "");
  // A count reused for a smaller pass holds that pass's values only.
  const ExpertRouting small = routing_of({{{1, 2}}}, 8, 4, 500);
  const std::vector<int> one = {1};
  count_experts(small, PassTokens{one, {}}, c);
  EXPECT_EQ(c.unique, (std::vector<std::int32_t>{2}));
  EXPECT_EQ(c.rank_pairs, (std::vector<std::int32_t>{1, 1, 0, 0}));
  EXPECT_EQ(c.seq_unique, (std::vector<std::int32_t>{2}));
}

TEST(ExpertAccounting, RefusesARoutingThatDoesNotDescribeThePass) {
  PassExpertCounts c;
  const std::vector<int> two = {2}, one = {1};
  const ExpertRouting r = routing_of({{{0, 1}}}, 4, 1, 10);
  EXPECT_THROW(count_experts(r, PassTokens{two, {}}, c), Error);  // 2 tokens, routing has 1
  const std::vector<std::uint8_t> kept = {1, 0};
  EXPECT_THROW(count_experts(r, PassTokens{one, kept}, c), Error);  // kept of another length
  EXPECT_THROW(count_experts(routing_of({{{0, 4}}}, 4, 1, 10), PassTokens{one, {}}, c), Error);
  EXPECT_THROW(count_experts(routing_of({{{2, 2}}}, 4, 1, 10), PassTokens{one, {}}, c), Error);
  EXPECT_THROW(count_experts(routing_of({{{0, 1}}}, 4, 3, 10), PassTokens{one, {}}, c), Error);
  std::vector<std::uint8_t> k2;
  const std::vector<int> bad_path = {3};
  EXPECT_THROW(append_verify_kept(1, 3, bad_path, k2), Error);
  // A second pass of another shape does not join the records.
  ExpertRecords rec;
  const std::vector<std::int64_t> p = {0};
  count_experts(r, PassTokens{one, {}}, c);
  append_pass(rec, r, c, 0, -1, kPassPrefill, p);
  const ExpertRouting other = routing_of({{{0, 1}}}, 8, 1, 10);
  count_experts(other, PassTokens{one, {}}, c);
  EXPECT_THROW(append_pass(rec, other, c, 0, 0, kPassDecode, p), Error);
}

// expert_records_problem finds each broken identity (what the writer and the reader check).
TEST(ExpertAccounting, RecordsProblemsNameTheBrokenIdentity) {
  const ExpertRouting r = routing_of({{{3, 5}, {5, 1}}, {{0, 7}, {6, 7}}}, 8, 2, 1000);
  const std::vector<int> per_seq = {1, 1};
  const std::vector<std::int64_t> prompts = {0, 1};
  PassExpertCounts c;
  count_experts(r, PassTokens{per_seq, {}}, c);
  ExpertRecords good;
  append_pass(good, r, c, 0, 0, kPassDecode, prompts);
  ASSERT_EQ(expert_records_problem(good), "");
  auto broken = [&](auto&& change) {
    ExpertRecords x = good;
    change(x);
    return expert_records_problem(x);
  };
  EXPECT_NE(broken([](ExpertRecords& x) { x.pairs[0] = 5; }), "");
  EXPECT_NE(broken([](ExpertRecords& x) { x.unique[1] = 5; }), "");       // > pairs
  EXPECT_NE(broken([](ExpertRecords& x) { x.kept_unique[0] = 4; }), "");  // > unique
  EXPECT_NE(broken([](ExpertRecords& x) { x.rank_pairs[0] = 3; }), "");   // ranks != pairs
  EXPECT_NE(broken([](ExpertRecords& x) { x.seq_tokens[0] = 2; }), "");   // rows != tokens
  EXPECT_NE(broken([](ExpertRecords& x) { x.seq_unique[0] = 4; }), "");   // > its pairs
  EXPECT_NE(broken([](ExpertRecords& x) { x.max_load[0] = 3; }), "");     // > tokens
  EXPECT_NE(broken([](ExpertRecords& x) { x.kind[0] = 9; }), "");
  EXPECT_NE(broken([](ExpertRecords& x) { x.ep = 3; }), "");
  EXPECT_NE(broken([](ExpertRecords& x) { x.layers = {3, 1}; }), "");
  EXPECT_NE(broken([](ExpertRecords& x) { x.unique.pop_back(); }), "");
}

// The gather to rank 0 carries a batch's expert records (tp rank 0's; other ranks send none).
TEST(ExpertAccounting, BatchCodecCarriesTheRecords) {
  const ExpertRouting r = routing_of({{{3, 5}, {5, 1}}, {{0, 7}, {6, 7}}}, 8, 2, 1000);
  const std::vector<int> per_seq = {1, 1};
  const std::vector<std::int64_t> prompts = {0, 1};
  PassExpertCounts c;
  count_experts(r, PassTokens{per_seq, {}}, c);
  BatchResult b;
  b.batch = 3;
  append_pass(b.target_experts, r, c, 3, -1, kPassPrefill, prompts);
  append_pass(b.target_experts, r, c, 3, 0, kPassDecode, prompts);
  append_pass(b.draft_experts, r, c, 3, 0, kPassPropose, prompts);
  const BatchResult back = decode_batch(encode_batch(b, true));
  EXPECT_EQ(back.target_experts, b.target_experts);
  EXPECT_EQ(back.draft_experts, b.draft_experts);
  EXPECT_TRUE(decode_batch(encode_batch(b, false)).target_experts.empty());
  const BatchResult dense = decode_batch(encode_batch(BatchResult{}, true));
  EXPECT_TRUE(dense.target_experts.empty() && dense.target_experts.layers.empty());
}

// The observer wrapper reports a routed model's passes and nothing of a dense model's.
TEST(ExpertAccounting, ObservedModelReportsEachRoutedPass) {
  struct Count final : RoutingObserver {
    int passes = 0, tokens = 0;
    void observe(std::span<const SeqChunk> batch, const ExpertRouting& r) override {
      ++passes;
      tokens += r.n_tokens;
      EXPECT_EQ(batch.size(), 1u);
    }
  };
  const test::SmallPair pair("observed");
  {
    test::SingleRankComm comm;
    Checkpoint ckpt(pair.target());
    std::shared_ptr<LanguageModel> dense = load_cpu_model(ckpt, comm, 1);
    Count seen_dense, seen_routed;
    auto watched_dense = observe_routing(dense, seen_dense);
    auto routed = std::make_shared<test::RoutedModel>(dense, std::vector<int>{0}, 4, 2, 1, 8);
    auto watched_routed = observe_routing(routed, seen_routed);
    const std::vector<std::int32_t> tokens = {3, 4, 5};
    for (auto* m : {watched_dense.get(), watched_routed.get()}) {
      auto cache = m->new_cache(8);
      const SeqChunk c{cache.get(), tokens.data(), 3};
      std::vector<float> logits;
      m->forward({&c, 1}, true, logits);
      EXPECT_EQ(logits.size(), 3u * 256u);
    }
    EXPECT_EQ(seen_dense.passes, 0);
    EXPECT_EQ(seen_routed.passes, 1);
    EXPECT_EQ(seen_routed.tokens, 3);
    EXPECT_EQ(watched_routed->routing(), routed->routing());
    EXPECT_EQ(watched_dense->weight_bytes(), dense->weight_bytes());
    EXPECT_GT(dense->weight_bytes(), 0);
  }
}

// The decoder's records against what the fed tokens must have read.
class DecoderExperts : public ::testing::Test {
 protected:
  void SetUp() override {
    Checkpoint target(pair_.target()), draft(pair_.draft());
    dense_target_ = load_cpu_model(target, comm_, 1);
    dense_draft_ = load_cpu_model(draft, comm_, 1);
    target_ =
        std::make_unique<test::RoutedModel>(dense_target_, std::vector<int>{0, 1}, 16, 2, 2, 3000);
    ops_ = make_token_ops(BackendKind::kCpu, nullptr);
    prompts_ = test::small_prompts(3, 10);
  }

  // Each sequence's prompt + output tokens.
  std::map<std::int64_t, std::vector<std::int32_t>> full_tokens(const BatchResult& r) const {
    std::map<std::int64_t, std::vector<std::int32_t>> out;
    for (const SequenceRecord& s : r.sequences) {
      std::vector<std::int32_t> t =
          prompts_.at(static_cast<std::size_t>(s.prompt_index - 10)).tokens;
      t.insert(t.end(), s.output_tokens.begin(), s.output_tokens.end());
      out[s.prompt_index] = t;
    }
    return out;
  }

  const test::SmallPair pair_{"experts"};
  test::SingleRankComm comm_;
  std::shared_ptr<LanguageModel> dense_target_, dense_draft_;
  std::unique_ptr<test::RoutedModel> target_;
  std::unique_ptr<TokenOps> ops_;
  std::vector<Prompt> prompts_;
};

// Baseline: one prefill, then one decode pass per step over the active sequences; each pass's
// unique experts are those of the tokens it fed (the prefill: the prompts; step s: token
// prompt_len + s of each active sequence).
TEST_F(DecoderExperts, BaselineRecordsThePrefillAndEveryDecode) {
  DecodeOptions opt;
  opt.max_new_tokens = 6;
  opt.stop_at_eos = false;
  BatchDecoder decoder(*target_, nullptr, *ops_, comm_, opt);
  const BatchResult r = decoder.run(kModeBaseline, 2, prompts_);
  const ExpertRecords& e = r.target_experts;
  ASSERT_EQ(expert_records_problem(e), "");
  EXPECT_TRUE(r.draft_experts.empty());
  ASSERT_EQ(e.passes(), 1 + r.n_steps);
  EXPECT_EQ(e.top_k, 2);
  EXPECT_EQ(e.n_experts, 16);
  EXPECT_EQ(e.ep, 2);
  EXPECT_EQ(e.expert_bytes, 3000);
  EXPECT_EQ(e.kind[0], kPassPrefill);
  EXPECT_EQ(e.step[0], -1);
  const auto full = full_tokens(r);
  std::size_t row = 0;
  for (std::int64_t p = 0; p < e.passes(); ++p) {
    EXPECT_EQ(e.batch[p], 2);
    std::vector<std::int32_t> fed;
    for (std::int32_t s = 0; s < e.sequences[p]; ++s, ++row) {
      const std::vector<std::int32_t>& t = full.at(e.seq_prompt_index[row]);
      const int prompt_len = static_cast<int>(
          prompts_.at(static_cast<std::size_t>(e.seq_prompt_index[row] - 10)).tokens.size());
      std::vector<std::int32_t> mine;
      if (p == 0)
        mine.assign(t.begin(), t.begin() + prompt_len);
      else
        mine.push_back(t.at(static_cast<std::size_t>(prompt_len + e.step[p])));
      EXPECT_EQ(e.seq_tokens[row], static_cast<std::int32_t>(mine.size()));
      for (int l = 0; l < 2; ++l) EXPECT_EQ(e.seq_unique[row * 2 + l], target_->unique_of(mine, l));
      fed.insert(fed.end(), mine.begin(), mine.end());
    }
    if (p > 0) {
      EXPECT_EQ(e.kind[p], kPassDecode);
      EXPECT_EQ(e.step[p], p - 1);
    }
    EXPECT_EQ(e.kept_tokens[p], e.tokens[p]);
    for (int l = 0; l < 2; ++l) {
      EXPECT_EQ(e.unique[p * 2 + l], target_->unique_of(fed, l)) << "pass " << p;
      EXPECT_EQ(e.pairs[p * 2 + l], 2 * static_cast<int>(fed.size()));
    }
  }
}

// A model that routes but has no MoE layer (every layer dense) reads no experts: nothing is
// recorded (an empty layer list would be an impossible shape in the result file).
TEST_F(DecoderExperts, AModelWithoutMoeLayersRecordsNothing) {
  test::RoutedModel no_moe(dense_target_, {}, 16, 2, 1, 3000);
  DecodeOptions opt;
  opt.max_new_tokens = 4;
  opt.stop_at_eos = false;
  opt.shape.draft_len = 2;
  DraftExpertLog log;
  auto draft = std::make_shared<test::RoutedModel>(dense_draft_, std::vector<int>{}, 4, 1, 1, 7);
  ModelDrafter drafter(observe_routing(draft, log), 256, *ops_, opt.draft());
  BatchDecoder decoder(no_moe, &drafter, *ops_, comm_, opt, nullptr, &log);
  for (const char* mode : {kModeBaseline, kModeSpeculative}) {
    const BatchResult r = decoder.run(mode, 0, prompts_);
    EXPECT_TRUE(r.target_experts.empty() && r.target_experts.layers.empty()) << mode;
    EXPECT_TRUE(r.draft_experts.empty()) << mode;
  }
}

// Speculative, chain and tree: one prefill and one verify per step (the draft model's passes are
// never among the target's), each sequence's verify holds its root and the proposal (drafted),
// its kept tokens the root and the accepted path; the draft model's passes are recorded apart.
TEST_F(DecoderExperts, SpeculativeRecordsVerifiesAndTheDraftApart) {
  for (int top_k : {1, 2}) {
    DecodeOptions opt;
    opt.max_new_tokens = 10;
    opt.stop_at_eos = false;
    opt.shape.draft_len = 3;
    // The synthetic draft agrees with the target too often: some steps must reject nodes.
    opt.acceptance = parse_synthetic_acceptance("rates:0.7,0.5");
    if (top_k > 1) {
      opt.shape.tree_top_k = 2;
      opt.shape.tree_depth = 3;
      opt.shape.tree_nodes = 5;
    }
    DraftExpertLog draft_log;
    auto routed_draft =
        std::make_shared<test::RoutedModel>(dense_draft_, std::vector<int>{1}, 4, 1, 1, 700);
    ModelDrafter drafter(observe_routing(routed_draft, draft_log), 256, *ops_, opt.draft());
    BatchDecoder decoder(*target_, &drafter, *ops_, comm_, opt, nullptr, &draft_log);
    const int calls_before = target_->forward_calls();
    const BatchResult r = decoder.run(kModeSpeculative, 0, prompts_);
    const ExpertRecords& e = r.target_experts;
    ASSERT_EQ(expert_records_problem(e), "");
    ASSERT_EQ(e.passes(), 1 + r.n_steps);
    EXPECT_EQ(target_->forward_calls() - calls_before, e.passes());
    std::map<std::pair<std::int32_t, std::int64_t>, const StepRecord*> steps;
    for (const StepRecord& s : r.steps) steps[{s.step, s.prompt_index}] = &s;
    std::size_t row = 0;
    bool some_rejected = false;
    for (std::int64_t p = 1; p < e.passes(); ++p) {
      EXPECT_EQ(e.kind[p], kPassVerify);
      row += static_cast<std::size_t>(e.sequences[p - 1]);
      for (std::int32_t s = 0; s < e.sequences[p]; ++s) {
        const StepRecord& st = *steps.at({e.step[p], e.seq_prompt_index[row + s]});
        EXPECT_EQ(e.seq_tokens[row + s], 1 + st.drafted);
        EXPECT_EQ(e.seq_kept_tokens[row + s], 1 + st.accepted);
        some_rejected = some_rejected || st.accepted < st.drafted;
      }
      for (int l = 0; l < 2; ++l) EXPECT_LE(e.kept_unique[p * 2 + l], e.unique[p * 2 + l]);
    }
    EXPECT_TRUE(some_rejected) << "the test needs a step with rejected nodes";
    const ExpertRecords& d = r.draft_experts;
    ASSERT_FALSE(d.empty());
    ASSERT_EQ(expert_records_problem(d), "");
    EXPECT_EQ(d.n_experts, 4);
    EXPECT_EQ(d.layers, (std::vector<std::int32_t>{1}));
    EXPECT_EQ(d.kind[0], kPassDraftPrefill);
    std::set<int> kinds(d.kind.begin(), d.kind.end());
    EXPECT_TRUE(kinds.count(kPassPropose));
    for (int k : kinds)
      EXPECT_TRUE(k == kPassDraftPrefill || k == kPassPropose || k == kPassAccepted);
    EXPECT_EQ(d.passes(), routed_draft->forward_calls());
  }
}

// bench's experts case: a verify pass of w = 1 .. k+1 tokens beside its unique experts, which are
// those of the first w benchmark tokens; T_verify(1) / T_decode is 1 by definition. A dense
// model has no experts case.
TEST_F(DecoderExperts, BenchSweepsVerifyWidthsBesideTheirExperts) {
  BenchOptions o;
  o.repeats = 2;
  o.warmup = 0;
  o.steps = 2;
  o.context = 4;
  o.verify_k = 3;
  o.prefill = 8;
  const std::vector<ExpertSweepPoint> points = run_expert_sweep(o, *target_, comm_);
  ASSERT_EQ(points.size(), 4u);
  // The benchmark's verify tokens: bench_tokens(k + 1, vocab, 3), as engine/bench.cpp makes them.
  std::vector<std::int32_t> ids(4);
  std::uint32_t x = 3u * 2654435761u + 12345u;
  for (std::int32_t& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = 3 + static_cast<std::int32_t>((x >> 8) % 253u);
  }
  for (int w = 1; w <= 4; ++w) {
    const ExpertSweepPoint& p = points[static_cast<std::size_t>(w - 1)];
    EXPECT_EQ(p.w, w);
    const std::vector<std::int32_t> fed(ids.begin(), ids.begin() + w);
    const double unique = 0.5 * (target_->unique_of(fed, 0) + target_->unique_of(fed, 1));
    EXPECT_DOUBLE_EQ(p.unique_per_layer, unique) << "w = " << w;
    EXPECT_DOUBLE_EQ(p.expert_mb, 2 * unique * 3000 / 1e6);
    EXPECT_GT(p.ms_median, 0);
  }
  EXPECT_DOUBLE_EQ(points[0].over_decode, 1.0);
  EXPECT_TRUE(run_expert_sweep(o, *dense_target_, comm_).empty());
}
