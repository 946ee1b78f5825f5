#include "engine/decoder.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "spec/rng.h"
#include "spec/verifier.h"

namespace specrun {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Accumulates one step's phase times; communication is measured inside the communicators and
// subtracted from the phase it happened in, so the phases partition the step.
class StepTimer {
 public:
  explicit StepTimer(const BatchDecoder* owner, double (*comm)(const BatchDecoder*))
      : owner_(owner), comm_(comm), start_(Clock::now()), comm_start_(comm(owner)) {}
  void begin() {
    t_ = Clock::now();
    c_ = comm_(owner_);
  }
  void end(Phase phase) {
    double wall = seconds_since(t_);
    double comm = comm_(owner_) - c_;
    ms_[phase] += 1e3 * std::max(0.0, wall - comm);
  }
  std::array<float, kNumPhases> finish() {
    double total = seconds_since(start_);
    double comm = comm_(owner_) - comm_start_;
    ms_[kPhaseComm] = 1e3 * comm;
    ms_[kPhaseTotal] = 1e3 * total;
    double known = ms_[kPhaseDraft] + ms_[kPhaseVerify] + ms_[kPhaseSample] + ms_[kPhaseComm];
    ms_[kPhaseOther] = std::max(0.0, ms_[kPhaseTotal] - known);
    std::array<float, kNumPhases> out{};
    for (int i = 0; i < kNumPhases; ++i) out[i] = static_cast<float>(ms_[i]);
    return out;
  }

 private:
  const BatchDecoder* owner_;
  double (*comm_)(const BatchDecoder*);
  Clock::time_point start_, t_;
  double comm_start_, c_ = 0;
  std::array<double, kNumPhases> ms_{};
};

}  // namespace

struct BatchDecoder::Sequence {
  const Prompt* prompt = nullptr;
  std::unique_ptr<KvCache> target_cache;
  std::unique_ptr<KvCache> draft_cache;
  std::vector<std::int32_t> tokens;  // prompt + generated
  int prompt_len = 0;
  bool finished = false;
  SequenceRecord record;
  // Per-step scratch (speculative mode).
  int k = 0;                          // draft tokens proposed this step
  std::vector<std::int32_t> drafted;  // x_1..x_k
  std::vector<float> q;               // k rows of the draft's distributions (sampling only)
  int logits_row = 0;                 // first row of this sequence in the last forward's logits

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  SeqRandKey key(std::uint64_t seed) const {
    return SeqRandKey{seed, static_cast<std::uint64_t>(prompt->index)};
  }
};

BatchDecoder::BatchDecoder(LanguageModel& target, LanguageModel* draft, Communicator& tp_comm,
                           const DecodeOptions& options)
    : target_(target),
      draft_(draft),
      tp_comm_(tp_comm),
      options_(options),
      vocab_(target.config().vocab_size) {
  SPEC_CHECK(options_.max_new_tokens >= 1, "max_new_tokens must be at least 1");
  if (draft_ != nullptr) {
    SPEC_INPUT_CHECK(draft_->config().vocab_size == vocab_,
                     "the draft's vocabulary (" << draft_->config().vocab_size
                                                << " tokens) differs from the target's (" << vocab_
                                                << "): speculative decoding needs one vocabulary");
  }
}

double BatchDecoder::comm_seconds() const {
  // The draft's communicator is the tp communicator when sharded; a replicated draft has none.
  return tp_comm_.comm_seconds();
}

void BatchDecoder::inject(const char* phase) {
  if (options_.inject_delay_ms > 0 && options_.inject_phase == phase)
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::milli>(options_.inject_delay_ms));
}

void BatchDecoder::agree(std::vector<std::int32_t>& values) {
  if (tp_comm_.size() > 1)
    tp_comm_.broadcast(values.data(), values.size() * sizeof(std::int32_t), 0);
}

int BatchDecoder::choose(const float* logits, const Sequence& seq, std::int64_t position,
                         int purpose) {
  if (options_.sampling.greedy()) return argmax(logits, vocab_);
  probs_.resize(vocab_);
  sampler_.logits_to_probs(logits, vocab_, options_.sampling, probs_.data());
  double u = seq.key(options_.seed).uniform(position, static_cast<RandPurpose>(purpose));
  return sample_from(probs_.data(), vocab_, u);
}

