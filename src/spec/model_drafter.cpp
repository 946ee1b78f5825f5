#include "spec/model_drafter.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

ModelDrafter::ModelDrafter(std::shared_ptr<LanguageModel> draft, int target_vocab, TokenOps& ops,
                           const DraftOptions& options)
    : draft_(std::move(draft)), ops_(ops), options_(options) {
  SPEC_INPUT_CHECK(draft_->config().vocab_size == target_vocab,
                   "the draft's vocabulary ("
                       << draft_->config().vocab_size << " tokens) differs from the target's ("
                       << target_vocab << "): speculative decoding needs one vocabulary");
}

void ModelDrafter::begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures*) {
  seqs_.resize(seqs.size());
  chunks_.clear();
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = seqs_[i];
    s.seq = seqs[i];
    // A tree step forwards every frontier, more nodes than it keeps.
    const int room = options_.shape.tree() ? options_.shape.grown_nodes() : 0;
    s.cache = draft_->new_cache(seqs[i].capacity + room);
    s.cache->set_sequence_id(static_cast<std::int64_t>(seqs[i].key.prompt_id));
    chunks_.push_back(SeqChunk{s.cache.get(), s.seq.tokens->data(), s.seq.prompt_len});
  }
  // Prefill of the prompts (the first token is the target's and is fed with the first draft).
  draft_->forward(chunks_, ForwardRequest{});
  if (!options_.sampling.greedy() && !options_.shape.tree())
    ops_.reserve_draft(static_cast<int>(seqs.size()) * options_.shape.draft_len,
                       draft_->config().vocab_size);
}

void ModelDrafter::propose(std::span<const int> active, std::span<const ProposalLimit> limits,
                           std::span<DraftTree> out) {
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    s.base = static_cast<int>(s.seq.tokens->size());
    out[i].clear();
  }
  if (!options_.shape.tree()) {
    propose_chain(active, limits, out);
    return;
  }
  active_ = active;
  caches_.clear();
  for (int b : active) caches_.push_back(seqs_[b].cache.get());
  grower_.grow(ops_, options_.shape.tree_top_k, caches_, limits, *this, {}, out);
}

ForwardResult ModelDrafter::feed_new_tokens(std::span<const int> feeding) {
  chunks_.clear();
  for (int b : feeding) {
    Seq& s = seqs_[b];
    // Usually the last token; two after a step that accepted all k (chain), more after a tree.
    const int have = s.cache->length();
    chunks_.push_back(SeqChunk{s.cache.get(), s.seq.tokens->data() + have, s.base - have});
  }
  return draft_->forward(chunks_, ForwardRequest{});
}

void ModelDrafter::propose_chain(std::span<const int> active, std::span<const ProposalLimit> limits,
                                 std::span<DraftTree> out) {
  const bool greedy = options_.sampling.greedy();
  int k_step = 0;
  for (std::size_t i = 0; i < active.size(); ++i) {
    if (!greedy) out[i].q_row = active[i] * options_.shape.draft_len;
    SPEC_CHECK(limits[i].depth <= options_.shape.draft_len,
               "the model drafter was asked for " << limits[i].depth << " tokens, at most "
                                                  << options_.shape.draft_len);
    k_step = std::max(k_step, limits[i].depth);
  }
  for (int j = 0; j < k_step; ++j) {
    drafting_.clear();
    for (std::size_t i = 0; i < active.size(); ++i)
      if (j < limits[i].depth) drafting_.push_back(static_cast<int>(i));
    ForwardResult fwd;
    if (j == 0) {
      rows_.clear();
      for (int i : drafting_) rows_.push_back(active[i]);
      fwd = feed_new_tokens(rows_);
    } else {
      chunks_.clear();
      for (int i : drafting_)
        chunks_.push_back(SeqChunk{seqs_[active[i]].cache.get(), &out[i].tokens[j - 1], 1});
      fwd = draft_->forward(chunks_, ForwardRequest{});
    }
    const std::size_t m = drafting_.size();
    rows_.resize(m);
    picked_.resize(m);
    for (std::size_t r = 0; r < m; ++r) rows_[r] = static_cast<int>(r);
    if (greedy) {
      ops_.argmax(fwd.logits, rows_, picked_);
    } else {
      u_.resize(m);
      keep_at_.resize(m);
      for (std::size_t r = 0; r < m; ++r) {
        const int i = drafting_[r];
        const Seq& s = seqs_[active[i]];
        u_[r] = s.seq.key.uniform(static_cast<std::int64_t>(s.base) + j, RandPurpose::kDraftSample);
        keep_at_[r] = out[i].q_row + j;
      }
      ops_.sample_and_keep(fwd.logits, rows_, options_.sampling, u_, keep_at_, picked_);
    }
    for (std::size_t r = 0; r < m; ++r) out[drafting_[r]].add(picked_[r], j - 1);
  }
}

RowsView ModelDrafter::score_roots(std::span<const int> growing, std::vector<int>& rows) {
  drafting_.clear();
  for (int i : growing) drafting_.push_back(active_[i]);
  const ForwardResult fwd = feed_new_tokens(drafting_);
  for (std::size_t r = 0; r < growing.size(); ++r) rows.push_back(static_cast<int>(r));
  return fwd.logits;
}

RowsView ModelDrafter::score_level(const TreeLevel& level) {
  return draft_->forward(level.chunks, ForwardRequest{true, {}}).logits;
}

void ModelDrafter::accepted(std::span<const int> active, std::span<const TreeVerdict> verdicts,
                            const TargetFeatures*) {
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    // Chain: the cache holds the sequence before the step plus the drafts it was fed (never
    // the last one): keep what was accepted. Tree: back to the committed tokens.
    const int keep = options_.shape.tree() ? s.base : s.base + verdicts[i].accepted;
    s.cache->truncate(std::min(s.cache->length(), keep));
  }
}

void ModelDrafter::end_batch() {
  seqs_.clear();
}

}  // namespace specrun
