#include "spec/synthetic_acceptance.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace specrun {

namespace {

// The draw index of the synthetic uniforms within the acceptance stream (RandPurpose::kAccept):
// apart from the draws the real acceptance test uses (draw 0).
constexpr std::uint32_t kSyntheticDraw = 0x5157;

double parse_number(const std::string& text, const std::string& whole) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  SPEC_INPUT_CHECK(
      !text.empty() && end == text.c_str() + text.size() && errno == 0 && std::isfinite(v),
      "\"" << whole << "\": '" << text << "' is not a number");
  return v;
}

}  // namespace

SyntheticAcceptance parse_synthetic_acceptance(const std::string& text) {
  SyntheticAcceptance out;
  if (text == "real") return out;
  if (text.rfind("fixed:", 0) == 0) {
    const double v = parse_number(text.substr(6), text);
    SPEC_INPUT_CHECK(v >= 0 && v <= 16 && v == std::floor(v),
                     "\"" << text << "\": the accepted length must be an integer in [0, 16]");
    out.kind = SyntheticAcceptance::Kind::kFixed;
    out.fixed = static_cast<int>(v);
    return out;
  }
  if (text.rfind("rates:", 0) == 0) {
    std::string rest = text.substr(6);
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = rest.find(',', start);
      const std::string part =
          rest.substr(start, comma == std::string::npos ? comma : comma - start);
      const double r = parse_number(part, text);
      SPEC_INPUT_CHECK(r >= 0 && r <= 1,
                       "\"" << text << "\": rate " << part << " is not in [0, 1]");
      out.rates.push_back(r);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    SPEC_INPUT_CHECK(out.rates.size() <= 16, "\"" << text << "\": at most 16 rates");
    out.kind = SyntheticAcceptance::Kind::kRates;
    return out;
  }
  SPEC_INPUT_FAIL("\"" << text
                       << "\": expected real, fixed:L (e.g. fixed:3) or rates:r1,r2,... "
                          "(e.g. rates:0.8,0.6,0.4)");
}

int synthetic_accepted(const SyntheticAcceptance& rule, const SeqRandKey& key,
                       std::int64_t first_position, int depth) {
  switch (rule.kind) {
    case SyntheticAcceptance::Kind::kReal:
      return 0;
    case SyntheticAcceptance::Kind::kFixed:
      return std::min(rule.fixed, depth);
    case SyntheticAcceptance::Kind::kRates:
      break;
  }
  int accepted = 0;
  while (accepted < depth) {
    const double rate =
        rule.rates[std::min(static_cast<std::size_t>(accepted), rule.rates.size() - 1)];
    if (key.uniform(first_position + accepted, RandPurpose::kAccept, kSyntheticDraw) >= rate) break;
    ++accepted;
  }
  return accepted;
}

}  // namespace specrun
