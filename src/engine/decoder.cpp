#include "engine/decoder.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/activity.h"
#include "common/error.h"
#include "engine/step_timer.h"
#include "engine/stop_tokens.h"
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

void check_prompt_lengths(const PromptReader& prompts, std::int64_t n, const ModelConfig& config,
                          int max_new_tokens) {
  const auto [longest, at] = prompts.longest(n);
  SPEC_INPUT_CHECK(longest + max_new_tokens <= config.max_position_embeddings,
                   prompts.path() << ": prompt " << at << " has " << longest
                                  << " tokens; with decode.max_new_tokens = " << max_new_tokens
                                  << " it needs " << longest + max_new_tokens
                                  << " positions but the model's context is "
                                  << config.max_position_embeddings
                                  << ": lower decode.max_new_tokens or drop the prompt");
}

void check_all_prompts(const PromptReader& prompts, std::int64_t n, const ModelConfig& config,
                       int max_new_tokens) {
  check_prompt_lengths(prompts, n, config, max_new_tokens);  // before any token is read
  const std::int64_t window = 4096;
  for (std::int64_t first = 0; first < n; first += window) {
    for (const Prompt& p : prompts.read(first, std::min(window, n - first))) {
      try {
        check_prompt_fits(p, config, max_new_tokens);
      } catch (const Error& e) {
        SPEC_INPUT_FAIL(prompts.path() << ": " << e.message());
      }
    }
  }
}

namespace {

// What the step records about a proposal: its deepest path, and whether the accepted path ends
// at a leaf (so the emitted token is the bonus sample rather than a correction).
struct ProposalShape {
  std::int32_t depth = 0;
  std::int8_t bonus = 0;
};

// `depth`: scratch (each node's depth).
ProposalShape shape_of(const DraftTree& tree, const TreeVerdict& v,
                       std::vector<std::int32_t>& depth) {
  ProposalShape out;
  if (tree.size() == 0) return out;
  // Parents precede children, so one pass gives every node's depth.
  depth.assign(tree.size(), 1);
  for (int i = 0; i < tree.size(); ++i) {
    if (tree.parents[i] >= 0) depth[i] = depth[tree.parents[i]] + 1;
    out.depth = std::max(out.depth, depth[i]);
  }
  const int last = v.accepted > 0 ? v.path[v.accepted - 1] : -1;
  out.bonus = 1;
  for (int i = 0; i < tree.size(); ++i)
    if (tree.parents[i] == last) out.bonus = 0;
  return out;
}

}  // namespace

BatchDecoder::BatchDecoder(LanguageModel& target, Drafter* drafter, TokenOps& ops,
                           Communicator& tp_comm, const DecodeOptions& options,
                           DeviceTimeline* device, DraftExpertLog* draft_experts)
    : target_(target),
      drafter_(drafter),
      ops_(ops),
      tp_comm_(tp_comm),
      options_(options),
      device_log_(device),
      draft_experts_(draft_experts) {
  SPEC_CHECK(options_.max_new_tokens >= 1, "max_new_tokens must be at least 1");
  SPEC_CHECK(ops.backend() == target.backend(), "token ops of another backend than the target's");
}

BatchDecoder::~BatchDecoder() = default;

void BatchDecoder::inject(const char* phase) {
  if (options_.inject_delay_ms <= 0 || options_.inject_phase != phase) return;
  // Busy, as slower code is: the time is on the CPU (a sleep would look like the host's doing).
  const SteadyClockPoint until =
      SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double, std::milli>(options_.inject_delay_ms));
  while (SteadyClock::now() < until) {
  }
}

void BatchDecoder::agree(std::vector<std::int32_t>& values) {
  if (tp_comm_.size() > 1)
    tp_comm_.broadcast(values.data(), values.size() * sizeof(std::int32_t), 0);
}

int BatchDecoder::append_tokens(Sequence& s, const std::int32_t* emitted, int count) {
  int appended = 0;
  for (int i = 0; i < count && !s.finished; ++i, ++appended) {
    s.tokens.push_back(emitted[i]);
    if (options_.stop_at_eos &&
        (target_.config().is_eos(emitted[i]) || is_extra_stop(options_, emitted[i]))) {
      s.finished = true;
      s.record.finish_reason = kFinishEos;
    } else if (s.generated() >= options_.max_new_tokens) {
      s.finished = true;
      s.record.finish_reason = kFinishLength;
    }
  }
  if (s.finished) s.record.wall_s = seconds_since(t_batch_);
  return appended;
}

