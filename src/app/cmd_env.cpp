#include "app/commands.h"
#include "common/error.h"

namespace specrun {

int cmd_env(CommandContext& ctx, const std::vector<std::string>& args) {
  SPEC_FAIL("`specrun env` is not implemented yet");
}

}  // namespace specrun
