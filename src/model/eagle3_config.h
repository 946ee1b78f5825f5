// An EAGLE-3 draft head's config.json (docs/reference.md, "EAGLE-3 draft heads"): the SafeAILab /
// SGLang layout, `architectures: ["LlamaForCausalLMEagle3"]`, or the flat LlamaConfig of
// SafeAILab's training template with `draft_vocab_size`. Everything that would change the numbers
// and is not implemented is refused naming the field.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"

namespace specrun {

struct Eagle3Config {
  // The midlayer as a one-layer Llama: hidden, heads, kv heads, head_dim, intermediate, eps,
  // rope (the head's own: rope_theta, default 10000, never the target's); vocab_size is the
  // DRAFT vocabulary (lm_head's rows); target_hidden_size the width of each target feature.
  ModelConfig head;
  int target_vocab = 0;  // vocab_size: the target's vocabulary (d2t maps into it)
  // The target layers whose residual stream the head reads, as LanguageModel capture ids
  // (the input of layer i), low, mid, high.
  std::vector<int> capture;
  std::string capture_source;  // how they were found, for the log and errors
  // speculators' variant: the residual of the midlayer is hidden_norm(hin), not hin.
  bool norm_before_residual = false;

  // Parses `path` for a target with `target` config (its layer count, vocabulary and hidden
  // size decide the defaults and the checks).
  static Eagle3Config from_file(const std::string& path, const ModelConfig& target);
  static Eagle3Config from_json_text(const std::string& text, const std::string& source,
                                     const ModelConfig& target);
};

}  // namespace specrun