BatchResult BatchDecoder::run(const std::string& mode, std::int64_t batch,
                              const std::vector<Prompt>& prompts) {
  const bool speculative = mode == kModeSpeculative;
  SPEC_CHECK(speculative || mode == kModeBaseline, "unknown decoding mode '" << mode << "'");
  SPEC_INPUT_CHECK(!speculative || drafter_ != nullptr,
                   "decode.modes includes \"speculative\" but the job has no drafter "
                   "(draft.kind = \"none\")");
  t_batch_ = SteadyClock::now();
  wait_clock_.refresh();  // threads may have come and gone since the last batch
  start_batch(prompts);
  BatchResult result;
  result.batch = batch;
  result.n_ranks = 1;
  if (speculative) result.accepted_per_position.assign(options_.shape.max_depth(), 0);
  // Records for the most steps the batch can take (one token each), so that no step allocates.
  const std::size_t max_steps = static_cast<std::size_t>(options_.max_new_tokens);
  result.steps.reserve(max_steps * prompts.size());
  result.timings_ms.reserve(max_steps * kNumPhases);
  result.cpu_ms.reserve(max_steps * kNumCpuColumns);
  if (device_log_.on()) {
    if (device_log_.pending()) {  // an earlier batch's, cut short by an error
      std::vector<float> stale, stale_passes;
      device_log_.resolve(stale, stale_passes);
    }
    result.device_ms.reserve(max_steps * kNumDeviceColumns);
    result.device_passes.reserve(max_steps * kNumPassColumns);
    device_log_.reserve(max_steps, 5);  // a speculative step's phase starts
  }
  // The first token is the target's, exactly as in baseline mode (with the prompts' features
  // when the drafter wants them).
  const std::span<const int> capture =
      speculative ? drafter_->target_capture() : std::span<const int>{};
  set_activity("prefill");
  const RowsView hidden = first_tokens(capture);
  record_target_pass(batch, -1, kPassPrefill, {}, result);
  if (speculative && draft_experts_ != nullptr) {
    // A draft model's passes: its prefill, then per step at most a pass per proposal level, one
    // to catch up before proposing and one when told the verdicts.
    draft_experts_->plan(max_steps * static_cast<std::size_t>(options_.shape.max_depth() + 2) + 1,
                         prompts.size());
    draft_pass(batch, -1, kPassDraftPrefill);
  }
  if (speculative) {
    std::vector<DraftSequence> view(seqs_.size());
    std::vector<SeqFeatures> features(seqs_.size());
    std::vector<int> rows;
    for (std::size_t i = 0; i < seqs_.size(); ++i) {
      const Sequence& s = seqs_[i];
      view[i] = DraftSequence{&s.tokens, s.prompt_len, capacity_of(s), s.key(options_.seed)};
      for (int p = 0; p < s.prompt_len; ++p) rows.push_back(static_cast<int>(rows.size()));
    }
    for (std::size_t i = 0, at = 0; i < seqs_.size(); at += seqs_[i].prompt_len, ++i)
      features[i] = SeqFeatures{0, std::span<const int>(rows.data() + at, seqs_[i].prompt_len)};
    const TargetFeatures prefill{hidden, features};
    drafter_->begin_batch(view, capture.empty() ? nullptr : &prefill);
  }
  set_activity(nullptr);
  for (std::int32_t step = 0; collect_active(); ++step) {
    if (speculative)
      speculative_step(batch, step, result);
    else
      baseline_step(batch, step, result);
    ++result.n_steps;
  }
  if (speculative) drafter_->end_batch();
  if (speculative && draft_experts_ != nullptr) draft_experts_->take(result.draft_experts);
  // The batch's one wait for the device rows (the last step's work may still be running).
  if (device_log_.on()) device_log_.resolve(result.device_ms, result.device_passes);
  finish_batch(result);
  return result;
}

