#include "spec/model_drafter.h"

#include <algorithm>

#include "common/error.h"

namespace specrun {

ModelDrafter::ModelDrafter(std::shared_ptr<LanguageModel> draft, int target_vocab, TokenOps& ops,
                           Communicator* agree, const DraftOptions& options)
    : draft_(std::move(draft)), ops_(ops), agree_(agree), options_(options) {
  SPEC_INPUT_CHECK(draft_->config().vocab_size == target_vocab,
                   "the draft's vocabulary ("
                       << draft_->config().vocab_size << " tokens) differs from the target's ("
                       << target_vocab << "): speculative decoding needs one vocabulary");
}

void ModelDrafter::agree(void* data, std::size_t bytes) {
  // A sharded draft's ranks agree through tp rank 0; a replicated draft is computed
  // identically everywhere and needs no message.
  if (agree_ != nullptr && agree_->size() > 1) agree_->broadcast(data, bytes, 0);
}

void ModelDrafter::begin_batch(std::span<const DraftSequence> seqs, const TargetFeatures*) {
  seqs_.resize(seqs.size());
  chunks_.clear();
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = seqs_[i];
    s.seq = seqs[i];
    // A tree step forwards every frontier: up to top_k nodes per depth, more than it keeps.
    const int room = options_.tree() ? options_.tree_top_k * options_.tree_depth : 0;
    s.cache = draft_->new_cache(seqs[i].capacity + room);
    s.cache->set_sequence_id(static_cast<std::int64_t>(seqs[i].key.prompt_id));
    chunks_.push_back(SeqChunk{s.cache.get(), s.seq.tokens->data(), s.seq.prompt_len});
  }
  // Prefill of the prompts (the first token is the target's and is fed with the first draft).
  draft_->forward(chunks_, ForwardRequest{});
  if (!options_.sampling.greedy() && !options_.tree())
    ops_.reserve_draft(static_cast<int>(seqs.size()) * options_.draft_len,
                       draft_->config().vocab_size);
}

void ModelDrafter::propose(std::span<const int> active, std::span<const ProposalLimit> limits,
                           std::span<DraftTree> out) {
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    s.base = static_cast<int>(s.seq.tokens->size());
    out[i].clear();
  }
  if (options_.tree())
    propose_tree(active, limits, out);
  else
    propose_chain(active, limits, out);
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
    if (!greedy) out[i].q_row = active[i] * options_.draft_len;
    SPEC_CHECK(limits[i].depth <= options_.draft_len, "the model drafter was asked for "
                                                          << limits[i].depth << " tokens, at most "
                                                          << options_.draft_len);
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
    agree(picked_.data(), m * sizeof(std::int32_t));
    for (std::size_t r = 0; r < m; ++r) out[drafting_[r]].add(picked_[r], j - 1);
  }
}

void ModelDrafter::top_k(const RowsView& logits, int m, int k) {
  rows_.resize(m);
  for (int r = 0; r < m; ++r) rows_[r] = r;
  topk_ids_.resize(static_cast<std::size_t>(m) * k);
  topk_lp_.resize(topk_ids_.size());
  ops_.top_k(logits, rows_, k, topk_ids_, topk_lp_);
  agree(topk_ids_.data(), topk_ids_.size() * sizeof(std::int32_t));
  agree(topk_lp_.data(), topk_lp_.size() * sizeof(float));
}

// Level by level for every sequence at once: the root's top-k children from the newly fed
// tokens' last logits, then one forward of all frontiers (tree attention: each node sees the
// committed tokens and its ancestors) and their top-k children, until the depth is reached.
void ModelDrafter::propose_tree(std::span<const int> active, std::span<const ProposalLimit> limits,
                                std::span<DraftTree> out) {
  const int k = options_.tree_top_k;
  drafting_.clear();
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    s.builder.start(k, limits[i].depth, limits[i].nodes);
    s.slot_of.clear();
    if (limits[i].depth > 0 && limits[i].nodes > 0) drafting_.push_back(static_cast<int>(i));
  }
  if (!drafting_.empty()) {
    rows_.clear();
    for (int i : drafting_) rows_.push_back(active[i]);
    const ForwardResult fwd = feed_new_tokens(rows_);
    top_k(fwd.logits, static_cast<int>(drafting_.size()), k);
    for (std::size_t r = 0; r < drafting_.size(); ++r) {
      Seq& s = seqs_[active[drafting_[r]]];
      s.root_slot = s.cache->length() - 1;
      s.builder.root(std::span(topk_ids_).subspan(r * k, k), std::span(topk_lp_).subspan(r * k, k));
    }
  }
  while (true) {
    chunks_.clear();
    node_tokens_.clear();
    node_parents_.clear();
    drafting_.clear();
    for (std::size_t i = 0; i < active.size(); ++i) {
      Seq& s = seqs_[active[i]];
      if (s.builder.frontier().empty()) continue;
      drafting_.push_back(static_cast<int>(i));
      int j = 0;  // the node's place in this sequence's chunk
      for (int c : s.builder.frontier()) {
        if (s.slot_of.size() <= static_cast<std::size_t>(c)) s.slot_of.resize(c + 1, -1);
        const int parent = s.builder.parent(c);
        s.slot_of[c] = s.cache->length() + j++;
        node_tokens_.push_back(s.builder.token(c));
        node_parents_.push_back(parent < 0 ? s.root_slot : s.slot_of[parent]);
      }
    }
    if (drafting_.empty()) break;
    for (std::size_t r = 0, at = 0; r < drafting_.size(); ++r) {
      Seq& s = seqs_[active[drafting_[r]]];
      const int count = static_cast<int>(s.builder.frontier().size());
      chunks_.push_back(
          SeqChunk{s.cache.get(), node_tokens_.data() + at, count, node_parents_.data() + at});
      at += count;
    }
    const ForwardResult fwd = draft_->forward(chunks_, ForwardRequest{true, {}});
    top_k(fwd.logits, static_cast<int>(node_tokens_.size()), k);
    for (std::size_t r = 0, at = 0; r < drafting_.size(); ++r) {
      Seq& s = seqs_[active[drafting_[r]]];
      const std::size_t count = s.builder.frontier().size();
      s.builder.expand(std::span(topk_ids_).subspan(at * k, count * k),
                       std::span(topk_lp_).subspan(at * k, count * k));
      at += count;
    }
  }
  for (std::size_t i = 0; i < active.size(); ++i) seqs_[active[i]].builder.finish(out[i]);
}

void ModelDrafter::accepted(std::span<const int> active, std::span<const TreeVerdict> verdicts,
                            const TargetFeatures*) {
  for (std::size_t i = 0; i < active.size(); ++i) {
    Seq& s = seqs_[active[i]];
    // Chain: the cache holds the sequence before the step plus the drafts it was fed (never
    // the last one): keep what was accepted. Tree: back to the committed tokens.
    const int keep = options_.tree() ? s.base : s.base + verdicts[i].accepted;
    s.cache->truncate(std::min(s.cache->length(), keep));
  }
}

void ModelDrafter::end_batch() {
  seqs_.clear();
}

}  // namespace specrun
