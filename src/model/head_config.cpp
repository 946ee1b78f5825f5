#include "model/head_config.h"

#include <nlohmann/json.hpp>

#include "common/input_file.h"
#include "common/json_depth.h"

namespace specrun {
namespace {

// A DeepSeek-V3-family config.json (the target's own, or a NextN checkpoint's): its MTP layer is
// the head (docs/mtp-design.md). Only the architecture is looked at here; ModelConfig reads the
// rest with its own checks.
bool is_deepseek_family(const std::string& path) {
  if (!input_exists(path)) return false;
  const nlohmann::json j = parse_json_or_discarded(read_input_file(path, kModelConfigFile));
  if (!j.is_object() || !j.contains("architectures") || !j["architectures"].is_array() ||
      j["architectures"].empty() || !j["architectures"][0].is_string())
    return false;
  const std::string arch = j["architectures"][0].get<std::string>();
  return arch == "DeepseekV3ForCausalLM" || arch == "KimiK25ForConditionalGeneration";
}

}  // namespace

HeadConfig HeadConfig::from_dir(const std::string& dir, const ModelConfig& target) {
  const std::string path = dir + "/config.json";
  if (is_deepseek_family(path)) {
    // The MTP layer: of the target's own checkpoint, or of a separate NextN checkpoint (one
    // decoder layer, the target's having more).
    const ModelConfig c = ModelConfig::from_file(path);
    const bool separate = c.num_layers == 1 && target.num_layers != 1;
    return MtpConfig::from_config(c, target, path, separate);
  }
  // The EAGLE-3 reader checks "architectures" and names what it expected.
  return Eagle3Config::from_file(path, target);
}

}  // namespace specrun