void BatchDecoder::start_batch(const std::vector<Prompt>& prompts) {
  const ModelConfig& config = target_.config();
  seqs_.clear();
  seqs_.resize(prompts.size());
  const std::size_t room = static_cast<std::size_t>(options_.max_new_tokens);  // append_tokens'
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    check_prompt_fits(prompts[i], config, options_.max_new_tokens);
    Sequence& s = seqs_[i];
    s.prompt = &prompts[i];
    s.tokens.reserve(prompts[i].tokens.size() + room);
    s.tokens = prompts[i].tokens;
    s.prompt_len = static_cast<int>(s.tokens.size());
    s.cache = target_.new_cache(capacity_of(s));
  }
  // Scratch for the largest step this batch can take.
  const std::size_t B = prompts.size(), k = static_cast<std::size_t>(options_.shape.max_nodes());
  active_.reserve(B);
  chunks_.reserve(B);
  decided_.reserve(2 * B);
  verify_tokens_.reserve(B * (k + 2));
  expert_kept_.reserve(B * (k + 2));
  trees_.resize(std::max(trees_.size(), B));
}

RowsView BatchDecoder::first_tokens(std::span<const int> capture) {
  collect_active();  // every sequence
  chunks_.clear();
  for (Sequence& s : seqs_)
    chunks_.push_back(SeqChunk{s.cache.get(), s.tokens.data(), static_cast<int>(s.tokens.size())});
  const ForwardResult fwd = target_.forward(chunks_, ForwardRequest{false, capture});
  decide_next(fwd.logits);
  for (std::size_t r = 0; r < active_.size(); ++r)
    append_tokens(seqs_[active_[r]], &decided_[r], 1);
  return fwd.hidden;
}

int BatchDecoder::capacity_of(const Sequence& s) const {
  // A verify pass appends a whole proposal before the accepted path is kept.
  return s.prompt_len + options_.max_new_tokens + options_.shape.max_nodes();
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
  StepTimer timer(tp_comm_, &wait_clock_, &device_log_);
  const std::size_t n = active_.size();

  timer.begin(kPhaseVerify);
  chunks_.clear();
  for (int i : active_)
    chunks_.push_back(SeqChunk{seqs_[i].cache.get(), &seqs_[i].tokens.back(), 1});
  const ForwardResult fwd = target_.forward(chunks_, ForwardRequest{});
  inject("verify");
  timer.end();

  timer.begin(kPhaseSample);
  decide_next(fwd.logits);
  inject("sample");
  timer.end();

  timer.begin(kPhaseOther);
  record_target_pass(batch, step, kPassDecode, {}, result);
  for (std::size_t r = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    const int emitted = append_tokens(s, &decided_[r], 1);
    s.record.verify_steps += 1;
    result.steps.push_back(StepRecord{batch, step, s.prompt->index, static_cast<std::int32_t>(n), 0,
                                      0, 0, 0, emitted});
  }
  timer.end();
  timer.finish(result.timings_ms, result.cpu_ms);
}

void BatchDecoder::speculative_step(std::int64_t batch, std::int32_t step, BatchResult& result) {
  StepTimer timer(tp_comm_, &wait_clock_, &device_log_);
  const std::size_t n = active_.size();

  // Draft: a tree (a chain when tree_top_k is 1) per sequence, fewer nodes near the end.
  timer.begin(kPhaseDraft);
  limits_.resize(n);
  for (std::size_t r = 0; r < n; ++r)
    limits_[r] = options_.shape.limit(options_.max_new_tokens - seqs_[active_[r]].generated() - 1);
  std::span<DraftTree> trees(trees_.data(), n);
  draft_pass(batch, step, kPassPropose);
  drafter_->propose(active_, limits_, trees);
  check_proposals(trees);
  agree_proposals(trees);
  inject("draft");
  timer.end();

  timer.begin(kPhaseVerify);
  const ForwardResult fwd = verify_forward(trees);
  inject("verify");
  timer.end();

  timer.begin(kPhaseSample);
  decide_verdicts(fwd.logits, trees);
  inject("sample");
  timer.end();

  timer.begin(kPhaseOther);
  record_target_pass(batch, step, kPassVerify, trees, result);
  commit(batch, step, trees, fwd.hidden, result);
  timer.end();

  // The drafter's share of the step after the verdicts (EAGLE-3 extends its head over the
  // accepted positions) is drafting work.
  timer.begin(kPhaseDraft);
  draft_pass(batch, step, kPassAccepted);
  tell_drafter(fwd.hidden);
  timer.end();
  timer.finish(result.timings_ms, result.cpu_ms);
}

