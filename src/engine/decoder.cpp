#include "engine/decoder.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "engine/step_timer.h"
#include "spec/rng.h"

namespace specrun {

struct BatchDecoder::Sequence {
  const Prompt* prompt = nullptr;
  std::unique_ptr<KvCache> cache;    // the target's
  std::vector<std::int32_t> tokens;  // prompt + generated
  int prompt_len = 0;
  bool finished = false;
  SequenceRecord record;

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  SeqRandKey key(std::uint64_t seed) const {
    return SeqRandKey{seed, static_cast<std::uint64_t>(prompt->index)};
  }
};

namespace {

void check_prompt_fits(const Prompt& p, const ModelConfig& config, int max_new_tokens) {
  SPEC_INPUT_CHECK(!p.tokens.empty(), "prompt " << p.index << " (id '" << p.id << "') is empty");
  std::int64_t need = static_cast<std::int64_t>(p.tokens.size()) + max_new_tokens;
  SPEC_INPUT_CHECK(need <= config.max_position_embeddings,
                   "prompt " << p.index << " (id '" << p.id << "') has " << p.tokens.size()
                             << " tokens; with decode.max_new_tokens = " << max_new_tokens
                             << " it needs " << need << " positions but the model's context is "
                             << config.max_position_embeddings
                             << ": lower decode.max_new_tokens or drop the prompt");
  for (std::size_t i = 0; i < p.tokens.size(); ++i) {
    SPEC_INPUT_CHECK(p.tokens[i] >= 0 && p.tokens[i] < config.vocab_size,
                     "prompt " << p.index << " (id '" << p.id << "'): token " << p.tokens[i]
                               << " at position " << i << " is outside the vocabulary ("
                               << config.vocab_size << " tokens)");
  }
}

}  // namespace

BatchDecoder::BatchDecoder(LanguageModel& target, Drafter* drafter, TokenOps& ops,
                           Communicator& tp_comm, const DecodeOptions& options)
    : target_(target), drafter_(drafter), ops_(ops), tp_comm_(tp_comm), options_(options) {
  SPEC_CHECK(options_.max_new_tokens >= 1, "max_new_tokens must be at least 1");
  SPEC_CHECK(ops.backend() == target.backend(), "token ops of another backend than the target's");
}

BatchDecoder::~BatchDecoder() = default;

void BatchDecoder::inject(const char* phase) {
  if (options_.inject_delay_ms > 0 && options_.inject_phase == phase)
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::milli>(options_.inject_delay_ms));
}

void BatchDecoder::agree(std::vector<std::int32_t>& values) {
  if (tp_comm_.size() > 1)
    tp_comm_.broadcast(values.data(), values.size() * sizeof(std::int32_t), 0);
}

void BatchDecoder::append_tokens(Sequence& s, const std::int32_t* emitted, int count) {
  for (int i = 0; i < count && !s.finished; ++i) {
    s.tokens.push_back(emitted[i]);
    if (options_.stop_at_eos && target_.config().is_eos(emitted[i])) {
      s.finished = true;
      s.record.finish_reason = kFinishEos;
    } else if (s.generated() >= options_.max_new_tokens) {
      s.finished = true;
      s.record.finish_reason = kFinishLength;
    }
  }
  if (s.finished) s.record.wall_s = seconds_since(t_batch_);
}

BatchResult BatchDecoder::run(const std::string& mode, std::int64_t batch,
                              const std::vector<Prompt>& prompts) {
  const bool speculative = mode == kModeSpeculative;
  SPEC_CHECK(speculative || mode == kModeBaseline, "unknown decoding mode '" << mode << "'");
  SPEC_INPUT_CHECK(!speculative || drafter_ != nullptr,
                   "decode.modes includes \"speculative\" but the job has no drafter "
                   "(draft.kind = \"none\")");
  t_batch_ = SteadyClock::now();
  start_batch(prompts);
  BatchResult result;
  result.batch = batch;
  result.n_ranks = 1;
  if (speculative) result.accepted_per_position.assign(options_.draft_len, 0);
  // Records for the most steps the batch can take (one token each), so that no step allocates.
  const std::size_t max_steps = static_cast<std::size_t>(options_.max_new_tokens);
  result.steps.reserve(max_steps * prompts.size());
  result.timings_ms.reserve(max_steps * kNumPhases);
  // The first token is the target's, exactly as in baseline mode.
  first_tokens();
  if (speculative) {
    std::vector<DraftSequence> view(seqs_.size());
    for (std::size_t i = 0; i < seqs_.size(); ++i)
      view[i] =
          DraftSequence{&seqs_[i].tokens, seqs_[i].prompt_len,
                        seqs_[i].prompt_len + options_.max_new_tokens, seqs_[i].key(options_.seed)};
    drafter_->begin_batch(view);
  }
  for (std::int32_t step = 0; collect_active(); ++step) {
    if (speculative)
      speculative_step(batch, step, result);
    else
      baseline_step(batch, step, result);
    ++result.n_steps;
  }
  if (speculative) drafter_->end_batch();
  finish_batch(result);
  return result;
}

