#include "spec/ngram_drafter.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

NgramDrafter::NgramDrafter(int min_n, int max_n, int k) : min_n_(min_n), max_n_(max_n), k_(k) {
  SPEC_CHECK(min_n >= 1 && max_n >= min_n && k >= 1,
             "n-gram drafter: ngram_min " << min_n << ", ngram_max " << max_n << ", k " << k);
}

void NgramDrafter::begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures*) {
  seqs_.assign(seqs.begin(), seqs.end());
}

void NgramDrafter::lookup(std::span<const std::int32_t> t, int min_n, int max_n, int k,
                          std::vector<std::int32_t>& out) {
  out.clear();
  const int L = static_cast<int>(t.size());
  for (int n = std::min(max_n, L - 1); n >= min_n; --n) {
    const std::int32_t* suffix = t.data() + (L - n);
    // The most recent earlier occurrence: start j < L - n, latest first.
    for (int j = L - n - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + n, t.data() + j)) continue;
      const int from = j + n, to = std::min(L, from + k);
      out.assign(t.begin() + from, t.begin() + to);
      return;
    }
  }
}

void NgramDrafter::propose(std::span<const int> active, std::span<const ProposalLimit> limits,
                           std::span<DraftTree> out) {
  for (std::size_t i = 0; i < active.size(); ++i) {
    out[i].clear();
    const int k = std::min({k_, limits[i].depth, limits[i].nodes});
    if (k <= 0) continue;
    lookup(*seqs_[active[i]].tokens, min_n_, max_n_, k, found_);
    for (std::size_t j = 0; j < found_.size(); ++j)
      out[i].add(found_[j], static_cast<std::int32_t>(j) - 1);
  }
}

}  // namespace specrun