void BatchDecoder::check_proposals(std::span<const DraftTree> trees) const {
  for (std::size_t r = 0; r < trees.size(); ++r) {
    const DraftTree& tree = trees[r];
    SPEC_CHECK(tree.size() <= limits_[r].nodes,
               "the drafter proposed " << tree.size() << " tokens for prompt "
                                       << seqs_[active_[r]].prompt->index << ", at most "
                                       << limits_[r].nodes << " were asked for");
    check_tree(TreeView{tree.tokens.data(), tree.parents.data(), tree.size()}, limits_[r].depth,
               "the drafter");
  }
}

// Every rank verifies tp rank 0's proposals (drafter.h): they are broadcast in one message of
// fixed width per sequence (size, q_row, tokens, parents), which replaces the other ranks' own.
void BatchDecoder::agree_proposals(std::span<DraftTree> trees) {
  if (tp_comm_.size() <= 1) return;
  const std::size_t n = trees.size(), most = static_cast<std::size_t>(options_.shape.max_nodes());
  const std::size_t width = 2 + 2 * most;
  proposals_.resize(n * width);
  if (tp_comm_.rank() == 0) {
    for (std::size_t r = 0; r < n; ++r) {
      const DraftTree& tree = trees[r];  // check_proposals: at most limits_[r].nodes <= most
      std::int32_t* w = &proposals_[r * width];
      w[0] = tree.size();
      w[1] = tree.q_row;
      std::copy(tree.tokens.begin(), tree.tokens.end(), w + 2);
      std::copy(tree.parents.begin(), tree.parents.end(), w + 2 + most);
    }
  }
  agree(proposals_);
  for (std::size_t r = 0; r < n; ++r) {
    const std::int32_t* w = &proposals_[r * width];
    DraftTree& tree = trees[r];
    tree.tokens.assign(w + 2, w + 2 + w[0]);
    tree.parents.assign(w + 2 + most, w + 2 + most + w[0]);
    tree.q_row = w[1];
  }
}

// The target scores each sequence's uncommitted tokens and its proposal in one pass: a chain of
// the uncommitted tokens (the last is the tree's root), then the nodes with their parents'
// slots (tree attention, kv_cache.h).
ForwardResult BatchDecoder::verify_forward(std::span<const DraftTree> trees) {
  const std::size_t n = active_.size();
  verify_tokens_.clear();
  verify_parents_.clear();
  to_verify_.resize(n);
  verify_start_.resize(n);
  int row = 0;
  for (std::size_t r = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    const DraftTree& tree = trees[r];
    const int start = s.cache->length();
    const int uncommitted = static_cast<int>(s.tokens.size()) - start;
    const int root_slot = start + uncommitted - 1;
    verify_start_[r] = start;
    verify_tokens_.insert(verify_tokens_.end(), s.tokens.begin() + start, s.tokens.end());
    verify_parents_.insert(verify_parents_.end(), uncommitted, kChainParent);
    verify_tokens_.insert(verify_tokens_.end(), tree.tokens.begin(), tree.tokens.end());
    if (tree.is_chain()) {
      // A chain needs no tree mask: plain causal attention over consecutive slots.
      verify_parents_.insert(verify_parents_.end(), tree.size(), kChainParent);
    } else {
      for (int i = 0; i < tree.size(); ++i)
        verify_parents_.push_back(tree.parents[i] < 0 ? root_slot
                                                      : root_slot + 1 + tree.parents[i]);
    }
    TreeToVerify& v = to_verify_[r];
    v.tree = TreeView{tree.tokens.data(), tree.parents.data(), tree.size()};
    v.root_row = row + uncommitted - 1;
    v.key = s.key(options_.seed);
    v.first_position = static_cast<std::int64_t>(s.tokens.size());
    row += uncommitted + tree.size();
  }
  chunks_.clear();
  for (std::size_t r = 0, at = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    const int fed = static_cast<int>(s.tokens.size()) - s.cache->length() + trees[r].size();
    chunks_.push_back(
        SeqChunk{s.cache.get(), verify_tokens_.data() + at, fed, verify_parents_.data() + at});
    at += fed;
  }
  return target_.forward(chunks_, ForwardRequest{true, drafter_->target_capture()});
}

