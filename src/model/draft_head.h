// A draft head, as the drafters that use one (spec/head_drafter.h) see it, whatever its kind
// and backend: a small network that drafts from the target's hidden states. Unlike a
// LanguageModel it takes, per token, a hidden input besides the token: the target's captured
// features (target_capture(): its pass over committed positions, "extend") or its own output for
// the parent token (the draft steps). Each kind is its own graph (model/head_config.h says how
// one is added; EAGLE-3: model/eagle3_model.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "model/expert_routing.h"
#include "model/head_config.h"
#include "model/kv_cache.h"
#include "model/language_model.h"

namespace specrun {

class DraftHead {
 public:
  virtual ~DraftHead() = default;
  virtual HeadKind kind() const = 0;
  virtual BackendKind backend() const = 0;
  // The target layers whose hidden states the head reads (LanguageModel capture ids, in the
  // order its forward takes them as one row).
  virtual std::span<const int> target_capture() const = 0;
  // A cache for one sequence of at most `capacity` tokens. The head must outlive it.
  virtual std::unique_ptr<KvCache> new_cache(int capacity) = 0;
  // As LanguageModel::keep.
  virtual void keep(KvCache& cache, int first, std::span<const int> rows) = 0;

  // Appends every chunk's tokens (target vocabulary ids; parents as in LanguageModel: token
  // trees) with, per token t in batch order, the hidden input row rows[t] of `source`: a view of
  // the target's captured features (the layers of target_capture(), side by side) or of this
  // head's own outputs (an earlier forward's `hidden`). Returns the logits over the DRAFT
  // vocabulary (every token's, or each sequence's last) and in `hidden` every token's output
  // [n, the head's hidden size]: the next inputs. Views are valid until the next forward;
  // `source` may be the previous forward's `hidden`.
  virtual ForwardResult forward(std::span<const SeqChunk> batch, const RowsView& source,
                                std::span<const int> rows, bool all_logits) = 0;

  // The routing of the latest forward when the head has mixture-of-experts layers (an MTP
  // module's), else nullptr: the drafter's expert accounting, never the target's.
  virtual const ExpertRouting* routing() const { return nullptr; }

  // Target id of each draft id (the identity when the draft vocabulary is the target's).
  virtual std::span<const std::int32_t> draft_to_target() const = 0;
};

}  // namespace specrun
