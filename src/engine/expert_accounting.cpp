#include "engine/expert_accounting.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

namespace {

void check_routing(const ExpertRouting& r, const PassTokens& tokens) {
  SPEC_CHECK(r.top_k >= 1 && r.top_k <= r.n_experts && r.ep >= 1 && r.n_experts % r.ep == 0,
             "expert routing with top_k " << r.top_k << ", " << r.n_experts << " experts, ep "
                                          << r.ep
                                          << " (expected 1 <= top_k <= experts, ep dividing them)");
  SPEC_CHECK(r.n_tokens >= 0 && r.experts.size() == r.layers.size() *
                                                        static_cast<std::size_t>(r.n_tokens) *
                                                        static_cast<std::size_t>(r.top_k),
             "expert routing holds " << r.experts.size() << " expert ids for " << r.layers.size()
                                     << " layers x " << r.n_tokens << " tokens x top_k "
                                     << r.top_k);
  long long sum = 0;
  for (int n : tokens.tokens_per_sequence) {
    SPEC_CHECK(n >= 0, "a sequence of " << n << " tokens in the expert accounting");
    sum += n;
  }
  SPEC_CHECK(sum == r.n_tokens,
             "the pass's sequences hold " << sum << " tokens but its routing " << r.n_tokens);
  SPEC_CHECK(tokens.kept.empty() || tokens.kept.size() == static_cast<std::size_t>(r.n_tokens),
             tokens.kept.size() << " kept flags for a pass of " << r.n_tokens << " tokens");
}

template <typename T>
void grow(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

void count_experts(const ExpertRouting& r, const PassTokens& tokens, PassExpertCounts& out) {
  check_routing(r, tokens);
  const int L = static_cast<int>(r.layers.size());
  const int S = static_cast<int>(tokens.tokens_per_sequence.size());
  const int E = r.n_experts, k = r.top_k;
  const std::size_t per_rank = static_cast<std::size_t>(E / r.ep);
  out.layers = L;
  out.ep = r.ep;
  out.sequences = S;
  out.tokens = r.n_tokens;
  out.kept_tokens = 0;
  for (int t = 0; t < r.n_tokens; ++t)
    out.kept_tokens += tokens.kept.empty() || tokens.kept[static_cast<std::size_t>(t)] ? 1 : 0;
  // assign() keeps the capacity: no allocation once the largest pass has been seen.
  for (auto* v : {&out.unique, &out.pairs, &out.max_load, &out.kept_unique, &out.kept_pairs})
    v->assign(static_cast<std::size_t>(L), 0);
  out.rank_pairs.assign(static_cast<std::size_t>(L) * static_cast<std::size_t>(r.ep), 0);
  out.seq_tokens.assign(tokens.tokens_per_sequence.begin(), tokens.tokens_per_sequence.end());
  out.seq_kept_tokens.assign(static_cast<std::size_t>(S), 0);
  out.seq_unique.assign(static_cast<std::size_t>(S) * L, 0);
  out.seq_kept_unique.assign(static_cast<std::size_t>(S) * L, 0);
  grow(out.load_, static_cast<std::size_t>(E));
  grow(out.kept_load_, static_cast<std::size_t>(E));
  grow(out.seen_, static_cast<std::size_t>(E));
  grow(out.kept_seen_, static_cast<std::size_t>(E));
  for (int s = 0, t = 0; s < S; ++s)
    for (int i = 0; i < tokens.tokens_per_sequence[s]; ++i, ++t)
      out.seq_kept_tokens[s] += tokens.kept.empty() || tokens.kept[t] ? 1 : 0;

  for (int l = 0; l < L; ++l) {
    std::fill_n(out.load_.begin(), E, 0);
    std::fill_n(out.kept_load_.begin(), E, 0);
    int t = 0;
    for (int s = 0; s < S; ++s) {
      // A fresh stamp per (layer, sequence): an expert counts once for the sequence.
      const std::int64_t stamp = ++out.epoch_;
      std::int32_t& seq_unique = out.seq_unique[static_cast<std::size_t>(s) * L + l];
      std::int32_t& seq_kept = out.seq_kept_unique[static_cast<std::size_t>(s) * L + l];
      for (int i = 0; i < tokens.tokens_per_sequence[s]; ++i, ++t) {
        const bool kept = tokens.kept.empty() || tokens.kept[static_cast<std::size_t>(t)];
        for (int j = 0; j < k; ++j) {
          const std::int32_t e = r.expert(l, t, j);
          SPEC_CHECK(e >= 0 && e < E, "token " << t << " of the pass was routed to expert " << e
                                               << " in layer " << r.layers[l] << " (the layer has "
                                               << E << " experts)");
          for (int o = 0; o < j; ++o)
            SPEC_CHECK(r.expert(l, t, o) != e, "token " << t << " was routed to expert " << e
                                                        << " twice in layer " << r.layers[l]);
          ++out.load_[e];
          if (out.seen_[e] != stamp) {
            out.seen_[e] = stamp;
            ++seq_unique;
          }
          if (!kept) continue;
          ++out.kept_load_[e];
          if (out.kept_seen_[e] != stamp) {
            out.kept_seen_[e] = stamp;
            ++seq_kept;
          }
        }
      }
    }
    for (int e = 0; e < E; ++e) {
      const std::int32_t n = out.load_[e];
      if (n > 0) ++out.unique[l];
      if (out.kept_load_[e] > 0) ++out.kept_unique[l];
      out.pairs[l] += n;
      out.kept_pairs[l] += out.kept_load_[e];
      out.max_load[l] = std::max(out.max_load[l], n);
      out.rank_pairs[static_cast<std::size_t>(l) * r.ep + static_cast<std::size_t>(e) / per_rank] +=
          n;
    }
  }
}

void append_verify_kept(int uncommitted, int nodes, std::span<const int> accepted_path,
                        std::vector<std::uint8_t>& kept) {
  const std::size_t first = kept.size();
  kept.resize(first + static_cast<std::size_t>(uncommitted), 1);
  kept.resize(first + static_cast<std::size_t>(uncommitted + nodes), 0);
  for (int node : accepted_path) {
    SPEC_CHECK(node >= 0 && node < nodes,
               "accepted node " << node << " outside a proposal of " << nodes << " nodes");
    kept[first + static_cast<std::size_t>(uncommitted + node)] = 1;
  }
}

void append_pass(ExpertRecords& rec, const ExpertRouting& r, const PassExpertCounts& c,
                 std::int64_t batch, std::int32_t step, PassKind kind,
                 std::span<const std::int64_t> prompt_index) {
  if (rec.empty() && rec.layers.empty()) {
    rec.top_k = r.top_k;
    rec.n_experts = r.n_experts;
    rec.ep = r.ep;
    rec.expert_bytes = r.expert_bytes;
    rec.layers = r.layers;
  }
  SPEC_CHECK(rec.top_k == r.top_k && rec.n_experts == r.n_experts && rec.ep == r.ep &&
                 rec.expert_bytes == r.expert_bytes && rec.layers == r.layers,
             "a forward pass routed with another shape (top_k " << r.top_k << ", " << r.n_experts
                                                                << " experts, ep " << r.ep
                                                                << ") than the model's earlier "
                                                                   "passes");
  SPEC_CHECK(
      prompt_index.size() == static_cast<std::size_t>(c.sequences),
      prompt_index.size() << " prompt indices for a pass of " << c.sequences << " sequences");
  rec.batch.push_back(batch);
  rec.step.push_back(step);
  rec.kind.push_back(kind);
  rec.sequences.push_back(c.sequences);
  rec.tokens.push_back(c.tokens);
  rec.kept_tokens.push_back(c.kept_tokens);
  auto add = [](std::vector<std::int32_t>& to, const std::vector<std::int32_t>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  add(rec.unique, c.unique);
  add(rec.pairs, c.pairs);
  add(rec.max_load, c.max_load);
  add(rec.kept_unique, c.kept_unique);
  add(rec.kept_pairs, c.kept_pairs);
  add(rec.rank_pairs, c.rank_pairs);
  rec.seq_prompt_index.insert(rec.seq_prompt_index.end(), prompt_index.begin(), prompt_index.end());
  add(rec.seq_tokens, c.seq_tokens);
  add(rec.seq_kept_tokens, c.seq_kept_tokens);
  add(rec.seq_unique, c.seq_unique);
  add(rec.seq_kept_unique, c.seq_kept_unique);
}

void reserve_passes(ExpertRecords& rec, const ExpertRouting& r, std::size_t passes,
                    std::size_t sequences) {
  const std::size_t L = r.layers.size(), rows = passes * sequences;
  const std::size_t P = static_cast<std::size_t>(rec.passes()) + passes;
  const std::size_t R = static_cast<std::size_t>(rec.sequence_rows()) + rows;
  rec.batch.reserve(P);
  rec.step.reserve(P);
  rec.kind.reserve(P);
  for (auto* v : {&rec.sequences, &rec.tokens, &rec.kept_tokens}) v->reserve(P);
  for (auto* v : {&rec.unique, &rec.pairs, &rec.max_load, &rec.kept_unique, &rec.kept_pairs})
    v->reserve(P * L);
  rec.rank_pairs.reserve(P * L * static_cast<std::size_t>(std::max(1, r.ep)));
  rec.seq_prompt_index.reserve(R);
  for (auto* v : {&rec.seq_tokens, &rec.seq_kept_tokens}) v->reserve(R);
  for (auto* v : {&rec.seq_unique, &rec.seq_kept_unique}) v->reserve(R * L);
}

void DraftExpertLog::begin(std::int64_t batch, std::int32_t step, PassKind kind) {
  batch_ = batch;
  step_ = step;
  kind_ = kind;
}

void DraftExpertLog::plan(std::size_t passes, std::size_t sequences) {
  records_.clear_passes();  // a batch cut short by an error leaves its passes behind
  plan_passes_ = passes;
  plan_sequences_ = sequences;
}

void DraftExpertLog::observe(std::span<const SeqChunk> batch, const ExpertRouting& routing) {
  if (routing.layers.empty()) return;  // a model without MoE layers reads no experts
  if (records_.empty() && plan_passes_ > 0)
    reserve_passes(records_, routing, plan_passes_, std::max(plan_sequences_, batch.size()));
  tokens_.clear();
  prompt_index_.clear();
  for (const SeqChunk& c : batch) {
    tokens_.push_back(c.n_tokens);
    prompt_index_.push_back(c.cache != nullptr ? c.cache->sequence_id() : -1);
  }
  count_experts(routing, PassTokens{tokens_, {}}, counts_);
  append_pass(records_, routing, counts_, batch_, step_, kind_, prompt_index_);
}

void DraftExpertLog::take(ExpertRecords& out) {
  out.clear_passes();
  std::swap(out, records_);
  records_.clear_passes();
}

}  // namespace specrun