void BatchDecoder::prefill(LanguageModel& model, std::vector<Sequence>& seqs, bool draft,
                           bool want_logits) {
  std::vector<SeqChunk> chunks;
  chunks.reserve(seqs.size());
  for (Sequence& s : seqs) {
    KvCache* cache = draft ? s.draft_cache.get() : s.target_cache.get();
    chunks.push_back(SeqChunk{cache, s.tokens.data(), static_cast<int>(s.tokens.size())});
  }
  std::vector<float>& out = draft ? draft_logits_ : logits_;
  model.forward(chunks, /*all_logits=*/false, out);
  (void)want_logits;
}

BatchResult BatchDecoder::run(const std::string& mode, std::int64_t batch,
                              const std::vector<Prompt>& prompts) {
  if (mode == kModeBaseline) return run_baseline(batch, prompts);
  SPEC_CHECK(mode == kModeSpeculative, "unknown decoding mode '" << mode << "'");
  SPEC_INPUT_CHECK(draft_ != nullptr,
                   "decode.modes includes \"speculative\" but the job has no draft model "
                   "(draft.kind = \"none\")");
  return run_speculative(batch, prompts);
}

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

// Appends `emitted` to the sequence, stopping at EOS and at max_new_tokens. Returns how many
// were kept and marks the sequence finished when it should stop.
template <class Seq>
int append_tokens(Seq& s, const std::int32_t* emitted, int count, const ModelConfig& config,
                  const DecodeOptions& options) {
  int kept = 0;
  for (int i = 0; i < count && !s.finished; ++i) {
    s.tokens.push_back(emitted[i]);
    ++kept;
    if (options.stop_at_eos && config.is_eos(emitted[i])) {
      s.finished = true;
      s.record.finish_reason = kFinishEos;
    } else if (s.generated() >= options.max_new_tokens) {
      s.finished = true;
      s.record.finish_reason = kFinishLength;
    }
  }
  return kept;
}

}  // namespace

std::vector<BatchDecoder::Sequence> BatchDecoder::start_batch(const std::vector<Prompt>& prompts,
                                                              bool with_draft) {
  const ModelConfig& config = target_.config();
  std::vector<Sequence> seqs(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    check_prompt_fits(prompts[i], config, options_.max_new_tokens);
    Sequence& s = seqs[i];
    s.prompt = &prompts[i];
    s.tokens = prompts[i].tokens;
    s.prompt_len = static_cast<int>(s.tokens.size());
    const int capacity = s.prompt_len + options_.max_new_tokens;
    s.target_cache = target_.new_cache(capacity);
    if (with_draft) s.draft_cache = draft_->new_cache(capacity);
  }
  return seqs;
}

void BatchDecoder::first_tokens(std::vector<Sequence>& seqs, bool with_draft,
                                std::chrono::steady_clock::time_point t_batch) {
  prefill(target_, seqs, false, true);
  if (with_draft) prefill(*draft_, seqs, true, false);
  std::vector<std::int32_t> first(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i)
    first[i] = choose(&logits_[i * vocab_], seqs[i], seqs[i].prompt_len,
                      static_cast<int>(RandPurpose::kTargetSample));
  agree(first);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    append_tokens(seqs[i], &first[i], 1, target_.config(), options_);
    if (seqs[i].finished) seqs[i].record.wall_s = seconds_since(t_batch);
  }
}

void BatchDecoder::finish_batch(std::vector<Sequence>& seqs, BatchResult& result) {
  for (Sequence& s : seqs) {
    SequenceRecord& r = s.record;
    r.prompt_index = s.prompt->index;
    r.prompt_id = s.prompt->id;
    r.category = s.prompt->category;
    r.prompt_len = s.prompt_len;
    r.output_tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
    r.generated = static_cast<std::int32_t>(r.output_tokens.size());
    result.sequences.push_back(std::move(r));
  }
}

