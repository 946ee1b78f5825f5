#include "app/commands.h"
#include "common/error.h"

namespace specrun {

int cmd_run(CommandContext& ctx, const std::vector<std::string>& args) {
  SPEC_FAIL("`specrun run` is not implemented yet");
}

}  // namespace specrun
