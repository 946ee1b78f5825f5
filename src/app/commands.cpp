#include "app/commands.h"

namespace specrun {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "run a batch job: baseline and speculative decoding (under mpirun)", cmd_run},
      {"env", "provenance of this process; under mpirun, the cross-rank environment check",
       cmd_env},
  };
  return table;
}

}  // namespace specrun
