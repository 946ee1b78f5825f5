// `specrun prepare`: JSONL -> prompt file (declared in io/prompt_file.h). Two passes over the
// input: the first validates every line and learns which optional columns exist, the second
// writes OUT.tmp and renames it, so a bad input writes nothing and a crash leaves no OUT.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/error.h"
#include "common/json_depth.h"
#include "io/prompt_file.h"

namespace specrun {

namespace {

constexpr size_t kMaxReportedErrors = 20;

struct ParsedLine {
  std::vector<int32_t> tokens;
  bool has_id = false, has_category = false, has_text = false;
  std::string id, category, text;
};

std::string json_kind(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "an object";
}

// Parses one non-empty line. Returns "" and fills `out`, or returns what is wrong.
std::string parse_line(const std::string& line, ParsedLine& out) {
  nlohmann::json j;
  if (const std::size_t at = json_too_deep_at(line); at != std::string_view::npos)
    return "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep (at column " +
           std::to_string(at + 1) + ")";
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    std::string what = e.what();
    auto pos = what.find("parse error");
    if (pos == std::string::npos && what.find("] ") != std::string::npos)
      pos = what.find("] ") + 2;  // "[json.exception.out_of_range.406] number overflow ..."
    what = pos == std::string::npos ? what : what.substr(pos);
    // The parser sees one line at a time: its "line 1" would contradict our line number.
    if (auto at = what.find("at line 1, column "); at != std::string::npos)
      what.replace(at, 18, "at column ");
    return "not valid JSON (" + what + ")";
  }
  if (!j.is_object()) return "expected a JSON object, got " + json_kind(j);
  auto it = j.find("tokens");
  if (it == j.end()) return "missing \"tokens\" (a list of token ids)";
  if (!it->is_array()) return "\"tokens\" must be a list of token ids, got " + json_kind(*it);
  if (it->empty()) return "\"tokens\" is empty; every prompt needs at least one token";
  out.tokens.clear();
  out.tokens.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& t = (*it)[i];
    bool ok = t.is_number_integer();
    if (ok && t.is_number_unsigned())
      ok = t.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
    else if (ok)
      ok = t.get<int64_t>() >= 0 && t.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!ok)
      return "\"tokens\"[" + std::to_string(i) + "] is " + t.dump() +
             "; token ids must be integers in [0, 2147483647]";
    out.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  // `out` is reused across lines: clear every optional field.
  out.has_id = out.has_category = out.has_text = false;
  out.id.clear();
  out.category.clear();
  out.text.clear();
  if (auto id = j.find("id"); id != j.end() && !id->is_null()) {
    if (id->is_string())
      out.id = id->get<std::string>();
    else if (id->is_number_integer())
      out.id = id->dump();
    else
      return "\"id\" must be a string or an integer, got " + json_kind(*id);
    out.has_id = true;
  }
  for (auto [key, has, value] : {std::tuple{"category", &out.has_category, &out.category},
                                 std::tuple{"text", &out.has_text, &out.text}}) {
    auto v = j.find(key);
    if (v == j.end() || v->is_null()) continue;
    if (!v->is_string())
      return "\"" + std::string(key) + "\" must be a string, got " + json_kind(*v);
    *value = v->get<std::string>();
    *has = true;
  }
  return "";
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

// Calls fn(line_number, line) for each non-blank line (1-based numbers count every line).
template <typename Fn>
void for_each_line(const std::string& path, Fn fn) {
  std::ifstream in(path);
  SPEC_INPUT_CHECK(in.good(), "cannot read " << path << " (no such file, or no permission)");
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!is_blank(line)) fn(number, line);
  }
  SPEC_INPUT_CHECK(in.eof(), "error while reading " << path << " at line " << number + 1);
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