BatchResult BatchDecoder::run_baseline(std::int64_t batch, const std::vector<Prompt>& prompts) {
  const ModelConfig& config = target_.config();
  auto t_batch = Clock::now();
  std::vector<Sequence> seqs = start_batch(prompts, /*with_draft=*/false);
  BatchResult result;
  result.batch = batch;
  result.n_ranks = 1;
  first_tokens(seqs, /*with_draft=*/false, t_batch);
  std::vector<std::int32_t> next;

  std::vector<SeqChunk> chunks;
  std::vector<Sequence*> active;
  for (std::int32_t step = 0;; ++step) {
    active.clear();
    for (Sequence& s : seqs)
      if (!s.finished) active.push_back(&s);
    if (active.empty()) break;
    StepTimer timer(this, [](const BatchDecoder* d) { return d->comm_seconds(); });

    timer.begin();
    chunks.clear();
    for (Sequence* s : active)
      chunks.push_back(SeqChunk{s->target_cache.get(), &s->tokens.back(), 1});
    target_.forward(chunks, false, logits_);
    inject("verify");
    timer.end(kPhaseVerify);

    timer.begin();
    next.resize(active.size());
    for (std::size_t i = 0; i < active.size(); ++i)
      next[i] = choose(&logits_[i * vocab_], *active[i],
                       static_cast<std::int64_t>(active[i]->tokens.size()),
                       static_cast<int>(RandPurpose::kTargetSample));
    agree(next);
    inject("sample");
    timer.end(kPhaseSample);

    timer.begin();
    for (std::size_t i = 0; i < active.size(); ++i) {
      Sequence& s = *active[i];
      append_tokens(s, &next[i], 1, config, options_);
      s.record.verify_steps += 1;
      result.steps.push_back(
          StepRecord{batch, step, s.prompt->index, static_cast<std::int32_t>(active.size()), 0, 0});
      if (s.finished) s.record.wall_s = seconds_since(t_batch);
    }
    timer.end(kPhaseOther);
    auto row = timer.finish();
    result.timings_ms.insert(result.timings_ms.end(), row.begin(), row.end());
    ++result.n_steps;
  }

  finish_batch(seqs, result);
  return result;
}