void BatchDecoder::start_batch(const std::vector<Prompt>& prompts) {
  const ModelConfig& config = target_.config();
  seqs_.clear();
  seqs_.resize(prompts.size());
  const std::size_t room = static_cast<std::size_t>(options_.max_new_tokens + options_.draft_len);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    check_prompt_fits(prompts[i], config, options_.max_new_tokens);
    Sequence& s = seqs_[i];
    s.prompt = &prompts[i];
    s.tokens.reserve(prompts[i].tokens.size() + room);
    s.tokens = prompts[i].tokens;
    s.prompt_len = static_cast<int>(s.tokens.size());
    s.cache = target_.new_cache(s.prompt_len + options_.max_new_tokens);
  }
  // Scratch for the largest step this batch can take.
  const std::size_t B = prompts.size(), k = static_cast<std::size_t>(options_.draft_len);
  active_.reserve(B);
  chunks_.reserve(B);
  decided_.reserve(2 * B);
  verify_tokens_.reserve(B * (k + 2));
  trees_.resize(std::max(trees_.size(), B));
}

void BatchDecoder::first_tokens() {
  collect_active();  // every sequence
  chunks_.clear();
  for (Sequence& s : seqs_)
    chunks_.push_back(SeqChunk{s.cache.get(), s.tokens.data(), static_cast<int>(s.tokens.size())});
  decide_next(target_.forward(chunks_, ForwardRequest{}).logits);
  for (std::size_t r = 0; r < active_.size(); ++r)
    append_tokens(seqs_[active_[r]], &decided_[r], 1);
}

void BatchDecoder::decide_next(const RowsView& logits) {
  const std::size_t n = active_.size();
  rows_.resize(n);
  decided_.resize(n);
  for (std::size_t r = 0; r < n; ++r) rows_[r] = static_cast<int>(r);
  if (options_.sampling.greedy()) {
    ops_.argmax(logits, rows_, decided_);
  } else {
    u_.resize(n);
    for (std::size_t r = 0; r < n; ++r) {
      const Sequence& s = seqs_[active_[r]];
      u_[r] = s.key(options_.seed)
                  .uniform(static_cast<std::int64_t>(s.tokens.size()), RandPurpose::kTargetSample);
    }
    ops_.sample(logits, rows_, options_.sampling, u_, decided_);
  }
  agree(decided_);
}

bool BatchDecoder::collect_active() {
  active_.clear();
  for (std::size_t i = 0; i < seqs_.size(); ++i)
    if (!seqs_[i].finished) active_.push_back(static_cast<int>(i));
  return !active_.empty();
}

void BatchDecoder::baseline_step(std::int64_t batch, std::int32_t step, BatchResult& result) {
  StepTimer timer(tp_comm_);
  const std::size_t n = active_.size();

  timer.begin();
  chunks_.clear();
  for (int i : active_)
    chunks_.push_back(SeqChunk{seqs_[i].cache.get(), &seqs_[i].tokens.back(), 1});
  const ForwardResult fwd = target_.forward(chunks_, ForwardRequest{});
  inject("verify");
  timer.end(kPhaseVerify);

  timer.begin();
  decide_next(fwd.logits);
  inject("sample");
  timer.end(kPhaseSample);

  timer.begin();
  for (std::size_t r = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    append_tokens(s, &decided_[r], 1);
    s.record.verify_steps += 1;
    result.steps.push_back(
        StepRecord{batch, step, s.prompt->index, static_cast<std::int32_t>(n), 0, 0});
  }
  timer.end(kPhaseOther);
  timer.finish(result.timings_ms);
}

