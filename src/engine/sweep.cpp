#include "engine/sweep.h"

#include <set>

#include "common/error.h"

namespace specrun {

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(sep, start);
    out.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// A value as part of a file name: letters, digits, '.', '-' and '+' kept, others become '_'.
std::string file_safe(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '+';
    if (!keep) c = '_';
  }
  return out;
}

// The last component of "section.key".
std::string short_key(const std::string& key) {
  const std::size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

GridAxis parse_grid_axis(const std::string& text) {
  const std::size_t eq = text.find('=');
  SPEC_INPUT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(),
                   "--grid " << text
                             << ": expected KEY=V1,V2,... (or KEY1+KEY2=A1/A2,B1/B2 for coupled "
                                "keys), e.g. decode.draft_len=1,2,4,8");
  GridAxis axis;
  axis.keys = split(text.substr(0, eq), '+');
  for (const std::string& k : axis.keys)
    SPEC_INPUT_CHECK(k.find('.') != std::string::npos && k.front() != '.' && k.back() != '.',
                     "--grid " << text << ": '" << k
                               << "' is not a section.key option name (e.g. decode.draft_len)");
  for (const std::string& v : split(text.substr(eq + 1), ',')) {
    std::vector<std::string> tuple =
        axis.keys.size() == 1 ? std::vector<std::string>{v} : split(v, '/');
    SPEC_INPUT_CHECK(tuple.size() == axis.keys.size(),
                     "--grid " << text << ": value '" << v << "' has " << tuple.size()
                               << " part(s) for " << axis.keys.size()
                               << " coupled keys (separate them with '/')");
    for (const std::string& part : tuple)
      SPEC_INPUT_CHECK(!part.empty(), "--grid " << text << ": an empty value");
    axis.values.push_back(std::move(tuple));
  }
  return axis;
}

std::vector<SweepPoint> sweep_points(const std::vector<GridAxis>& axes) {
  std::set<std::string> seen;
  for (const GridAxis& a : axes)
    for (const std::string& k : a.keys)
      SPEC_INPUT_CHECK(seen.insert(k).second, "--grid: " << k << " is swept by two axes");
  std::vector<SweepPoint> points(1);
  for (const GridAxis& a : axes) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& p : points) {
      for (const std::vector<std::string>& tuple : a.values) {
        SweepPoint q = p;
        std::string label, value;
        for (std::size_t i = 0; i < a.keys.size(); ++i) {
          q.sets.emplace_back(a.keys[i], tuple[i]);
          label += (i ? "+" : "") + short_key(a.keys[i]);
          value += (i ? "-" : "") + file_safe(tuple[i]);
        }
        q.name += (q.name.empty() ? "" : "_") + label + "=" + value;
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  if (axes.empty()) points.clear();
  return points;
}

}  // namespace specrun
