// A Hugging Face checkpoint directory: config.json plus model.safetensors, or sharded
// model-0000x-of-0000y.safetensors files listed in model.safetensors.index.json.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"

namespace specrun {

class Checkpoint {
 public:
  // Opens the directory: parses config.json (ModelConfig) and maps the safetensors file(s).
  // Clear errors for a missing directory, config.json, or weight file.
  explicit Checkpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  bool has(const std::string& name) const;
  // The tensor `name`, checked to have `expected_shape` (when non-empty) and a float dtype;
  // throws naming the tensor, the file and the config.json field that implies the shape.
  const TensorView& tensor(const std::string& name,
                           const std::vector<std::int64_t>& expected_shape = {}) const;

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace specrun
