#include "config/config_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace specrun {

std::string format_number(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e16)
    return std::to_string(static_cast<std::int64_t>(value));
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return ec == std::errc() ? std::string(buf, ptr) : std::string("?");
}

std::string describe_allowed(const OptionSpec& spec, bool integer) {
  if (!spec.choices.empty()) {
    std::string out;
    for (const auto& c : spec.choices) out += (out.empty() ? "" : ", ") + c;
    return out;
  }
  const bool has_min = std::isfinite(spec.min), has_max = std::isfinite(spec.max);
  if (!has_min && !has_max) return "any value";
  if (!has_max) return (spec.min_exclusive ? "> " : ">= ") + format_number(spec.min);
  if (!has_min) return "<= " + format_number(spec.max);
  if (spec.min_exclusive)
    return "(" + format_number(spec.min) + ", " + format_number(spec.max) + "]";
  if (integer) return format_number(spec.min) + ".." + format_number(spec.max);
  return "[" + format_number(spec.min) + ", " + format_number(spec.max) + "]";
}

std::size_t levenshtein(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view typed, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    std::size_t d = levenshtein(typed, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string closest_option_name(std::string_view typed) {
  std::string best;
  std::size_t best_distance = SIZE_MAX;
  const JobConfig defaults;
  for_each_option(defaults, [&](const OptionSpec& spec, const auto&) {
    const std::string name = spec.name();
    std::size_t d = std::min(levenshtein(typed, name), levenshtein(typed, spec.key));
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  });
  return best;
}

}  // namespace specrun