void BatchDecoder::speculative_step(std::int64_t batch, std::int32_t step, BatchResult& result) {
  StepTimer timer(tp_comm_);
  const std::size_t n = active_.size();

  // Draft: up to k tokens per sequence (fewer near max_new_tokens).
  timer.begin();
  max_nodes_.resize(n);
  for (std::size_t r = 0; r < n; ++r)
    max_nodes_[r] =
        std::min(options_.draft_len, options_.max_new_tokens - seqs_[active_[r]].generated() - 1);
  std::span<DraftTree> trees(trees_.data(), n);
  drafter_->propose(active_, max_nodes_, trees);
  inject("draft");
  timer.end(kPhaseDraft);

  // Verify: the target scores each sequence's uncommitted tokens and its drafts in one pass.
  timer.begin();
  verify_tokens_.clear();
  chains_.resize(n);
  int row = 0;
  for (std::size_t r = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    const DraftTree& tree = trees[r];
    SPEC_CHECK(tree.size() <= max_nodes_[r] && tree.is_chain(),
               "the drafter proposed " << tree.size() << " tokens (at most " << max_nodes_[r]
                                       << ", as a chain) for prompt " << s.prompt->index);
    const int have = s.cache->length();
    const int fed = static_cast<int>(s.tokens.size()) - have + tree.size();
    verify_tokens_.insert(verify_tokens_.end(), s.tokens.begin() + have, s.tokens.end());
    verify_tokens_.insert(verify_tokens_.end(), tree.tokens.begin(), tree.tokens.end());
    // Rows of p_1..p_{k+1}: the last k+1 rows of this sequence's chunk.
    ChainToVerify& c = chains_[r];
    c.drafts = tree.tokens;
    c.target_row = row + fed - (tree.size() + 1);
    c.q_row = tree.q_row;
    c.key = s.key(options_.seed);
    c.first_position = static_cast<std::int64_t>(s.tokens.size());
    row += fed;
  }
  chunks_.clear();
  for (std::size_t r = 0, at = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    const int fed = static_cast<int>(s.tokens.size()) - s.cache->length() + trees[r].size();
    chunks_.push_back(SeqChunk{s.cache.get(), verify_tokens_.data() + at, fed});
    at += fed;
  }
  const ForwardResult fwd = target_.forward(chunks_, ForwardRequest{true, {}});
  inject("verify");
  timer.end(kPhaseVerify);

  // Accept a prefix, emit one more token.
  timer.begin();
  verdicts_.resize(n);
  if (options_.sampling.greedy())
    ops_.verify_greedy(fwd.logits, chains_, verdicts_);
  else
    ops_.verify_sampling(fwd.logits, options_.sampling, chains_, verdicts_);
  decided_.resize(2 * n);
  for (std::size_t r = 0; r < n; ++r) {
    decided_[2 * r] = verdicts_[r].accepted;
    decided_[2 * r + 1] = verdicts_[r].token;
  }
  agree(decided_);
  inject("sample");
  timer.end(kPhaseSample);

  // Commit: append, roll the target cache back to what was accepted, tell the drafter.
  timer.begin();
  accepted_.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    const DraftTree& tree = trees[r];
    const int accepted = decided_[2 * r];
    const int before = static_cast<int>(s.tokens.size());
    emitted_.assign(tree.tokens.begin(), tree.tokens.begin() + accepted);
    emitted_.push_back(decided_[2 * r + 1]);
    append_tokens(s, emitted_.data(), static_cast<int>(emitted_.size()));
    // The cache holds the sequence before this step plus x_1..x_k: keep x_1..x_n.
    s.cache->truncate(before + accepted);
    accepted_[r] = accepted;
    s.record.verify_steps += 1;
    s.record.drafted += tree.size();
    s.record.accepted += accepted;
    for (int j = 1; j <= accepted; ++j) result.accepted_per_position[j - 1] += 1;
    result.steps.push_back(StepRecord{batch, step, s.prompt->index, static_cast<std::int32_t>(n),
                                      tree.size(), accepted});
  }
  drafter_->accepted(active_, accepted_);
  timer.end(kPhaseOther);
  timer.finish(result.timings_ms);
}

void BatchDecoder::finish_batch(BatchResult& result) {
  for (Sequence& s : seqs_) {
    SequenceRecord& r = s.record;
    r.prompt_index = s.prompt->index;
    r.prompt_id = s.prompt->id;
    r.category = s.prompt->category;
    r.prompt_len = s.prompt_len;
    r.output_tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
    r.generated = static_cast<std::int32_t>(r.output_tokens.size());
    result.sequences.push_back(std::move(r));
  }
  seqs_.clear();
}

}  // namespace specrun
