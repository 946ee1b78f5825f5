// Text helpers shared by the config reader and the dumps: number formatting, the description of
// an option's allowed values, and "did you mean" suggestions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "config/option_table.h"

namespace specrun {

// Integers without a decimal point ("16"), other numbers in shortest round-trip form ("0.95").
std::string format_number(double value);

// "1..16", ">= 0", "(0, 1]", "0 to 100" or "auto, f32, bf16, f16" (choices).
std::string describe_allowed(const OptionSpec& spec, bool integer);

// Edit distance (insertions, deletions, substitutions).
std::size_t levenshtein(std::string_view a, std::string_view b);

// The candidate nearest to `typed` by edit distance (first one on ties).
std::string closest_match(std::string_view typed, const std::vector<std::string>& candidates);

// The full option name ("decode.draft_len") nearest to `typed`, which may be a full name or a
// bare key ("draftlen").
std::string closest_option_name(std::string_view typed);

}  // namespace specrun
