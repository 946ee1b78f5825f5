// A draft head: a small network that drafts from the target's hidden states (EAGLE-3), as the
// EAGLE3 drafter (spec/eagle3_drafter.h) sees it, whatever its backend. Unlike a LanguageModel
// it takes, per token, a hidden input besides the token: the target's captured features (its
// first pass over committed positions, "extend") or its own output for the parent token (the
// draft steps).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "model/eagle3_config.h"
#include "model/kv_cache.h"
#include "model/language_model.h"

namespace specrun {

class DraftHead {
 public:
  virtual ~DraftHead() = default;
  virtual const Eagle3Config& config() const = 0;
  virtual BackendKind backend() const = 0;
  // A cache for one sequence of at most `capacity` tokens. The head must outlive it.
  virtual std::unique_ptr<KvCache> new_cache(int capacity) = 0;
  // As LanguageModel::keep.
  virtual void keep(KvCache& cache, int first, std::span<const int> rows) = 0;

  // Appends every chunk's tokens (target vocabulary ids, embedded with the target's table; parents
  // as in LanguageModel: token trees) with, per token t in batch order, the hidden input row
  // rows[t] of `source`: a view of width 3 x the target's hidden size (the target's captured
  // features, projected by fc) or of the head's hidden size (an output of this head, fc
  // skipped). Returns the logits over the DRAFT vocabulary (every token's, or each sequence's
  // last) and in `hidden` every token's output [n, hidden]: the next inputs. Views are valid
  // until the next forward; `source` may be the previous forward's `hidden`.
  virtual ForwardResult forward(std::span<const SeqChunk> batch, const RowsView& source,
                                std::span<const int> rows, bool all_logits) = 0;

  // Target id of each draft id (d2t: target = draft + d2t[draft]; the identity when the draft
  // vocabulary is the target's).
  virtual std::span<const std::int32_t> draft_to_target() const = 0;
};

}  // namespace specrun
