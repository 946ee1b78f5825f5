#include "io/records.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace specrun {

namespace {

template <typename T>
void append_all(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

void ExpertRecords::append(const ExpertRecords& o) {
  if (o.empty()) return;
  if (empty() && layers.empty()) {
    top_k = o.top_k;
    n_experts = o.n_experts;
    ep = o.ep;
    expert_bytes = o.expert_bytes;
    layers = o.layers;
  }
  SPEC_CHECK(same_shape(o), "expert records of two model shapes (top_k "
                                << top_k << " / " << o.top_k << ", experts " << n_experts << " / "
                                << o.n_experts << ", ep " << ep << " / " << o.ep << ", layers "
                                << layers.size() << " / " << o.layers.size() << ")");
  append_all(batch, o.batch);
  append_all(step, o.step);
  append_all(kind, o.kind);
  append_all(sequences, o.sequences);
  append_all(tokens, o.tokens);
  append_all(kept_tokens, o.kept_tokens);
  append_all(unique, o.unique);
  append_all(pairs, o.pairs);
  append_all(max_load, o.max_load);
  append_all(kept_unique, o.kept_unique);
  append_all(kept_pairs, o.kept_pairs);
  append_all(rank_pairs, o.rank_pairs);
  append_all(seq_prompt_index, o.seq_prompt_index);
  append_all(seq_tokens, o.seq_tokens);
  append_all(seq_kept_tokens, o.seq_kept_tokens);
  append_all(seq_unique, o.seq_unique);
  append_all(seq_kept_unique, o.seq_kept_unique);
}

void ExpertRecords::clear_passes() {
  for (auto* v : {&batch, &seq_prompt_index}) v->clear();
  kind.clear();
  for (auto* v :
       {&step, &sequences, &tokens, &kept_tokens, &unique, &pairs, &max_load, &kept_unique,
        &kept_pairs, &rank_pairs, &seq_tokens, &seq_kept_tokens, &seq_unique, &seq_kept_unique})
    v->clear();
}

}  // namespace specrun

namespace specrun {

std::string expert_shape_problem(const ExpertRecords& r) {
  const std::size_t L = r.layers.size();
  if (r.top_k < 1 || r.n_experts < r.top_k || r.ep < 1 || r.n_experts % r.ep != 0 ||
      r.expert_bytes < 0 || L == 0) {
    std::ostringstream why;
    why << "its shape is top_k " << r.top_k << ", " << r.n_experts << " experts, ep " << r.ep
        << ", " << r.expert_bytes << " bytes per expert, " << L
        << " layers (expected 1 <= top_k <= experts, ep dividing experts, some layers)";
    return why.str();
  }
  for (std::size_t l = 1; l < L; ++l)
    if (r.layers[l] <= r.layers[l - 1]) return "its layer ids are not ascending";
  return "";
}

std::string expert_records_problem(const ExpertRecords& r) {
  std::ostringstream why;
  if (r.empty()) return "";
  const std::size_t P = static_cast<std::size_t>(r.passes());
  const std::size_t L = r.layers.size();
  if (std::string shape = expert_shape_problem(r); !shape.empty()) return shape;
  auto size_of = [&](const char* name, std::size_t got, std::size_t want) {
    if (got != want && why.str().empty())
      why << "it has " << got << " " << name << " values for " << want;
  };
  for (const auto& [name, n] : {std::pair<const char*, std::size_t>{"batch", r.batch.size()},
                                {"kind", r.kind.size()},
                                {"sequences", r.sequences.size()},
                                {"tokens", r.tokens.size()},
                                {"kept_tokens", r.kept_tokens.size()}})
    size_of(name, n, P);
  for (const auto& [name, n] : {std::pair<const char*, std::size_t>{"unique", r.unique.size()},
                                {"pairs", r.pairs.size()},
                                {"max_load", r.max_load.size()},
                                {"kept_unique", r.kept_unique.size()},
                                {"kept_pairs", r.kept_pairs.size()}})
    size_of(name, n, P * L);
  size_of("rank_pairs", r.rank_pairs.size(), P * L * static_cast<std::size_t>(r.ep));
  std::size_t rows = 0;
  for (std::size_t p = 0; p < P && p < r.sequences.size(); ++p)
    rows += static_cast<std::size_t>(std::max(0, r.sequences[p]));
  size_of("sequence-row", r.seq_prompt_index.size(), rows);
  size_of("sequence-row tokens", r.seq_tokens.size(), rows);
  size_of("sequence-row kept_tokens", r.seq_kept_tokens.size(), rows);
  size_of("sequence-row unique", r.seq_unique.size(), rows * L);
  size_of("sequence-row kept_unique", r.seq_kept_unique.size(), rows * L);
  if (!why.str().empty()) return why.str();
  const std::int64_t k = r.top_k;
  std::size_t row = 0;
  for (std::size_t p = 0; p < P; ++p) {
    auto fail = [&](const std::string& what) {
      why << "pass " << p << " (batch " << r.batch[p] << ", step " << r.step[p] << "): " << what;
      return why.str();
    };
    if (r.kind[p] < 0 || r.kind[p] >= kNumPassKinds)
      return fail("unknown kind " + std::to_string(int{r.kind[p]}));
    const std::int64_t tokens = r.tokens[p], kept = r.kept_tokens[p];
    if (r.sequences[p] < 0 || tokens < 0 || kept < 0 || kept > tokens)
      return fail("sequences " + std::to_string(r.sequences[p]) + ", tokens " +
                  std::to_string(tokens) + ", kept " + std::to_string(kept) +
                  " (expected 0 <= kept <= tokens)");
    const std::size_t first = row;
    row += static_cast<std::size_t>(r.sequences[p]);
    std::int64_t seq_tokens = 0, seq_kept = 0;
    for (std::size_t s = first; s < row; ++s) {
      if (r.seq_kept_tokens[s] < 0 || r.seq_kept_tokens[s] > r.seq_tokens[s])
        return fail("a sequence row has " + std::to_string(r.seq_tokens[s]) + " tokens, " +
                    std::to_string(r.seq_kept_tokens[s]) + " kept");
      seq_tokens += r.seq_tokens[s];
      seq_kept += r.seq_kept_tokens[s];
    }
    if (seq_tokens != tokens || seq_kept != kept)
      return fail("its sequence rows sum to " + std::to_string(seq_tokens) + " tokens, " +
                  std::to_string(seq_kept) + " kept, the pass has " + std::to_string(tokens) +
                  ", " + std::to_string(kept));
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t at = p * L + l;
      const std::int64_t unique = r.unique[at], pairs = r.pairs[at];
      std::int64_t ranks = 0;
      for (int e = 0; e < r.ep; ++e) ranks += r.rank_pairs[at * static_cast<std::size_t>(r.ep) + e];
      const std::string layer = "layer " + std::to_string(r.layers[l]) + ": ";
      if (pairs != tokens * k || r.kept_pairs[at] != kept * k || ranks != pairs)
        return fail(layer + std::to_string(pairs) + " pairs, " + std::to_string(r.kept_pairs[at]) +
                    " kept pairs, the ranks' pairs sum to " + std::to_string(ranks) +
                    " (expected tokens x top_k = " + std::to_string(tokens * k) +
                    ", kept tokens x top_k = " + std::to_string(kept * k) + ")");
      if (r.kept_unique[at] < 0 || r.kept_unique[at] > unique ||
          unique > std::min<std::int64_t>(r.n_experts, pairs) || (tokens > 0 && unique < k) ||
          r.max_load[at] > tokens || (tokens > 0 && r.max_load[at] < 1))
        return fail(layer + std::to_string(unique) + " unique experts, " +
                    std::to_string(r.kept_unique[at]) + " kept, most tokens on one expert " +
                    std::to_string(r.max_load[at]) + " (expected kept <= unique <= min(experts, " +
                    "pairs), top_k <= unique, 1 <= max_load <= tokens)");
      for (std::size_t s = first; s < row; ++s) {
        const std::int64_t su = r.seq_unique[s * L + l], sk = r.seq_kept_unique[s * L + l];
        const std::int64_t st = r.seq_tokens[s];
        if (su > std::min(unique, st * k) || (st > 0 && su < k) || sk < 0 || sk > su)
          return fail(layer + "a sequence row has " + std::to_string(su) + " unique experts (" +
                      std::to_string(sk) + " kept) for " + std::to_string(st) +
                      " tokens (expected top_k <= unique <= min(the pass's, tokens x top_k))");
      }
    }
  }
  return "";
}

}  // namespace specrun
