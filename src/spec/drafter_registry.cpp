#include "spec/drafter_registry.h"

#include <string>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "spec/model_drafter.h"

namespace specrun {
namespace {

// ---- none: baseline only -------------------------------------------------------------------

void validate_none(const JobConfig& c) {
  SPEC_INPUT_CHECK(!c.uses_mode("speculative"),
                   "decode.modes includes \"speculative\" ("
                       << c.origin("decode.modes") << ") but draft.kind = \"none\" ("
                       << c.origin("draft.kind")
                       << "): set draft.kind = \"model\" with a draft.path, or use "
                          "decode.modes = [\"baseline\"]");
}

std::unique_ptr<Drafter> make_none(const JobConfig&, DrafterContext&) {
  return nullptr;
}

// ---- model: a small causal LM of the target's vocabulary -----------------------------------

void validate_model(const JobConfig& c) {
  if (!c.uses_mode("speculative")) return;
  SPEC_INPUT_CHECK(!c.draft.path.empty(),
                   "draft.path is not set but decode.modes includes \"speculative\" ("
                       << c.origin("decode.modes")
                       << "): give the draft model directory under [draft] or with --set "
                          "draft.path=DIR");
}

std::unique_ptr<Drafter> make_model(const JobConfig& c, DrafterContext& ctx) {
  const bool sharded = c.draft.placement == "sharded";
  Checkpoint checkpoint(c.draft.path.resolved);
  return std::make_unique<ModelDrafter>(
      ctx.factory.load(checkpoint, sharded), ctx.target.config().vocab_size, ctx.ops,
      sharded ? &ctx.tp_comm : nullptr, ctx.sampling, ctx.max_draft);
}

constexpr DrafterKind kKinds[] = {
    {"model",
     "a small causal LM of the target's vocabulary drafts a chain (draft.path, "
     "draft.placement)",
     validate_model, make_model},
    {"none", "no drafter: baseline mode only", validate_none, make_none},
};

const DrafterKind& kind_of(const JobConfig& c) {
  for (const DrafterKind& k : kKinds)
    if (k.name == c.draft.kind) return k;
  std::string names;
  for (const DrafterKind& k : kKinds) names += (names.empty() ? "" : ", ") + std::string(k.name);
  SPEC_INPUT_FAIL("draft.kind = \"" << c.draft.kind << "\" (" << c.origin("draft.kind")
                                    << ") is not a drafter: choose one of " << names);
}

}  // namespace

std::span<const DrafterKind> drafter_kinds() {
  return kKinds;
}

void validate_drafter_config(const JobConfig& config) {
  kind_of(config).validate(config);
}

std::unique_ptr<Drafter> make_drafter(const JobConfig& config, DrafterContext& context) {
  return kind_of(config).make(config, context);
}

}  // namespace specrun
