// `specrun prepare`: JSONL -> prompt file (declared in io/prompt_file.h). Two passes over the
// input: the first validates every line and learns which optional columns exist, the second
// writes OUT.tmp and renames it, so a bad input writes nothing and a crash leaves no OUT.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/atomic_output.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "io/prompt_file.h"
#include "io/prompt_sources.h"

namespace specrun {

namespace {

constexpr size_t kMaxReportedErrors = 20;

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

// "line 7", or "lines 1-3, 5, 9-20 (16 lines)" (at most 8 runs shown, then "...").
std::string format_line_numbers(const std::vector<int64_t>& lines) {
  if (lines.size() == 1) return "line " + std::to_string(lines[0]);
  std::string out = "lines ";
  size_t runs = 0;
  for (size_t i = 0; i < lines.size();) {
    size_t j = i;
    while (j + 1 < lines.size() && lines[j + 1] == lines[j] + 1) ++j;
    if (++runs > 8) {
      out += ", ...";
      break;
    }
    out += (i ? ", " : "") + std::to_string(lines[i]) +
           (j > i ? "-" + std::to_string(lines[j]) : std::string());
    i = j + 1;
  }
  return out + " (" + std::to_string(lines.size()) + " lines)";
}

}  // namespace

PrepareSummary prepare_prompt_file(const std::string& jsonl_path, const std::string& out_path,
                                   bool overwrite) {
  PrepareOptions options;
  options.overwrite = overwrite;
  return prepare_prompt_file(jsonl_path, out_path, options);
}

PrepareSummary prepare_prompt_file(const std::string& jsonl_path, const std::string& out_path,
                                   const PrepareOptions& options) {
  // Never over the input, the template or the model's files (even with --overwrite), a link, or
  // an existing file without --overwrite; a read-only folder or an overlong name fails here,
  // naming the path, before the input is read.
  OutputPolicy policy;
  policy.overwrite = options.overwrite;
  policy.what = "prompt file";
  policy.inputs = {jsonl_path, options.template_file, options.model_dir};
  check_output_path(out_path, policy);

  // Pass 1: validate everything, collect errors, learn the columns. Lines with the same message
  // (a missing --model makes every text line fail alike) are reported once, with their numbers.
  PrepareSummary summary;
  std::vector<std::pair<std::string, std::vector<int64_t>>> errors;  // message, its lines
  std::unordered_map<std::string, size_t> error_index;
  int64_t n_errors = 0, n_unreported = 0;
  int64_t first_with_id = 0, first_without_id = 0, n_without_id = 0;
  std::unordered_map<std::string, int64_t> id_lines;
  auto report = [&](int64_t line, const std::string& what) {
    ++n_errors;
    if (auto it = error_index.find(what); it != error_index.end())
      return errors[it->second].second.push_back(line);
    if (errors.size() >= kMaxReportedErrors) return void(++n_unreported);
    error_index.emplace(what, errors.size());
    errors.push_back({what, {line}});
  };
  auto count = [&](int64_t line, const PreparedPrompt& p) {
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
  };
  const PromptConverter converter(options);
  std::vector<PreparedPrompt> prompts;
  for_each_line(jsonl_path, [&](int64_t line, const std::string& text) {
    std::string what = converter.convert(text, prompts);
    if (!what.empty()) return report(line, what);
    for (const PreparedPrompt& p : prompts) count(line, p);
  });
  if (first_with_id != 0 && first_without_id != 0)
    report(first_without_id, "no \"id\", but line " + std::to_string(first_with_id) + " has one (" +
                                 std::to_string(n_without_id) +
                                 " lines lack one); give every prompt an id, or none");
  if (n_errors > 0) {
    std::string text;
    for (const auto& [what, lines] : errors)
      text += "\n  " + format_line_numbers(lines) + ": " + what;
    if (n_unreported > 0) text += "\n  ... and " + std::to_string(n_unreported) + " more bad lines";
    SPEC_INPUT_FAIL(jsonl_path << ": " << n_errors << " bad line" << (n_errors == 1 ? "" : "s")
                               << "; nothing was written. "
                               << (options.layout == PromptLayout::kJsonl
                                       ? "Each line must be a JSON object with \"tokens\": "
                                         "[ids...], \"text\" or \"messages\", and optional "
                                         "\"id\" and \"category\""
                                       : std::string("Each line must be a ") +
                                             prompt_layout_name(options.layout) + " question")
                               << " (specrun prepare --help):" << text);
  }
  SPEC_INPUT_CHECK(summary.prompts > 0, jsonl_path << " holds no prompts; nothing was written");
  summary.templated_without_bos = converter.templated_without_bos();  // pass 1's count
  summary.bos_id = converter.plain_bos();
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
      std::string what = converter.convert(text, prompts);
      SPEC_INPUT_CHECK(what.empty(), jsonl_path << " changed while being converted (line " << line
                                                << ": " << what << ")");
      for (const PreparedPrompt& p : prompts) writer.append(p.tokens, p.id, p.category, p.text);
    });
    // How the prompts were made: tokenizer fingerprint, chat template, layout and options.
    nlohmann::json prepared = converter.provenance();
    prepared["templated_without_bos"] = summary.templated_without_bos;
    writer.set_attribute("prepared", prepared.dump());
    if (const std::string source = converter.chat_template_source(); !source.empty())
      writer.set_attribute("chat_template", source);
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
