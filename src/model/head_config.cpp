#include "model/head_config.h"

namespace specrun {

HeadConfig HeadConfig::from_dir(const std::string& dir, const ModelConfig& target) {
  // One kind so far: the EAGLE-3 reader checks "architectures" and names what it expected. A
  // second kind reads "architectures" here first and hands the file to its own reader.
  return Eagle3Config::from_file(dir + "/config.json", target);
}

}  // namespace specrun
