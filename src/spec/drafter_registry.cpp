#include "spec/drafter_registry.h"

#include <string>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/head_config.h"
#include "model/model_factory.h"
#include "spec/head_drafter.h"
#include "spec/model_drafter.h"
#include "spec/ngram_drafter.h"
#include "spec/synthetic_acceptance.h"

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
  std::shared_ptr<LanguageModel> draft = ctx.factory.load(checkpoint, sharded);
  if (ctx.draft_routing != nullptr) draft = observe_routing(std::move(draft), *ctx.draft_routing);
  return std::make_unique<ModelDrafter>(std::move(draft), ctx.target.config().vocab_size, ctx.ops,
                                        ctx.options);
}

// ---- eagle3: an EAGLE-3 head over the target's hidden states -----------------------------

void validate_eagle3(const JobConfig& c) {
  if (!c.uses_mode("speculative")) return;
  SPEC_INPUT_CHECK(!c.draft.path.empty(),
                   "draft.kind = \"eagle3\" needs draft.path, the head's directory (config.json "
                   "and model.safetensors in the SafeAILab / SGLang layout)");
}

// draft.placement: "replicated" (the whole head on every rank, no communication) or "sharded"
// (split over the tp group like the target; the same tokens, less memory per rank).
std::unique_ptr<Drafter> make_eagle3(const JobConfig& c, DrafterContext& ctx) {
  const HeadKind kind = HeadConfig::from_dir(c.draft.path.resolved, ctx.target.config()).kind();
  SPEC_INPUT_CHECK(kind == HeadKind::kEagle3, "draft.kind = \"eagle3\" ("
                                                  << c.origin("draft.kind")
                                                  << ") but draft.path = " << c.draft.path.resolved
                                                  << " holds a DeepSeek-V3 checkpoint's MTP layer: "
                                                     "set draft.kind = \"mtp\"");
  return std::make_unique<HeadDrafter>(
      ctx.factory.load_head(c.draft.path.resolved, ctx.target_checkpoint,
                            c.draft.placement == "sharded"),
      ctx.ops, ctx.options);
}

// ---- mtp: a DeepSeek-V3 checkpoint's multi-token-prediction layer --------------------------

// The target's kind is known at load only (make_mtp).
void validate_mtp(const JobConfig&) {}

// The module of the target's own checkpoint (draft.path empty) or of a NextN checkpoint
// (draft.path), drafting chains by applying it recursively and trees through the shared tree
// loop (HeadDrafter); its MoE passes go to the drafter's expert accounting.
std::unique_ptr<Drafter> make_mtp(const JobConfig& c, DrafterContext& ctx) {
  const ModelConfig& target = ctx.target.config();
  SPEC_INPUT_CHECK(target.is_mla(), "draft.kind = \"mtp\" (" << c.origin("draft.kind")
                                                             << ") needs a DeepSeek-V3-family "
                                                                "target with an MTP layer, but "
                                                             << ctx.target_checkpoint.dir()
                                                             << "/config.json has architectures \""
                                                             << target.architecture << "\"");
  const std::string dir =
      c.draft.path.empty() ? ctx.target_checkpoint.dir() : c.draft.path.resolved;
  SPEC_INPUT_CHECK(HeadConfig::from_dir(dir, target).kind() == HeadKind::kMtp,
                   "draft.kind = \"mtp\" (" << c.origin("draft.kind") << ") but draft.path = "
                                            << dir << " is not a DeepSeek-V3-family checkpoint");
  return std::make_unique<HeadDrafter>(
      ctx.factory.load_head(dir, ctx.target_checkpoint, c.draft.placement == "sharded",
                            c.draft.mtp_chain_hidden == "shared_head_norm"),
      ctx.ops, ctx.options, ctx.draft_routing);
}

// ---- ngram: prompt lookup, no model -------------------------------------------------------

void validate_ngram(const JobConfig& c) {
  SPEC_INPUT_CHECK(
      c.draft.ngram_min <= c.draft.ngram_max,
      "draft.ngram_min = " << c.draft.ngram_min << " (" << c.origin("draft.ngram_min")
                           << ") is larger than draft.ngram_max = " << c.draft.ngram_max << " ("
                           << c.origin("draft.ngram_max") << ")");
  SPEC_INPUT_CHECK(!c.decode.shape.tree(),
                   "draft.kind = \"ngram\" proposes chains but decode.tree_top_k = "
                       << c.decode.shape.tree_top_k << " (" << c.origin("decode.tree_top_k")
                       << "): set decode.tree_top_k = 1 (the chain's length is decode.draft_len)");
}

std::unique_ptr<Drafter> make_ngram(const JobConfig& c, DrafterContext&) {
  return std::make_unique<NgramDrafter>(c.draft.ngram_min, c.draft.ngram_max,
                                        c.decode.shape.draft_len);
}

constexpr DrafterKind kKinds[] = {
    {"model",
     "a small causal LM of the target's vocabulary drafts a chain (draft.path, "
     "draft.placement)",
     validate_model, make_model},
    {"eagle3",
     "an EAGLE-3 head (draft.path) drafts from the target's hidden states, a chain or "
     "a tree (decode.tree_top_k / tree_depth / tree_nodes)",
     validate_eagle3, make_eagle3},
    {"mtp",
     "a DeepSeek-V3-family target's multi-token-prediction layer (draft.path empty: the "
     "target's own; draft.mtp_chain_hidden) drafts a chain or a tree",
     validate_mtp, make_mtp},
    {"ngram",
     "prompt lookup: the continuation of the latest earlier occurrence of the last "
     "n tokens (draft.ngram_max .. draft.ngram_min), up to decode.draft_len; no model",
     validate_ngram, make_ngram},
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
  try {
    parse_synthetic_acceptance(config.decode.acceptance);
  } catch (const Error& e) {
    SPEC_INPUT_FAIL("decode.acceptance = " << e.message() << " ("
                                           << config.origin("decode.acceptance") << ")");
  }
}

std::unique_ptr<Drafter> make_drafter(const JobConfig& config, DrafterContext& context) {
  return kind_of(config).make(config, context);
}

}  // namespace specrun
