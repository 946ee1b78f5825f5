#include "engine/acceptance_alarm.h"

#include <iomanip>
#include <sstream>

namespace specrun {

double AcceptanceAlarm::tau() const {
  return verify_ > 0 ? static_cast<double>(step_tokens_) / static_cast<double>(verify_) : 0.0;
}

AcceptanceAlarm::Verdict AcceptanceAlarm::add(const BatchResult& batch) {
  Verdict out;
  if (steps_ <= 0) return out;
  for (const SequenceRecord& s : batch.sequences) {
    verify_ += s.verify_steps;
    drafted_ += s.drafted;
    accepted_ += s.accepted;
    step_tokens_ += s.generated > 0 ? s.generated - 1 : 0;  // the first token is the prefill's
  }
  if (verify_ < steps_ || drafted_ == 0) return out;
  std::ostringstream what;
  what << std::fixed << std::setprecision(2) << "tau " << tau() << " after " << verify_
       << " verify steps (" << accepted_ << " of " << drafted_ << " drafted tokens accepted)";
  if (!warned_ && (accepted_ == 0 || tau() < 1.005)) {
    warned_ = true;
    out.warning = "speculative acceptance alarm: " + what.str() +
                  ": the drafter proposes (almost) nothing the target accepts. Check the draft "
                  "(draft.path and kind, its aux layers, its vocabulary mapping and dtype), the "
                  "chat template and the temperature; decode.min_tau turns this into an error "
                  "that stops the job";
  }
  if (min_tau_ > 0 && tau() < min_tau_) {
    std::ostringstream stop;
    stop << "decode.min_tau = " << min_tau_ << ": " << what.str()
         << " is below it; the job stops here (the result file keeps every batch written; "
            "decode.alarm_steps = "
         << steps_ << " sets when the check starts)";
    out.stop = stop.str();
  }
  return out;
}

}  // namespace specrun