PrepareSummary prepare_prompt_file(const std::string& jsonl_path, const std::string& out_path,
                                   bool overwrite) {
  SPEC_INPUT_CHECK(overwrite || !path_exists(out_path),
                   out_path << " already exists; pass --overwrite to replace it");

  // Pass 1: validate everything, collect errors, learn the columns.
  PrepareSummary summary;
  std::vector<std::string> errors;
  int64_t n_errors = 0;
  int64_t first_with_id = 0, first_without_id = 0, n_without_id = 0;
  std::unordered_map<std::string, int64_t> id_lines;
  auto report = [&](int64_t line, const std::string& what) {
    ++n_errors;
    if (errors.size() < kMaxReportedErrors)
      errors.push_back("  line " + std::to_string(line) + ": " + what);
  };
  ParsedLine p;
  for_each_line(jsonl_path, [&](int64_t line, const std::string& text) {
    std::string what = parse_line(text, p);
    if (!what.empty()) return report(line, what);
    if (p.has_id) {
      if (first_with_id == 0) first_with_id = line;
      auto [it, inserted] = id_lines.emplace(p.id, line);
      if (!inserted)
        return report(line, "id '" + p.id + "' repeats the id of line " +
                                std::to_string(it->second) + "; ids must be unique");
    } else {
      if (first_without_id == 0) first_without_id = line;
      ++n_without_id;
    }
    summary.columns.categories |= p.has_category;
    summary.columns.text |= p.has_text;
    int64_t len = static_cast<int64_t>(p.tokens.size());
    summary.min_len = summary.prompts == 0 ? len : std::min(summary.min_len, len);
    summary.max_len = std::max(summary.max_len, len);
    summary.tokens += len;
    ++summary.prompts;
  });
  if (first_with_id != 0 && first_without_id != 0)
    report(first_without_id, "no \"id\", but line " + std::to_string(first_with_id) + " has one (" +
                                 std::to_string(n_without_id) +
                                 " lines lack one); give every prompt an id, or none");
  if (n_errors > 0) {
    std::string text;
    for (const std::string& e : errors) text += "\n" + e;
    if (n_errors > static_cast<int64_t>(errors.size()))
      text += "\n  ... and " + std::to_string(n_errors - static_cast<int64_t>(errors.size())) +
              " more bad lines";
    SPEC_INPUT_FAIL(jsonl_path << ": " << n_errors << " bad line" << (n_errors == 1 ? "" : "s")
                               << "; nothing was written. Each line must be a JSON object "
                                  "{\"tokens\": [ids...], \"id\": ..., \"category\": ..., "
                                  "\"text\": ...} with only \"tokens\" required:"
                               << text);
  }
  SPEC_INPUT_CHECK(summary.prompts > 0, jsonl_path << " holds no prompts; nothing was written");
  summary.columns.ids = first_with_id != 0;

  // Pass 2: write OUT.tmp, then rename over OUT.
  std::string tmp = out_path + ".tmp";
  struct RemoveOnFailure {
    const std::string& path;
    bool keep = false;
    ~RemoveOnFailure() {
      if (!keep) std::remove(path.c_str());
    }
  } guard{tmp};
  // A stale OUT.tmp (or a link planted there) is removed, not written through; the new one is
  // created exclusively.
  std::filesystem::remove(tmp);
  {
    PromptFileWriter writer(tmp, summary.columns, /*truncate=*/false, jsonl_path);
    for_each_line(jsonl_path, [&](int64_t line, const std::string& text) {
      std::string what = parse_line(text, p);
      SPEC_INPUT_CHECK(what.empty(), jsonl_path << " changed while being converted (line " << line
                                                << ": " << what << ")");
      writer.append(p.tokens, p.id, p.category, p.text);
    });
    SPEC_INPUT_CHECK(writer.size() == summary.prompts,
                     jsonl_path << " changed while being converted (" << writer.size()
                                << " prompts on the second read, " << summary.prompts
                                << " on the first)");
    writer.close();
  }
  SPEC_INPUT_CHECK(std::rename(tmp.c_str(), out_path.c_str()) == 0,
                   "cannot rename " << tmp << " to " << out_path << ": " << std::strerror(errno));
  guard.keep = true;
  return summary;
}

}  // namespace specrun