BatchResult BatchDecoder::run_speculative(std::int64_t batch, const std::vector<Prompt>& prompts) {
  const ModelConfig& config = target_.config();
  const bool greedy = options_.sampling.greedy();
  const int k_max = options_.draft_len;
  auto t_batch = Clock::now();
  std::vector<Sequence> seqs = start_batch(prompts, /*with_draft=*/true);
  BatchResult result;
  result.batch = batch;
  result.n_ranks = 1;
  result.accepted_per_position.assign(k_max, 0);
  // The first token is the target's, exactly as in baseline mode.
  first_tokens(seqs, /*with_draft=*/true, t_batch);

  const bool draft_shared_comm = options_.draft_sharded;
  std::vector<SeqChunk> chunks;
  std::vector<Sequence*> active;
  std::vector<std::int32_t> one_token;
  for (std::int32_t step = 0;; ++step) {
    active.clear();
    for (Sequence& s : seqs)
      if (!s.finished) active.push_back(&s);
    if (active.empty()) break;
    StepTimer timer(this, [](const BatchDecoder* d) { return d->comm_seconds(); });

    // Draft: propose k tokens per sequence (fewer near max_new_tokens).
    timer.begin();
    int k_step = 0;
    for (Sequence* s : active) {
      int remaining = options_.max_new_tokens - s->generated();
      s->k = std::min(k_max, remaining - 1);
      s->drafted.clear();
      if (!greedy) s->q.resize(static_cast<std::size_t>(s->k) * vocab_);
      k_step = std::max(k_step, s->k);
    }
    for (int j = 0; j < k_step; ++j) {
      chunks.clear();
      std::vector<Sequence*> drafting;
      for (Sequence* s : active) {
        if (j >= s->k) continue;
        drafting.push_back(s);
        if (j == 0) {
          // Everything the draft has not seen yet: usually the last token, two after a step
          // that accepted all k.
          int have = s->draft_cache->length();
          chunks.push_back(SeqChunk{s->draft_cache.get(), s->tokens.data() + have,
                                    static_cast<int>(s->tokens.size()) - have});
        } else {
          chunks.push_back(SeqChunk{s->draft_cache.get(), &s->drafted[j - 1], 1});
        }
      }
      draft_->forward(chunks, false, draft_logits_);
      one_token.resize(drafting.size());
      for (std::size_t i = 0; i < drafting.size(); ++i) {
        Sequence& s = *drafting[i];
        const float* lg = &draft_logits_[i * vocab_];
        std::int64_t position = static_cast<std::int64_t>(s.tokens.size()) + j;
        if (greedy) {
          one_token[i] = argmax(lg, vocab_);
        } else {
          float* q = &s.q[static_cast<std::size_t>(j) * vocab_];
          sampler_.logits_to_probs(lg, vocab_, options_.sampling, q);
          one_token[i] = sample_from(
              q, vocab_, s.key(options_.seed).uniform(position, RandPurpose::kDraftSample));
        }
      }
      // A sharded draft's ranks agree through tp rank 0; a replicated draft is computed
      // identically everywhere and needs no message.
      if (draft_shared_comm) agree(one_token);
      for (std::size_t i = 0; i < drafting.size(); ++i)
        drafting[i]->drafted.push_back(one_token[i]);
    }
    inject("draft");
    timer.end(kPhaseDraft);

    // Verify: the target scores the last token and the k drafts in one pass.
    timer.begin();
    chunks.clear();
    std::vector<std::vector<std::int32_t>> verify_inputs(active.size());
    int row = 0;
    for (std::size_t i = 0; i < active.size(); ++i) {
      Sequence& s = *active[i];
      int have = s.target_cache->length();
      auto& in = verify_inputs[i];
      in.assign(s.tokens.begin() + have, s.tokens.end());
      in.insert(in.end(), s.drafted.begin(), s.drafted.end());
      chunks.push_back(SeqChunk{s.target_cache.get(), in.data(), static_cast<int>(in.size())});
      // Rows of p_1..p_{k+1}: the last k+1 rows of this sequence's chunk.
      s.logits_row = row + static_cast<int>(in.size()) - (s.k + 1);
      row += static_cast<int>(in.size());
    }
    target_.forward(chunks, /*all_logits=*/true, logits_);
    inject("verify");
    timer.end(kPhaseVerify);

    // Accept a prefix, emit one more token.
    timer.begin();
    std::vector<std::int32_t> outcome(active.size() * 2);
    for (std::size_t i = 0; i < active.size(); ++i) {
      Sequence& s = *active[i];
      const float* p_rows = &logits_[static_cast<std::size_t>(s.logits_row) * vocab_];
      VerifyResult v;
      if (greedy) {
        std::vector<int> target_argmax(s.k + 1);
        for (int j = 0; j <= s.k; ++j) target_argmax[j] = argmax(p_rows + j * vocab_, vocab_);
        std::vector<int> drafts(s.drafted.begin(), s.drafted.end());
        v.accepted = greedy_accept(drafts.data(), s.k, target_argmax.data());
        v.token = target_argmax[v.accepted];
      } else {
        probs_.resize(static_cast<std::size_t>(s.k + 1) * vocab_);
        for (int j = 0; j <= s.k; ++j)
          sampler_.logits_to_probs(p_rows + j * vocab_, vocab_, options_.sampling,
                                   &probs_[static_cast<std::size_t>(j) * vocab_]);
        std::vector<int> drafts(s.drafted.begin(), s.drafted.end());
        v = verify_sampling(drafts.data(), s.k, s.q.data(), probs_.data(), vocab_,
                            s.key(options_.seed), static_cast<std::int64_t>(s.tokens.size()));
      }
      outcome[2 * i] = v.accepted;
      outcome[2 * i + 1] = v.token;
    }
    agree(outcome);
    inject("sample");
    timer.end(kPhaseSample);

    // Commit: append, roll both caches back to what was accepted.
    timer.begin();
    for (std::size_t i = 0; i < active.size(); ++i) {
      Sequence& s = *active[i];
      int n = outcome[2 * i];
      int before = static_cast<int>(s.tokens.size());
      std::vector<std::int32_t> emitted(s.drafted.begin(), s.drafted.begin() + n);
      emitted.push_back(outcome[2 * i + 1]);
      append_tokens(s, emitted.data(), static_cast<int>(emitted.size()), config, options_);
      // Target cache holds the sequence before this step plus x_1..x_n; draft likewise, but it
      // never processed x_k.
      s.target_cache->truncate(before + n);
      s.draft_cache->truncate(std::min(s.draft_cache->length(), before + n));
      s.record.verify_steps += 1;
      s.record.drafted += s.k;
      s.record.accepted += n;
      for (int j = 1; j <= n; ++j) result.accepted_per_position[j - 1] += 1;
      result.steps.push_back(StepRecord{batch, step, s.prompt->index,
                                        static_cast<std::int32_t>(active.size()), s.k, n});
      if (s.finished) s.record.wall_s = seconds_since(t_batch);
    }
    timer.end(kPhaseOther);
    auto row_ms = timer.finish();
    result.timings_ms.insert(result.timings_ms.end(), row_ms.begin(), row_ms.end());
    ++result.n_steps;
  }

  finish_batch(seqs, result);
  return result;
}

}  // namespace specrun
