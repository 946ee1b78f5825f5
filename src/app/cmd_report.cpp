#include "app/commands.h"
#include "common/error.h"

namespace specrun {

int cmd_report(CommandContext& ctx, const std::vector<std::string>& args) {
  SPEC_FAIL("this command is not implemented yet");
}

}  // namespace specrun
