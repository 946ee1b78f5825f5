// The run-time acceptance alarm (decode.alarm_steps, decode.min_tau; issue 47): the most common
// speculation failure is silent (a head in the wrong mode, a wrong aux-layer setting, a draft
// read in the wrong dtype accept nothing and nothing errors). After the job's first
// `alarm_steps` verify steps (summed over its sequences), a speculative acceptance of exactly 0,
// or a tau that rounds to 1.00, is a warning, said once and recorded in the result file; a tau
// below decode.min_tau (when set) stops the job there, the file keeping every batch written.
// Fed on rank 0 with each speculative batch the job writes (this run's batches: a resumed job
// counts from its restart).
#pragma once

#include <cstdint>
#include <string>

#include "io/records.h"

namespace specrun {

class AcceptanceAlarm {
 public:
  // alarm_steps 0: off (min_tau too); min_tau 0: no stop.
  AcceptanceAlarm(int alarm_steps, double min_tau) : steps_(alarm_steps), min_tau_(min_tau) {}

  struct Verdict {
    std::string warning;  // non-empty once: the acceptance is 0 or tau 1.00
    std::string stop;     // non-empty: tau is below decode.min_tau; the job must stop
  };
  // Adds a speculative batch's sequences; what to say and whether to stop after it.
  Verdict add(const BatchResult& batch);

  // Tokens per verify step of the batches added so far (1 + accepted per step, less at EOS).
  double tau() const;

 private:
  int steps_;
  double min_tau_;
  std::int64_t verify_ = 0, drafted_ = 0, accepted_ = 0, step_tokens_ = 0;
  bool warned_ = false;
};

}  // namespace specrun
