// Hugging Face checkpoint directory: config.json plus one safetensors file or an index of shards.
#include "model/checkpoint.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "model/weight_schema.h"

namespace specrun {

namespace {

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& dir) : Checkpoint(dir, ModelConfig::from_file) {}

Checkpoint::Checkpoint(const std::string& dir, const ConfigReader& read_config) : dir_(dir) {
  SPEC_INPUT_CHECK(is_dir(dir), "model directory " << dir << " does not exist (or is not a "
                                                   << "directory)");
  const std::string config_path = dir + "/config.json";
  SPEC_INPUT_CHECK(input_exists(config_path),
                   "model directory " << dir << " has no config.json: expected a Hugging Face "
                                      << "layout (config.json + model.safetensors); for llama2.c "
                                      << ".bin files run `specrun import-llama2c` first");
  config_ = read_config(config_path);

  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (input_exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const std::string& name : files_.back()->names()) tensor_file_[name] = files_.back().get();
    return;
  }
  SPEC_INPUT_CHECK(input_exists(index), "model directory " << dir
                                                           << " has neither model.safetensors nor "
                                                              "model.safetensors.index.json (only "
                                                              "safetensors weights are supported)");
  nlohmann::json j;
  {
    const std::string text = read_input_file(index, kWeightIndexFile);
    const std::string too_deep = json_depth_error(text, index);
    SPEC_INPUT_CHECK(too_deep.empty(), too_deep);
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      SPEC_INPUT_FAIL(index << ": not valid JSON: " << e.what());
    }
  }
  SPEC_INPUT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                   index << ": missing the \"weight_map\" object");
  std::map<std::string, const SafetensorsFile*> by_shard;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    SPEC_INPUT_CHECK(it.value().is_string(),
                     index << ": weight_map entry for '" << it.key() << "' is not a file name");
    const std::string shard = it.value().get<std::string>();
    SPEC_INPUT_CHECK(
        !shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
        index << ": weight_map entry for '" << it.key() << "' names \"" << shard
              << "\", which is not a plain file name in the model directory");
    auto found = by_shard.find(shard);
    if (found == by_shard.end()) {
      const std::string path = dir + "/" + shard;
      SPEC_INPUT_CHECK(input_exists(path), index << ": tensor '" << it.key() << "' is mapped to "
                                                 << shard << ", which does not exist in " << dir);
      files_.push_back(std::make_unique<SafetensorsFile>(path));
      found = by_shard.emplace(shard, files_.back().get()).first;
    }
    SPEC_INPUT_CHECK(found->second->has(it.key()),
                     index << ": tensor '" << it.key() << "' is mapped to " << shard
                           << " but that file does not contain it: the index and shards disagree");
    tensor_file_[it.key()] = found->second;
  }
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  auto it = tensor_file_.find(name);
  SPEC_INPUT_CHECK(it != tensor_file_.end(),
                   "tensor '" << name << "' is missing from the checkpoint in " << dir_);
  return *it->second;
}

bool Checkpoint::has(const std::string& name) const {
  return tensor_file_.count(name) != 0;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& kv : tensor_file_) out.push_back(kv.first);
  return out;
}

std::vector<std::int64_t> Checkpoint::config_shape(const std::string& name,
                                                   std::string* why) const {
  return schema_shape(config_, name, why);
}

const TensorView& Checkpoint::tensor(const std::string& name,
                                     const std::vector<std::int64_t>& expected_shape) const {
  auto it = tensor_file_.find(name);
  if (it == tensor_file_.end()) {
    std::string hint;
    if (name == "lm_head.weight" && !config_.tie_word_embeddings) {
      hint =
          "; config.json says tie_word_embeddings=false, so the checkpoint needs its own "
          "lm_head.weight (set tie_word_embeddings=true if it shares model.embed_tokens.weight)";
    } else if (ends_with(name, ".bias")) {
      hint =
          "; config.json implies biases (Qwen2 or attention_bias=true) but the checkpoint has "
          "none";
    }
    SPEC_INPUT_FAIL(
        "tensor '" << name << "' is missing from the checkpoint in " << dir_ << " ("
                   << (files_.size() == 1 ? files_[0]->path() : "model.safetensors.index.json")
                   << ", " << tensor_file_.size() << " tensors; Hugging Face Llama "
                   << "tensor names expected)" << hint);
  }
  const TensorView& view = it->second->get(name);  // rejects non-float dtypes
  if (!expected_shape.empty() && view.shape != expected_shape) {
    std::string why;
    std::vector<std::int64_t> implied = config_shape(name, &why);
    std::ostringstream msg;
    msg << "tensor '" << name << "' in " << view.file << " has shape " << shape_text(view.shape)
        << ", expected " << shape_text(expected_shape);
    if (!implied.empty() && implied == expected_shape) {
      msg << " from " << dir_ << "/config.json " << why;
    }
    msg << ": the weights do not match config.json (wrong config, or a different model)";
    SPEC_INPUT_FAIL(msg.str());
  }
  return view;
}

}  // namespace specrun
