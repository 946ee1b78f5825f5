// The expert accounting: which experts each forward pass of a mixture-of-experts model read.
// From one pass's routing (model/expert_routing.h: every token's top-k experts in every MoE
// layer) and the pass's tokens by sequence, per MoE layer: the unique experts of the pass (the
// batch's, and each sequence's), the (token, expert) pairs, the most tokens on one expert, the
// expert bytes read (unique experts x one expert's bytes) and, per expert-parallel rank, the pairs
// its experts computed. A verify pass computes every node of its proposal, rejected ones
// included, and reads their experts too: the counts cover every token computed and, apart, the
// tokens kept (the uncommitted tokens and the accepted path).
//
// The records (io/records.h ExpertRecords) go into the result file per pass (schema 7,
// docs/file-formats.md); `report` and `compare` derive per pass kind the unique experts per
// layer and the expert bytes per step and per emitted token (analysis/summary.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/records.h"
#include "model/expert_routing.h"
#include "model/routing_observer.h"

namespace specrun {

// One pass's tokens by sequence: tokens_per_sequence[i] consecutive tokens of the routing (batch
// order, one entry per SeqChunk) are sequence i's. kept: one entry per token, 1 when the token
// stays in its sequence after the pass (a verify's rejected nodes: 0); empty: every token.
struct PassTokens {
  std::span<const int> tokens_per_sequence;
  std::span<const std::uint8_t> kept;
};

// One pass's counts, per MoE layer l (the index into ExpertRouting::layers). Reused from pass
// to pass, it allocates only when a pass is larger than every one before.
struct PassExpertCounts {
  int layers = 0, ep = 1, sequences = 0;
  int tokens = 0, kept_tokens = 0;
  std::vector<std::int32_t> unique, pairs, max_load, kept_unique, kept_pairs;  // [layers]
  std::vector<std::int32_t> rank_pairs;                                        // [layers x ep]
  std::vector<std::int32_t> seq_tokens, seq_kept_tokens;                       // [sequences]
  std::vector<std::int32_t> seq_unique, seq_kept_unique;  // [sequences x layers]

  // Scratch: per expert, its tokens (all and kept) in the layer being counted, and the last
  // sequence that touched it (all and kept).
  std::vector<std::int32_t> load_, kept_load_;
  std::vector<std::int64_t> seen_, kept_seen_;
  std::int64_t epoch_ = 0;
};

// Counts the experts of one pass into `out`. Throws (an internal error: the model gave a routing
// that does not describe the pass) when the tokens do not add up to routing.n_tokens, `kept` has
// another length, the shape is impossible (top_k outside [1, n_experts], ep not dividing
// n_experts) or an expert id lies outside [0, n_experts) or repeats within a token's top-k.
void count_experts(const ExpertRouting& routing, const PassTokens& tokens, PassExpertCounts& out);

// Appends one verify sequence's kept flags to `kept`: its `uncommitted` tokens (kept), then its
// proposal's `nodes` nodes, kept when on `accepted_path` (node indices; the rest were rejected).
// Throws when a path node lies outside the proposal.
void append_verify_kept(int uncommitted, int nodes, std::span<const int> accepted_path,
                        std::vector<std::uint8_t>& kept);

// Appends `counts` as one pass to `records`: the pass's batch, step, kind and its sequences'
// prompt indices (one per sequence, -1 where unknown). The first pass fixes the records' shape
// (routing's top_k, n_experts, ep, expert_bytes, layers); a pass of another shape throws.
void append_pass(ExpertRecords& records, const ExpertRouting& routing,
                 const PassExpertCounts& counts, std::int64_t batch, std::int32_t step,
                 PassKind kind, std::span<const std::int64_t> prompt_index);

// Room in `records` for `passes` more passes of `sequences` sequences each in `routing`'s shape,
// so that recording them allocates nothing (the decoder reserves a batch's worth at its prefill).
void reserve_passes(ExpertRecords& records, const ExpertRouting& routing, std::size_t passes,
                    std::size_t sequences);

// A mixture-of-experts draft model's passes, recorded apart from the target's: the drafter
// registry wraps the draft model (model/routing_observer.h observe_routing) with this as its
// observer, the decoder says before each call into the drafter which kind of pass it makes
// (begin), and takes the batch's records at its end (take). A dense draft model records nothing.
class DraftExpertLog final : public RoutingObserver {
 public:
  // The passes from now on belong to `batch`, `step` (-1: begin_batch) and are of `kind`.
  void begin(std::int64_t batch, std::int32_t step, PassKind kind);
  // Reserves room for `passes` passes of up to `sequences` sequences at the first pass of a batch
  // (the decoder says how many a batch may take).
  void plan(std::size_t passes, std::size_t sequences);
  void observe(std::span<const SeqChunk> batch, const ExpertRouting& routing) override;
  // The batch's records, moved into `out` (which is cleared first); the log keeps its capacity
  // only if `out` gives its own back, so the decoder swaps.
  void take(ExpertRecords& out);

 private:
  ExpertRecords records_;
  PassExpertCounts counts_;
  std::vector<int> tokens_;
  std::vector<std::int64_t> prompt_index_;
  std::int64_t batch_ = 0;
  std::int32_t step_ = -1;
  PassKind kind_ = kPassDraftPrefill;
  std::size_t plan_passes_ = 0, plan_sequences_ = 0;
};

}  // namespace specrun
