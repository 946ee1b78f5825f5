#include "spec/head_drafter.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

HeadDrafter::HeadDrafter(std::unique_ptr<DraftHead> head, TokenOps& ops,
                         const DraftOptions& options, RoutingObserver* routing)
    : head_(std::move(head)), ops_(ops), routing_(routing), options_(options) {
  SPEC_CHECK(head_->backend() == ops.backend(), "the draft head and the token ops' backends");
}

ForwardResult HeadDrafter::forward(std::span<const SeqChunk> batch, const RowsView& source,
                                   std::span<const int> rows, bool all_logits) {
  ForwardResult out = head_->forward(batch, source, rows, all_logits);
  if (routing_ != nullptr)
    if (const ExpertRouting* r = head_->routing()) routing_->observe(batch, *r);
  return out;
}

void HeadDrafter::begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures* features) {
  SPEC_CHECK(features != nullptr && features->seqs.size() == seqs.size(),
             "the head drafter needs the target's features of the prompts");
  seqs_.resize(seqs.size());
  // A drafting step appends every frontier.
  const int room = options_.shape.grown_nodes();
  which_.clear();
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = seqs_[i];
    s.seq = seqs[i];
    s.cache = head_->new_cache(seqs[i].capacity + room);
    s.cache->set_sequence_id(static_cast<std::int64_t>(seqs[i].key.prompt_id));
    s.committed = 0;
    which_.push_back(static_cast<int>(i));
  }
  extend(which_, *features);
}

void HeadDrafter::extend(std::span<const int> which, const TargetFeatures& features) {
  chunks_.clear();
  input_rows_.clear();
  rows_.clear();  // the sequences actually extended (index into `which`)
  for (std::size_t w = 0; w < which.size(); ++w) {
    Seq& s = seqs_[which[w]];
    const SeqFeatures& f = features.seqs[w];
    SPEC_CHECK(f.first_position == s.committed, "draft head: features from position "
                                                    << f.first_position << " for a head at "
                                                    << s.committed);
    // Pairs (next token, features): as many as tokens follow (a sequence cut at its end has
    // fewer).
    const int have = static_cast<int>(s.seq.tokens->size()) - 1 - s.committed;
    const int count = std::min(static_cast<int>(f.rows.size()), have);
    s.root_logits = -1;
    if (count <= 0) continue;
    chunks_.push_back(SeqChunk{s.cache.get(), s.seq.tokens->data() + s.committed + 1, count});
    input_rows_.insert(input_rows_.end(), f.rows.begin(), f.rows.begin() + count);
    rows_.push_back(static_cast<int>(w));
    s.committed += count;
  }
  if (chunks_.empty()) return;
  const ForwardResult out = forward(chunks_, features.hidden, input_rows_, false);
  last_hidden_ = out.hidden;
  last_logits_ = out.logits;
  for (std::size_t c = 0, end = 0; c < chunks_.size(); ++c) {
    Seq& s = seqs_[which[rows_[c]]];
    end += static_cast<std::size_t>(chunks_[c].n_tokens);
    s.root_logits = static_cast<int>(c);
    s.root_hidden = static_cast<int>(end) - 1;
  }
}

void HeadDrafter::propose(std::span<const int> active, std::span<const ProposalLimit> limits,
                          std::span<DraftTree> out) {
  active_ = active;
  caches_.clear();
  for (int b : active)  // a sequence with nothing extended has no root to draft from
    caches_.push_back(seqs_[b].root_logits < 0 ? nullptr : seqs_[b].cache.get());
  grower_.grow(ops_, options_.shape.tree_top_k, caches_, limits, *this, head_->draft_to_target(),
               out);
}

RowsView HeadDrafter::score_roots(std::span<const int> growing, std::vector<int>& rows) {
  // The logits of the last head forward (an extend) are still valid: nothing ran since.
  for (int i : growing) rows.push_back(seqs_[active_[i]].root_logits);
  return last_logits_;
}

RowsView HeadDrafter::score_level(const TreeLevel& level) {
  // Each node's input: its parent's output (the root's: the last extend's output row).
  input_rows_.clear();
  for (std::size_t r = 0, at = 0; r < level.seqs.size(); ++r) {
    const Seq& s = seqs_[active_[level.seqs[r]]];
    for (int j = 0; j < level.chunks[r].n_tokens; ++j, ++at)
      input_rows_.push_back(level.parent_rows[at] < 0 ? s.root_hidden : level.parent_rows[at]);
  }
  const ForwardResult fwd = forward(level.chunks, last_hidden_, input_rows_, true);
  last_hidden_ = fwd.hidden;
  return fwd.logits;
}

void HeadDrafter::accepted(std::span<const int> active, std::span<const TreeVerdict>,
                           const TargetFeatures* features) {
  SPEC_CHECK(features != nullptr && features->seqs.size() == active.size(),
             "the head drafter needs the target's features of the committed positions");
  // Back to the committed positions (the drafted nodes go), then the newly committed ones.
  for (int b : active) {
    Seq& s = seqs_[b];
    s.cache->truncate(s.committed);
  }
  extend(active, *features);
}

}  // namespace specrun
