#include "engine/stop_tokens.h"

#include <algorithm>
#include <charconv>
#include <memory>

#include "common/error.h"
#include "text/tokenizer.h"

namespace specrun {

std::vector<int> extra_stop_ids(const JobConfig& config, const ModelConfig& target) {
  std::vector<int> ids;
  std::unique_ptr<Tokenizer> tokenizer;  // loaded for the first token string
  for (const std::string& entry : config.decode.stop_tokens) {
    int id = -1;
    const char* end = entry.data() + entry.size();
    auto [ptr, ec] = std::from_chars(entry.data(), end, id);
    if (ec == std::errc() && ptr == end) {
      SPEC_INPUT_CHECK(id >= 0 && id < target.vocab_size,
                       "decode.stop_tokens: id " << entry << " is outside the target's vocabulary ("
                                                 << target.vocab_size << " ids)");
    } else {
      if (!tokenizer) tokenizer = load_tokenizer_for(config.target.path.resolved);
      SPEC_INPUT_CHECK(tokenizer != nullptr, "decode.stop_tokens: \""
                                                 << entry << "\" is a token string, but "
                                                 << config.target.path.resolved
                                                 << " has no tokenizer to look it up; give its id");
      id = tokenizer->token_to_id(entry);
      SPEC_INPUT_CHECK(id >= 0, "decode.stop_tokens: \"" << entry << "\" is not a token of "
                                                         << config.target.path.resolved
                                                         << "'s tokenizer; give its id");
    }
    if (!target.is_eos(id) && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

std::vector<int> all_stop_ids(const JobConfig& config, const ModelConfig& target) {
  std::vector<int> ids = target.eos_token_ids;
  for (int id : extra_stop_ids(config, target)) ids.push_back(id);
  return ids;
}

}  // namespace specrun
