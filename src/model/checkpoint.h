// A Hugging Face checkpoint directory: config.json plus model.safetensors, or sharded
// model-0000x-of-0000y.safetensors files listed in model.safetensors.index.json.
#pragma once

#include <functional>
#include <map>
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
  // The same with another config.json reader (an EAGLE-3 head's, eagle3_config.h).
  using ConfigReader = std::function<ModelConfig(const std::string& config_json_path)>;
  Checkpoint(const std::string& dir, const ConfigReader& read_config);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  bool has(const std::string& name) const;
  // The tensor `name`, checked to have `expected_shape` (when non-empty) and a float dtype;
  // throws naming the tensor, the file and the config.json field that implies the shape.
  const TensorView& tensor(const std::string& name,
                           const std::vector<std::int64_t>& expected_shape = {}) const;
  // The shape config.json implies for an HF Llama/Mistral/Qwen2 tensor name
  // ("model.layers.3.self_attn.k_proj.weight" -> {num_kv_heads*head_dim, hidden_size}); empty for
  // names it does not know. `why`, when given, receives the fields, e.g.
  // "[num_key_value_heads*head_dim = 4*32 = 128, hidden_size = 256]".
  std::vector<std::int64_t> config_shape(const std::string& name, std::string* why = nullptr) const;
  // All tensor names (sorted).
  std::vector<std::string> names() const;
  // The file holding tensor `name` (for tensors of other dtypes: SafetensorsFile::get_other).
  // Throws naming the tensor when it is not in the checkpoint.
  const SafetensorsFile& file_of(const std::string& name) const;
  // The weight files opened (one, or one per shard).
  std::size_t num_files() const { return files_.size(); }

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> tensor_file_;  // name -> file holding it
};

}  // namespace specrun
