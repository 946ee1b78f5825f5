#include "engine/dataset_generator.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "common/clock.h"
#include "common/error.h"
#include "engine/decoder.h"
#include "engine/stop_tokens.h"
#include "spec/rng.h"

namespace specrun {

StoredRange stored_range(const std::string& positions, int prompt_len, int total) {
  const int last = std::max(total - 1, 0);  // the final token is never read
  if (positions == "prompt") return {0, std::min(prompt_len - 1, last)};
  if (positions == "generated") {
    const int first = std::min(prompt_len - 1, last);
    return {first, last - first};
  }
  return {0, last};
}

struct DatasetGenerator::Slot {
  bool busy = false;
  Prompt prompt;
  std::vector<std::int32_t> tokens;
  int prompt_len = 0;
  int fed = 0;         // tokens the cache holds
  int keep_first = 0;  // rows of tokens [keep_first, keep_end) are kept
  int keep_end = 0;
  std::int8_t finish_reason = kFinishLength;
  std::unique_ptr<KvCache> cache;
  SteadyClockPoint start;
  std::vector<float> hidden, topk_probs;
  std::vector<std::int32_t> topk_ids;
};

DatasetGenerator::DatasetGenerator(LanguageModel& target, TokenOps& ops, Communicator& tp_comm,
                                   const GenerateOptions& options)
    : target_(target), ops_(ops), tp_comm_(tp_comm), options_(options) {
  SPEC_CHECK(options_.slots >= 1 && options_.max_new_tokens >= 1,
             "dataset generator: " << options_.slots << " slots, max_new_tokens "
                                   << options_.max_new_tokens);
  slots_.resize(static_cast<std::size_t>(options_.slots));
}

DatasetGenerator::~DatasetGenerator() = default;

void DatasetGenerator::start(Slot& s, Prompt&& prompt) {
  check_prompt_fits(prompt, target_.config(), options_.max_new_tokens);
  s.busy = true;
  s.prompt = std::move(prompt);
  s.tokens = s.prompt.tokens;
  s.prompt_len = static_cast<int>(s.tokens.size());
  s.fed = 0;
  // The rows kept: as stored_range says, before the final length is known.
  s.keep_first = options_.positions == "generated" ? s.prompt_len - 1 : 0;
  s.keep_end = options_.positions == "prompt" ? s.prompt_len - 1 : INT_MAX;
  s.finish_reason = kFinishLength;
  s.cache = target_.new_cache(s.prompt_len + options_.max_new_tokens);
  s.cache->set_sequence_id(s.prompt.index);
  s.start = SteadyClock::now();
  s.hidden.clear();
  s.topk_ids.clear();
  s.topk_probs.clear();
}

void DatasetGenerator::finish(Slot& s, const std::function<void(DatasetSequence&&)>& done,
                              bool keep_outputs) {
  DatasetSequence out;
  out.prompt_index = s.prompt.index;
  out.prompt_id = s.prompt.id;
  out.category = s.prompt.category;
  out.prompt_len = s.prompt_len;
  out.generated = static_cast<std::int32_t>(s.tokens.size()) - s.prompt_len;
  out.finish_reason = s.finish_reason;
  out.wall_s = seconds_since(s.start);
  const StoredRange range =
      stored_range(options_.positions, s.prompt_len, static_cast<int>(s.tokens.size()));
  out.first_row = range.first;
  out.n_rows = range.count;
  if (keep_outputs) {
    const std::size_t width = options_.capture.size() * target_.config().hidden_size;
    SPEC_CHECK(s.hidden.size() == static_cast<std::size_t>(range.count) * width,
               "dataset generator: prompt " << s.prompt.index << " kept "
                                            << s.hidden.size() / std::max<std::size_t>(width, 1)
                                            << " rows, its range has " << range.count);
    out.hidden = std::move(s.hidden);
    out.topk_ids = std::move(s.topk_ids);
    out.topk_probs = std::move(s.topk_probs);
  } else {
    // Other tp ranks: shapes only (the writer is on tp rank 0).
    out.n_rows = range.count;
  }
  out.tokens = std::move(s.tokens);
  s.busy = false;
  s.cache.reset();
  s.hidden = {};
  s.topk_ids = {};
  s.topk_probs = {};
  done(std::move(out));
}

DatasetGenerator::Stats DatasetGenerator::run(const std::function<bool(Prompt&)>& next,
                                              const std::function<void(DatasetSequence&&)>& done,
                                              const std::function<bool()>& stop,
                                              bool keep_outputs) {
  Stats stats;
  const SteadyClockPoint t0 = SteadyClock::now();
  const int H = target_.config().hidden_size;
  const std::size_t width = options_.capture.size() * static_cast<std::size_t>(H);
  const int k = options_.topk;
  bool exhausted = false;
  while (true) {
    if (stop()) break;
    // Refill: every idle slot at once (continuous), or only when all are idle (static).
    const bool any_busy =
        std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; });
    if (!exhausted && (options_.continuous || !any_busy)) {
      for (Slot& s : slots_) {
        if (s.busy) continue;
        Prompt p;
        if (!next(p)) {
          exhausted = true;
          break;
        }
        start(s, std::move(p));
      }
    }
    busy_.clear();
    chunks_.clear();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.busy) continue;
      busy_.push_back(static_cast<int>(i));
      chunks_.push_back(SeqChunk{s.cache.get(), s.tokens.data() + s.fed,
                                 static_cast<int>(s.tokens.size()) - s.fed});
    }
    if (busy_.empty()) break;

    const ForwardResult fwd = target_.forward(chunks_, ForwardRequest{k > 0, options_.capture});
    ++stats.steps;
    stats.slot_steps += static_cast<std::int64_t>(slots_.size());
    stats.busy_slot_steps += static_cast<std::int64_t>(busy_.size());

    // Rows kept, and the row of each sequence's last token (its next token's logits).
    last_rows_.clear();
    rows_.clear();
    int at = 0;
    for (std::size_t c = 0; c < busy_.size(); ++c) {
      Slot& s = slots_[busy_[c]];
      const int n = chunks_[c].n_tokens;
      last_rows_.push_back(k > 0 ? at + n - 1 : static_cast<int>(c));
      const int lo = std::max(s.fed, s.keep_first), hi = std::min(s.fed + n, s.keep_end);
      if (keep_outputs && hi > lo) {
        const std::size_t have = s.hidden.size();
        s.hidden.resize(have + static_cast<std::size_t>(hi - lo) * width);
        if (width > 0) target_.read(fwd.hidden, at + (lo - s.fed), hi - lo, s.hidden.data() + have);
        for (int r = lo; r < hi; ++r) rows_.push_back(at + (r - s.fed));
      }
      at += n;
    }
    if (keep_outputs && k > 0 && !rows_.empty()) {
      topk_ids_.resize(rows_.size() * k);
      topk_lp_.resize(topk_ids_.size());
      ops_.top_k(fwd.logits, rows_, k, topk_ids_, topk_lp_);
      std::size_t done_rows = 0;
      for (std::size_t c = 0; c < busy_.size(); ++c) {
        Slot& s = slots_[busy_[c]];
        const int n = chunks_[c].n_tokens;
        const int lo = std::max(s.fed, s.keep_first), hi = std::min(s.fed + n, s.keep_end);
        if (hi <= lo) continue;
        const std::size_t from = done_rows * k, count = static_cast<std::size_t>(hi - lo) * k;
        s.topk_ids.insert(s.topk_ids.end(), topk_ids_.begin() + from,
                          topk_ids_.begin() + from + count);
        for (std::size_t i = from; i < from + count; ++i)
          s.topk_probs.push_back(std::exp(topk_lp_[i]));
        done_rows += static_cast<std::size_t>(hi - lo);
      }
    }

    // The next token of every busy sequence, agreed through tp rank 0.
    decided_.resize(busy_.size());
    if (options_.sampling.greedy()) {
      ops_.argmax(fwd.logits, last_rows_, decided_);
    } else {
      u_.resize(busy_.size());
      for (std::size_t c = 0; c < busy_.size(); ++c) {
        const Slot& s = slots_[busy_[c]];
        u_[c] = SeqRandKey{options_.seed, static_cast<std::uint64_t>(s.prompt.index)}.uniform(
            static_cast<std::int64_t>(s.tokens.size()), RandPurpose::kTargetSample);
      }
      ops_.sample(fwd.logits, last_rows_, options_.sampling, u_, decided_);
    }
    if (tp_comm_.size() > 1)
      tp_comm_.broadcast(decided_.data(), decided_.size() * sizeof(std::int32_t), 0);
    for (std::size_t c = 0; c < busy_.size(); ++c) {
      Slot& s = slots_[busy_[c]];
      s.fed += chunks_[c].n_tokens;
      s.tokens.push_back(decided_[c]);
      const int generated = static_cast<int>(s.tokens.size()) - s.prompt_len;
      bool over = false;
      if (options_.stop_at_eos &&
          (target_.config().is_eos(decided_[c]) || is_extra_stop(options_, decided_[c]))) {
        s.finish_reason = kFinishEos;
        over = true;
      } else if (generated >= options_.max_new_tokens) {
        s.finish_reason = kFinishLength;
        over = true;
      }
      if (over) {
        ++stats.sequences;
        stats.generated += generated;
        finish(s, done, keep_outputs);
      }
    }
  }
  stats.seconds = seconds_since(t0);
  return stats;
}

}  // namespace specrun
