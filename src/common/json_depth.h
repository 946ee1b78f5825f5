// Nesting bound for untrusted JSON (safetensors headers, config.json, JSONL prompt lines, JSON
// stored in result files). nlohmann's dump() and the error messages built with it recurse over
// the document, so a header of 100,000 nested [] overflowed the stack before any check ran; the
// text is therefore scanned for its nesting depth before it is parsed.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace specrun {

inline constexpr int kMaxJsonDepth = 64;  // real files: safetensors 3, config.json 3-4

// The byte offset at which `text` first nests deeper than max_depth ([ and { outside strings),
// or std::string_view::npos when it never does. Does not validate the JSON otherwise.
std::size_t json_too_deep_at(std::string_view text, int max_depth = kMaxJsonDepth);

// "" when `text` nests at most max_depth deep, else a message for `where` naming the offset.
std::string json_depth_error(std::string_view text, const std::string& where,
                             int max_depth = kMaxJsonDepth);

// Parses `text`; a discarded value when it is not valid JSON or nests deeper than max_depth.
nlohmann::json parse_json_or_discarded(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace specrun
