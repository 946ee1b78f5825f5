#include "spec/model_drafter.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

ModelDrafter::ModelDrafter(std::shared_ptr<LanguageModel> draft, int target_vocab, TokenOps& ops,
                           Communicator* agree, const SamplingParams& sampling, int max_draft)
    : draft_(std::move(draft)),
      ops_(ops),
      agree_(agree),
      sampling_(sampling),
      max_draft_(max_draft) {
  SPEC_INPUT_CHECK(draft_->config().vocab_size == target_vocab,
                   "the draft's vocabulary ("
                       << draft_->config().vocab_size << " tokens) differs from the target's ("
                       << target_vocab << "): speculative decoding needs one vocabulary");
}

void ModelDrafter::begin_batch(std::span<const DraftSequence> seqs) {
  seqs_.resize(seqs.size());
  chunks_.clear();
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = seqs_[i];
    s.seq = seqs[i];
    s.cache = draft_->new_cache(seqs[i].capacity);
    s.cache->set_sequence_id(static_cast<std::int64_t>(seqs[i].key.prompt_id));
    chunks_.push_back(SeqChunk{s.cache.get(), s.seq.tokens->data(), s.seq.prompt_len});
  }
  // Prefill of the prompts (the first token is the target's and is fed with the first draft).
  draft_->forward(chunks_, ForwardRequest{});
  if (!sampling_.greedy())
    ops_.reserve_draft(static_cast<int>(seqs.size()) * max_draft_, draft_->config().vocab_size);
}

void ModelDrafter::propose(std::span<const int> active, std::span<const int> max_nodes,
                           std::span<DraftTree> out) {
  const bool greedy = sampling_.greedy();
  int k_step = 0;
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    s.base = static_cast<int>(s.seq.tokens->size());
    out[i].clear();
    if (!greedy) out[i].q_row = active[i] * max_draft_;
    SPEC_CHECK(max_nodes[i] <= max_draft_, "the model drafter was asked for " << max_nodes[i]
                                                                              << " tokens, at most "
                                                                              << max_draft_);
    k_step = std::max(k_step, max_nodes[i]);
  }
  for (int j = 0; j < k_step; ++j) {
    chunks_.clear();
    drafting_.clear();
    for (std::size_t i = 0; i < active.size(); ++i) {
      if (j >= max_nodes[i]) continue;
      Seq& s = seqs_[active[i]];
      drafting_.push_back(static_cast<int>(i));
      if (j == 0) {
        // Everything the draft has not seen yet: usually the last token, two after a step that
        // accepted all k.
        const int have = s.cache->length();
        chunks_.push_back(SeqChunk{s.cache.get(), s.seq.tokens->data() + have, s.base - have});
      } else {
        chunks_.push_back(SeqChunk{s.cache.get(), &out[i].tokens[j - 1], 1});
      }
    }
    const ForwardResult fwd = draft_->forward(chunks_, ForwardRequest{});
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
      ops_.sample_and_keep(fwd.logits, rows_, sampling_, u_, keep_at_, picked_);
    }
    // A sharded draft's ranks agree through tp rank 0; a replicated draft is computed
    // identically everywhere and needs no message.
    if (agree_ != nullptr && agree_->size() > 1)
      agree_->broadcast(picked_.data(), m * sizeof(std::int32_t), 0);
    for (std::size_t r = 0; r < m; ++r) out[drafting_[r]].add(picked_[r], j - 1);
  }
}

void ModelDrafter::accepted(std::span<const int> active, std::span<const int> accepted) {
  // The cache holds the sequence before the step plus the drafts it was fed (never the last
  // one): keep what was accepted.
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    s.cache->truncate(std::min(s.cache->length(), s.base + accepted[i]));
  }
}

void ModelDrafter::end_batch() {
  seqs_.clear();
}

}  // namespace specrun
