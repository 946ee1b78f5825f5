#include "model/eagle3_config.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/input_file.h"
#include "common/json_depth.h"

namespace specrun {
namespace {

using json = nlohmann::json;

std::vector<int> layer_ids(const json& ids, const std::string& source, const std::string& field) {
  SPEC_INPUT_CHECK(ids.is_array() && ids.size() == 3,
                   source << ": \"" << field << "\" must list three layer ids, got " << ids.dump());
  std::vector<int> out;
  for (const json& id : ids) {
    SPEC_INPUT_CHECK(id.is_number_integer(),
                     source << ": \"" << field << "\" must hold integers, got " << ids.dump());
    out.push_back(id.get<int>());
  }
  return out;
}

}  // namespace

Eagle3Config Eagle3Config::from_file(const std::string& path, const ModelConfig& target) {
  SPEC_INPUT_CHECK(input_exists(path),
                   "cannot open " << path << ": is this an EAGLE-3 head directory?");
  return from_json_text(read_input_file(path, kModelConfigFile), path, target);
}

Eagle3Config Eagle3Config::from_json_text(const std::string& text, const std::string& source,
                                          const ModelConfig& target) {
  json j;
  const std::string too_deep = json_depth_error(text, source);
  SPEC_INPUT_CHECK(too_deep.empty(), too_deep);
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    SPEC_INPUT_FAIL(source << ": not valid JSON: " << e.what());
  }
  SPEC_INPUT_CHECK(j.is_object(), source << ": expected a JSON object");
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  // Which layout.
  std::string arch;
  if (present("architectures")) {
    SPEC_INPUT_CHECK(j["architectures"].is_array() && j["architectures"].size() == 1 &&
                         j["architectures"][0].is_string(),
                     source << ": \"architectures\" must be a list of one name");
    arch = j["architectures"][0].get<std::string>();
  }
  const bool flat = arch == "LlamaForCausalLM" && present("draft_vocab_size");
  SPEC_INPUT_CHECK(arch == "LlamaForCausalLMEagle3" || flat,
                   source << ": \"architectures\" = [\"" << arch
                          << "\"] is not an EAGLE-3 head (expected \"LlamaForCausalLMEagle3\", or "
                             "a LlamaForCausalLM config with \"draft_vocab_size\"); EAGLE-1/2 "
                             "heads (fc over embedding + hidden, the target's lm_head) are not "
                             "supported");
  SPEC_INPUT_CHECK(!(present("bias") && j["bias"].is_boolean() && j["bias"].get<bool>()),
                   source << ": \"bias\": true (an fc bias, EAGLE-1) is not supported: EAGLE-3's "
                             "fc has none");
  // The midlayer as a Llama config: the same validation of every shared field.
  json as_llama = j;
  as_llama["architectures"] = json::array({"LlamaForCausalLM"});
  as_llama["model_type"] = "llama";
  Eagle3Config c;
  c.target_vocab = present("vocab_size") ? j["vocab_size"].get<int>() : 0;
  SPEC_INPUT_CHECK(c.target_vocab == target.vocab_size,
                   source << ": \"vocab_size\" = " << c.target_vocab << " but the target has "
                          << target.vocab_size << " tokens: a head for another target");
  const int draft_vocab =
      present("draft_vocab_size") ? j["draft_vocab_size"].get<int>() : c.target_vocab;
  SPEC_INPUT_CHECK(
      draft_vocab >= 1 && draft_vocab <= c.target_vocab,
      source << ": \"draft_vocab_size\" = " << draft_vocab << " must be in 1.." << c.target_vocab);
  as_llama["vocab_size"] = draft_vocab;
  c.head = ModelConfig::from_json_text(as_llama.dump(), source);
  SPEC_INPUT_CHECK(c.head.num_layers == 1,
                   source << ": \"num_hidden_layers\" = " << c.head.num_layers
                          << ": heads with extra decoder layers are not supported (one midlayer)");
  SPEC_INPUT_CHECK(!c.head.tie_word_embeddings,
                   source << ": \"tie_word_embeddings\": true is not an EAGLE-3 head (lm_head "
                             "over the draft vocabulary is its own)");
  SPEC_INPUT_CHECK(!c.head.qkv_bias && !c.head.o_bias,
                   source << ": \"attention_bias\": true is not supported for EAGLE-3 heads");
  c.head.target_hidden_size =
      present("target_hidden_size") ? j["target_hidden_size"].get<int>() : target.hidden_size;
  SPEC_INPUT_CHECK(c.head.target_hidden_size == target.hidden_size,
                   source << ": \"target_hidden_size\" = " << c.head.target_hidden_size
                          << " but the target's hidden_size is " << target.hidden_size);
  SPEC_INPUT_CHECK(c.head.hidden_size == target.hidden_size,
                   source << ": \"hidden_size\" = " << c.head.hidden_size
                          << " differs from the target's " << target.hidden_size
                          << ": a head of another width needs its own embedding, which is not "
                             "supported");
  if (present("norm_before_residual")) {
    SPEC_INPUT_CHECK(j["norm_before_residual"].is_boolean(),
                     source << ": \"norm_before_residual\" must be true or false");
    c.norm_before_residual = j["norm_before_residual"].get<bool>();
  }
  // The capture layers. SGLang's eagle_config ids name layer OUTPUTS (captured before layer
  // id + 1); vLLM's top-level ids are hidden_states indices, the inputs of those layers.
  const int N = target.num_layers;
  const bool sglang = present("eagle_config") && j["eagle_config"].is_object() &&
                      j["eagle_config"].contains("eagle_aux_hidden_state_layer_ids");
  const bool vllm = present("eagle_aux_hidden_state_layer_ids");
  SPEC_INPUT_CHECK(!(sglang && vllm),
                   source << ": both \"eagle_config.eagle_aux_hidden_state_layer_ids\" (SGLang: "
                             "layer outputs) and \"eagle_aux_hidden_state_layer_ids\" (vLLM: layer "
                             "inputs) are given; keep the one the head was trained with");
  if (sglang) {
    for (int id : layer_ids(j["eagle_config"]["eagle_aux_hidden_state_layer_ids"], source,
                            "eagle_config.eagle_aux_hidden_state_layer_ids"))
      c.capture.push_back(id + 1);
    c.capture_source = "eagle_config.eagle_aux_hidden_state_layer_ids (SGLang: layer outputs)";
  } else if (vllm) {
    c.capture = layer_ids(j["eagle_aux_hidden_state_layer_ids"], source,
                          "eagle_aux_hidden_state_layer_ids");
    c.capture_source = "eagle_aux_hidden_state_layer_ids (vLLM: layer inputs)";
  } else {
    c.capture = {2, N / 2, N - 3};
    c.capture_source = "the default {2, N/2, N-3}";
  }
  std::ostringstream ids;
  for (int id : c.capture) ids << (ids.tellp() > 0 ? ", " : "") << id;
  for (std::size_t i = 0; i < c.capture.size(); ++i)
    SPEC_INPUT_CHECK(
        c.capture[i] >= 0 && c.capture[i] < N && (i == 0 || c.capture[i] > c.capture[i - 1]),
        source << ": the capture layers from " << c.capture_source << " are the "
               << "inputs of target layers " << ids.str() << ", which are not three "
               << "ascending layers of the target's " << N
               << " (for a shallow target the default {2, N/2, N-3} repeats a layer: "
                  "name the layers in eagle_config.eagle_aux_hidden_state_layer_ids)");
  return c;
}

}  // namespace specrun
