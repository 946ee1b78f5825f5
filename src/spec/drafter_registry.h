// The drafters a job can name in draft.kind, in one registry: each kind validates its own keys
// (called while the job file is parsed, so errors name the file, line and key) and builds its
// Drafter. A new drafter is one entry here plus its implementation.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "config/job_config.h"
#include "model/language_model.h"
#include "model/routing_observer.h"
#include "spec/drafter.h"
#include "spec/sampling.h"
#include "spec/token_ops.h"

namespace specrun {

class Checkpoint;
class ModelFactory;

// What a drafter may use to build itself. All references outlive the drafter.
struct DrafterContext {
  ModelFactory& factory;                // loads draft models on the job's backend
  const LanguageModel& target;          // the target (its vocabulary, config)
  const Checkpoint& target_checkpoint;  // its files (an EAGLE-3 head reads its embedding)
  TokenOps& ops;                        // token decisions on the backend
  DraftOptions options;                 // the decode options drafters share (sampling, shape)
  // Told the routing of every forward pass of a draft model (model/routing_observer.h: the kinds
  // that load a LanguageModel wrap it), so that a mixture-of-experts drafter's passes are
  // accounted apart from the target's; nullptr: nobody watches.
  RoutingObserver* draft_routing = nullptr;
};

struct DrafterKind {
  std::string_view name;
  std::string_view summary;  // one line, for `specrun run --help`
  // Checks the kind's own keys of a parsed job (JobConfig::origin names where they were set);
  // throws (exit code 2) with advice.
  void (*validate)(const JobConfig& config);
  // The drafter of a job that runs speculative mode; nullptr for kind "none".
  std::unique_ptr<Drafter> (*make)(const JobConfig& config, DrafterContext& context);
};

// Every registered kind, in help order.
std::span<const DrafterKind> drafter_kinds();

// Checks draft.kind (an error lists the registered kinds) and then that kind's keys. Pass it to
// the job loader (config/job_broadcast.h) as the extra validation.
void validate_drafter_config(const JobConfig& config);

// The job's drafter (nullptr when draft.kind = "none"). Loads what the kind needs.
std::unique_ptr<Drafter> make_drafter(const JobConfig& config, DrafterContext& context);

}  // namespace specrun
