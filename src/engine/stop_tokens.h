// The tokens that finish a sequence: the target's EOS ids (config.json and
// generation_config.json, model/model_config.h) and decode.stop_tokens.
#pragma once

#include <algorithm>
#include <vector>

#include "config/job_config.h"
#include "model/model_config.h"

namespace specrun {

// decode.stop_tokens as ids: each entry an id ("128009", checked against the target's
// vocabulary) or a token string ("<|im_end|>") looked up in the target folder's tokenizer.
// Throws naming the entry when an id is outside the vocabulary or a string is no single token.
std::vector<int> extra_stop_ids(const JobConfig& config, const ModelConfig& target);

// The target's EOS ids followed by extra_stop_ids, each once: what the result file records.
std::vector<int> all_stop_ids(const JobConfig& config, const ModelConfig& target);

// Whether `token` is one of options.extra_stop_ids (DecodeOptions, GenerateOptions).
template <class Options>
bool is_extra_stop(const Options& options, int token) {
  return std::find(options.extra_stop_ids.begin(), options.extra_stop_ids.end(), token) !=
         options.extra_stop_ids.end();
}

}  // namespace specrun