// Verification on the backend, then rank 0's verdicts broadcast: per sequence the accepted
// count, the token after them and the accepted path.
void BatchDecoder::decide_verdicts(const RowsView& logits, std::span<const DraftTree> trees) {
  const std::size_t n = active_.size();
  verdicts_.resize(n);
  // A sampled chain with its draft distributions kept: rejection sampling with q; any other
  // proposal under sampling: the target-only tree rule; greedy: the longest matching path.
  const bool with_q = !options_.sampling.greedy() && n > 0 && trees[0].q_row >= 0;
  if (options_.sampling.greedy()) {
    ops_.verify_tree_greedy(logits, to_verify_, verdicts_);
  } else if (!with_q) {
    ops_.verify_tree_sampling(logits, options_.sampling, to_verify_, verdicts_);
  } else {
    chains_.resize(n);
    for (std::size_t r = 0; r < n; ++r) {
      SPEC_CHECK(trees[r].q_row >= 0 && trees[r].is_chain(),
                 "a proposal with draft distributions must be a chain");
      chains_[r] = ChainToVerify{trees[r].tokens, to_verify_[r].root_row, trees[r].q_row,
                                 to_verify_[r].key, to_verify_[r].first_position};
    }
    chain_results_.resize(n);
    ops_.verify_sampling(logits, options_.sampling, chains_, chain_results_);
    for (std::size_t r = 0; r < n; ++r) {
      verdicts_[r].accepted = chain_results_[r].accepted;
      verdicts_[r].token = chain_results_[r].token;
      for (int j = 0; j < chain_results_[r].accepted; ++j) verdicts_[r].path[j] = j;
    }
  }
  if (options_.acceptance.synthetic()) apply_synthetic_acceptance(trees);
  if (tp_comm_.size() > 1) {
    constexpr std::size_t kWords = 2 + kMaxTreeDepth;
    decided_.resize(kWords * n);
    for (std::size_t r = 0; r < n; ++r) {
      decided_[kWords * r] = verdicts_[r].accepted;
      decided_[kWords * r + 1] = verdicts_[r].token;
      std::copy(verdicts_[r].path.begin(), verdicts_[r].path.end(), &decided_[kWords * r + 2]);
    }
    agree(decided_);
    for (std::size_t r = 0; r < n; ++r) {
      verdicts_[r].accepted = decided_[kWords * r];
      verdicts_[r].token = decided_[kWords * r + 1];
      std::copy(&decided_[kWords * r + 2], &decided_[kWords * r + 2] + kMaxTreeDepth,
                verdicts_[r].path.begin());
    }
  }
}

// decode.acceptance: the rule decides how many drafted tokens each proposal keeps, along the
// first child of each node; the token after them is the next drafted one on that path (or the
// verifier's when the path ends there).
void BatchDecoder::apply_synthetic_acceptance(std::span<const DraftTree> trees) {
  for (std::size_t r = 0; r < active_.size(); ++r) {
    const DraftTree& tree = trees[r];
    const TreeToVerify& v = to_verify_[r];
    std::array<int, kMaxTreeDepth + 1> path{};
    int depth = 0, node = -1;
    while (depth < kMaxTreeDepth) {
      int child = -1;
      for (int i = 0; i < tree.size() && child < 0; ++i)
        if (tree.parents[i] == node) child = i;
      if (child < 0) break;
      path[depth++] = child;
      node = child;
    }
    const int accepted = synthetic_accepted(options_.acceptance, v.key, v.first_position, depth);
    TreeVerdict& verdict = verdicts_[r];
    verdict.accepted = accepted;
    for (int j = 0; j < accepted; ++j) verdict.path[j] = path[j];
    if (accepted < depth) verdict.token = tree.tokens[path[accepted]];
  }
}

