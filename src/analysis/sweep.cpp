#include "analysis/sweep.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "common/error.h"
#include "io/checked_read.h"

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

// "decode.draft_len=4 decode.temperature=0.8": a point's values, for messages.
std::string describe(const SweepPoint& p) {
  std::string out;
  for (const auto& [k, v] : p.sets) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

// Two points with one name would share one result file: the second would be skipped as finished
// and reported with the first's numbers. Refused before anything runs, as are names too long
// for a file system.
void check_point_names(const std::vector<SweepPoint>& points) {
  std::map<std::string, std::size_t> first_of;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const SweepPoint& p = points[i];
    SPEC_INPUT_CHECK(p.name.size() <= kMaxPointNameBytes,
                     "--grid: point " << i + 1 << " (" << describe(p) << ") would be written to a "
                                      << "file named " << p.name.size()
                                      << " bytes + \".log\", longer than a file name may be (255 "
                                         "bytes): shorten the values, or sweep fewer keys at once");
    auto [it, fresh] = first_of.emplace(p.name, i);
    SPEC_INPUT_CHECK(fresh, "--grid: points " << it->second + 1 << " ("
                                              << describe(points[it->second]) << ") and " << i + 1
                                              << " (" << describe(p)
                                              << ") would share the result file " << p.name
                                              << ".h5: their values differ only in characters a "
                                                 "file name replaces by '_' (or in where the '-' "
                                                 "of coupled values falls); give values that "
                                                 "differ in letters, digits, '.' or '+', or sweep "
                                                 "them separately");
  }
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
  // Coupled parts are separated by '/', or by '|' when the axis has one (values that are paths).
  const char sep = text.find('|', eq) != std::string::npos ? '|' : '/';
  for (const std::string& v : split(text.substr(eq + 1), ',')) {
    std::vector<std::string> tuple =
        axis.keys.size() == 1 ? std::vector<std::string>{v} : split(v, sep);
    SPEC_INPUT_CHECK(
        tuple.size() == axis.keys.size(),
        "--grid " << text << ": value '" << v << "' has " << tuple.size() << " part(s) for "
                  << axis.keys.size() << " coupled keys (separate them with '/'"
                  << (sep == '/' ? ", or with '|' when a value holds a '/', e.g. a path"
                                 : " or '|'")
                  << ")");
    for (const std::string& part : tuple)
      SPEC_INPUT_CHECK(!part.empty(), "--grid " << text << ": an empty value");
    axis.values.push_back(std::move(tuple));
  }
  return axis;
}

std::int64_t sweep_point_count(const std::vector<GridAxis>& axes) {
  if (axes.empty()) return 0;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t n = 1;
  for (const GridAxis& a : axes) {
    const auto values = static_cast<std::int64_t>(a.values.size());
    if (values == 0) return 0;
    n = n > kMax / values ? kMax : n * values;
  }
  return n;
}

std::vector<SweepPoint> sweep_points(const std::vector<GridAxis>& axes) {
  std::set<std::string> seen;
  for (const GridAxis& a : axes)
    for (const std::string& k : a.keys)
      SPEC_INPUT_CHECK(seen.insert(k).second, "--grid: " << k << " is swept by two axes");
  const std::int64_t count = sweep_point_count(axes);
  if (count > kMaxSweepPoints) {
    std::string sizes;
    for (const GridAxis& a : axes)
      sizes += (sizes.empty() ? "" : " x ") + std::to_string(a.values.size());
    SPEC_INPUT_FAIL("--grid: the grid has "
                    << (count == std::numeric_limits<std::int64_t>::max() ? "more than 9.2e18"
                                                                          : std::to_string(count))
                    << " points (" << sizes << " values), more than the " << kMaxSweepPoints
                    << " a sweep may run (one mpirun each): sweep fewer values, or split the grid "
                       "into several sweeps");
  }
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
  check_point_names(points);
  return points;
}

PointFile inspect_point_file(const std::string& path, const std::string& config_hash) {
  PointFile out;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return out;
    out.state = PointFile::State::kRefused;
    out.reason = path + ": " + std::strerror(errno);
    return out;
  }
  out.state = PointFile::State::kRefused;
  if (S_ISLNK(st.st_mode)) {
    out.reason = path +
                 " is a symbolic link; a run writes its result to a regular file only "
                 "(remove the link)";
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    out.reason = path + " exists and is not a regular file";
    return out;
  }
  ResultHead head;
  try {
    head = check_result_head(path);
  } catch (const Error& e) {
    out.reason = e.message();
    return out;
  }
  if (!head.finished) {
    out.state = PointFile::State::kUnfinished;
    return out;
  }
  if (head.config_hash != config_hash) {
    out.reason = path + " is the finished result of another configuration (hash " +
                 head.config_hash + "; this point's is " + config_hash +
                 "): another sweep's file, or the job file or --set values changed since. Move "
                 "it away, or choose another --out";
    return out;
  }
  out.state = PointFile::State::kFinished;
  return out;
}

}  // namespace specrun
