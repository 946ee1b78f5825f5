#include "common/json_depth.h"

namespace specrun {

std::size_t json_too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

std::string json_depth_error(std::string_view text, const std::string& where, int max_depth) {
  const std::size_t at = json_too_deep_at(text, max_depth);
  if (at == std::string_view::npos) return "";
  return where + ": JSON nested more than " + std::to_string(max_depth) + " levels deep (at byte " +
         std::to_string(at) + "): corrupt or hostile input";
}

nlohmann::json parse_json_or_discarded(std::string_view text, int max_depth) {
  if (json_too_deep_at(text, max_depth) != std::string_view::npos)
    return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace specrun