// Append the accepted path and the token after it, keep the path's keys and values in the
// target cache (consecutive slots after the uncommitted tokens), gather the rows of the target's
// features the drafter gets (tell_drafter), record the step.
void BatchDecoder::commit(std::int64_t batch, std::int32_t step, std::span<const DraftTree> trees,
                          const RowsView& hidden, BatchResult& result) {
  const std::size_t n = active_.size();
  features_.resize(n);
  feature_rows_.clear();
  for (std::size_t r = 0; r < n; ++r) {
    Sequence& s = seqs_[active_[r]];
    const DraftTree& tree = trees[r];
    const TreeVerdict& v = verdicts_[r];
    // The cache before the verify pass appended the uncommitted tokens and the proposal.
    const int start = verify_start_[r];
    const int first_node = static_cast<int>(s.tokens.size()) - start;  // uncommitted count
    // Features: the uncommitted tokens' rows, then the accepted nodes' rows.
    // (positions start.., the span filled in once feature_rows_ has stopped growing)
    const int root_row = to_verify_[r].root_row;
    for (int i = 0; i < first_node; ++i) feature_rows_.push_back(root_row - first_node + 1 + i);
    for (int j = 0; j < v.accepted; ++j) feature_rows_.push_back(root_row + 1 + v.path[j]);
    features_[r].first_position = start;
    features_[r].rows = std::span<const int>(feature_rows_.data(), first_node + v.accepted);
    emitted_.clear();
    path_rows_.clear();
    for (int j = 0; j < v.accepted; ++j) {
      emitted_.push_back(tree.tokens[v.path[j]]);
      path_rows_.push_back(v.path[j]);
    }
    emitted_.push_back(v.token);
    const int appended = append_tokens(s, emitted_.data(), static_cast<int>(emitted_.size()));
    target_.keep(*s.cache, start + first_node, path_rows_);
    s.record.verify_steps += 1;
    s.record.drafted += tree.size();
    s.record.accepted += v.accepted;
    for (int j = 1; j <= v.accepted; ++j) result.accepted_per_position[j - 1] += 1;
    const ProposalShape shape = shape_of(tree, v, node_depth_);
    result.steps.push_back(StepRecord{batch, step, s.prompt->index, static_cast<std::int32_t>(n),
                                      tree.size(), v.accepted, shape.depth, shape.bonus, appended});
  }
}

// The verdicts (and, when the drafter asked for them, the target's features of the uncommitted
// tokens and the accepted path) to the drafter.
void BatchDecoder::tell_drafter(const RowsView& hidden) {
  if (hidden.width == 0) {
    drafter_->accepted(active_, verdicts_, nullptr);
    return;
  }
  for (std::size_t r = 0, at = 0; r < active_.size(); ++r) {
    features_[r].rows = std::span<const int>(feature_rows_.data() + at, features_[r].rows.size());
    at += features_[r].rows.size();
  }
  const TargetFeatures f{hidden, features_};
  drafter_->accepted(active_, verdicts_, &f);
}

void BatchDecoder::record_target_pass(std::int64_t batch, std::int32_t step, PassKind kind,
                                      std::span<const DraftTree> trees, BatchResult& result) {
  const ExpertRouting* routing = target_.routing();
  if (routing == nullptr || routing->layers.empty()) return;  // dense (or no MoE layer)
  if (result.target_experts.empty())  // the prefill: room for every step of the batch
    reserve_passes(result.target_experts, *routing,
                   static_cast<std::size_t>(options_.max_new_tokens) + 1, seqs_.size());
  const std::size_t n = chunks_.size();
  expert_tokens_.resize(n);
  expert_prompts_.resize(n);
  expert_kept_.clear();
  for (std::size_t r = 0; r < n; ++r) {
    expert_tokens_[r] = chunks_[r].n_tokens;
    expert_prompts_[r] = seqs_[active_[r]].prompt->index;
    if (kind != kPassVerify) continue;
    // The uncommitted tokens stay; of the proposal's nodes, those on the accepted path.
    const int nodes = trees[r].size();
    const TreeVerdict& v = verdicts_[r];
    append_verify_kept(chunks_[r].n_tokens - nodes, nodes,
                       std::span<const int>(v.path.data(), static_cast<std::size_t>(v.accepted)),
                       expert_kept_);
  }
  count_experts(*routing, PassTokens{expert_tokens_, expert_kept_}, expert_counts_);
  append_pass(result.target_experts, *routing, expert_counts_, batch, step, kind, expert_prompts_);
}

void BatchDecoder::draft_pass(std::int64_t batch, std::int32_t step, PassKind kind) {
  if (draft_experts_ != nullptr) draft_experts_->begin(batch, step, kind);
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
