#include "spec/eagle3_drafter.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

Eagle3Drafter::Eagle3Drafter(std::unique_ptr<DraftHead> head, TokenOps& ops,
                             const DraftOptions& options)
    : head_(std::move(head)), ops_(ops), options_(options) {
  SPEC_CHECK(head_->kind() == HeadKind::kEagle3, "the EAGLE-3 drafter was given another head");
  SPEC_CHECK(head_->backend() == ops.backend(), "the EAGLE-3 head and the token ops' backends");
}

void Eagle3Drafter::begin_batch(std::span<const DraftSequence> seqs,
                                const TargetFeatures* features) {
  SPEC_CHECK(features != nullptr && features->seqs.size() == seqs.size(),
             "the EAGLE-3 drafter needs the target's features of the prompts");
  seqs_.resize(seqs.size());
  // A drafting step appends every frontier: up to top_k nodes per depth.
  const int room = std::max(options_.tree_top_k, 1) *
                   std::max(options_.tree() ? options_.tree_depth : options_.draft_len, 1);
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

void Eagle3Drafter::extend(std::span<const int> which, const TargetFeatures& features) {
  chunks_.clear();
  input_rows_.clear();
  rows_.clear();  // the sequences actually extended (index into `which`)
  for (std::size_t w = 0; w < which.size(); ++w) {
    Seq& s = seqs_[which[w]];
    const SeqFeatures& f = features.seqs[w];
    SPEC_CHECK(f.first_position == s.committed, "EAGLE-3: features from position "
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
  const ForwardResult out = head_->forward(chunks_, features.hidden, input_rows_, false);
  last_hidden_ = out.hidden;
  last_logits_ = out.logits;
  for (std::size_t c = 0, end = 0; c < chunks_.size(); ++c) {
    Seq& s = seqs_[which[rows_[c]]];
    end += static_cast<std::size_t>(chunks_[c].n_tokens);
    s.root_logits = static_cast<int>(c);
    s.root_hidden = static_cast<int>(end) - 1;
  }
}

void Eagle3Drafter::top_k(const RowsView& logits, std::span<const int> rows, int k) {
  topk_ids_.resize(rows.size() * k);
  topk_lp_.resize(topk_ids_.size());
  ops_.top_k(logits, rows, k, topk_ids_, topk_lp_);
  const std::span<const std::int32_t> d2t = head_->draft_to_target();
  for (std::int32_t& id : topk_ids_) id = d2t[id];
}

// Level by level for every sequence at once: the root's children from the last extend's
// logits, then one head forward of all frontiers (each node: its token and its parent's
// output; tree attention over the committed positions and its ancestors) and their children.
void Eagle3Drafter::propose(std::span<const int> active, std::span<const ProposalLimit> limits,
                            std::span<DraftTree> out) {
  const int k = options_.tree() ? options_.tree_top_k : 1;
  which_.clear();
  rows_.clear();
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    out[i].clear();
    s.builder.start(k, limits[i].depth, limits[i].nodes);
    s.slot_of.clear();
    s.row_of.clear();
    if (limits[i].depth <= 0 || limits[i].nodes <= 0 || s.root_logits < 0) continue;
    which_.push_back(static_cast<int>(i));
    rows_.push_back(s.root_logits);
  }
  if (!which_.empty()) {
    // The logits of the last head forward (an extend) are still valid: nothing ran since.
    const RowsView logits = last_logits_;
    top_k(logits, rows_, k);
    for (std::size_t r = 0; r < which_.size(); ++r)
      seqs_[active[which_[r]]].builder.root(std::span(topk_ids_).subspan(r * k, k),
                                            std::span(topk_lp_).subspan(r * k, k));
  }
  while (true) {
    chunks_.clear();
    node_tokens_.clear();
    node_parents_.clear();
    input_rows_.clear();
    which_.clear();
    for (std::size_t i = 0; i < active.size(); ++i) {
      Seq& s = seqs_[active[i]];
      if (s.builder.frontier().empty()) continue;
      which_.push_back(static_cast<int>(i));
      int j = 0;  // the node's place in this sequence's chunk
      for (int c : s.builder.frontier()) {
        if (s.slot_of.size() <= static_cast<std::size_t>(c)) {
          s.slot_of.resize(c + 1, -1);
          s.row_of.resize(c + 1, -1);
        }
        const int parent = s.builder.parent(c);
        s.slot_of[c] = s.cache->length() + j++;
        node_tokens_.push_back(s.builder.token(c));
        node_parents_.push_back(parent < 0 ? s.cache->length() - 1 : s.slot_of[parent]);
        input_rows_.push_back(parent < 0 ? s.root_hidden : s.row_of[parent]);
      }
    }
    if (which_.empty()) break;
    for (std::size_t r = 0, at = 0; r < which_.size(); ++r) {
      Seq& s = seqs_[active[which_[r]]];
      const int count = static_cast<int>(s.builder.frontier().size());
      chunks_.push_back(
          SeqChunk{s.cache.get(), node_tokens_.data() + at, count, node_parents_.data() + at});
      at += count;
    }
    const ForwardResult fwd = head_->forward(chunks_, last_hidden_, input_rows_, true);
    last_hidden_ = fwd.hidden;
    rows_.resize(node_tokens_.size());
    for (std::size_t r = 0; r < rows_.size(); ++r) rows_[r] = static_cast<int>(r);
    top_k(fwd.logits, rows_, k);
    for (std::size_t r = 0, at = 0; r < which_.size(); ++r) {
      Seq& s = seqs_[active[which_[r]]];
      const std::size_t count = s.builder.frontier().size();
      for (std::size_t j = 0; j < count; ++j) s.row_of[s.builder.frontier()[j]] = at + j;
      s.builder.expand(std::span(topk_ids_).subspan(at * k, count * k),
                       std::span(topk_lp_).subspan(at * k, count * k));
      at += count;
    }
  }
  for (std::size_t i = 0; i < active.size(); ++i) seqs_[active[i]].builder.finish(out[i]);
}

void Eagle3Drafter::accepted(std::span<const int> active, std::span<const TreeVerdict>,
                             const TargetFeatures* features) {
  SPEC_CHECK(features != nullptr && features->seqs.size() == active.size(),
             "the EAGLE-3 drafter needs the target's features of the committed positions");
  // Back to the committed positions (the drafted nodes go), then the newly committed ones.
  for (int b : active) {
    Seq& s = seqs_[b];
    s.cache->truncate(s.committed);
  }
  extend(active, *features);
}

}  // namespace specrun
