#include "analysis/csv_export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/atomic_output.h"
#include "common/error.h"

namespace specrun {

namespace {

std::string number(double v, int digits = 17) {
  if (std::isnan(v)) return "";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string row(const std::vector<std::string>& fields) {
  std::string line;
  for (std::size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + fields[i];
  return line + "\n";
}

std::string sequences_csv(const ModeData& m) {
  std::string out = row({"prompt_index", "prompt_id", "category", "prompt_len", "generated",
                         "verify_steps", "drafted", "accepted", "finish_reason", "wall_s"});
  for (const SequenceRecord& s : m.sequences)
    out += row({std::to_string(s.prompt_index), csv_field(s.prompt_id), csv_field(s.category),
                std::to_string(s.prompt_len), std::to_string(s.generated),
                std::to_string(s.verify_steps), std::to_string(s.drafted),
                std::to_string(s.accepted), std::to_string(s.finish_reason), number(s.wall_s)});
  return out;
}

std::string steps_csv(const ModeData& m) {
  std::string out = row({"batch", "step", "prompt_index", "active", "drafted", "accepted", "depth",
                         "bonus", "emitted"});
  for (const StepRecord& s : m.steps)
    out += row({std::to_string(s.batch), std::to_string(s.step), std::to_string(s.prompt_index),
                std::to_string(s.active), std::to_string(s.drafted), std::to_string(s.accepted),
                std::to_string(s.depth), std::to_string(s.bonus), std::to_string(s.emitted)});
  return out;
}

std::string timings_csv(const ModeData& m) {
  std::vector<std::string> header = {"row", "batch", "rank"};
  for (const char* p : kPhaseNames) header.push_back(p);
  std::string out = row(header);
  const std::size_t ranks = static_cast<std::size_t>(std::max(1, m.n_ranks));
  const std::size_t rows = m.timings_ms.size() / (ranks * kNumPhases);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t k = 0; k < ranks; ++k) {
      std::vector<std::string> f = {
          std::to_string(r), r < m.timing_batch.size() ? std::to_string(m.timing_batch[r]) : "",
          std::to_string(k)};
      for (int p = 0; p < kNumPhases; ++p)
        f.push_back(number(m.timings_ms[(r * ranks + k) * kNumPhases + p], 9));
      out += row(f);
    }
  return out;
}

// Per depth i: steps whose proposal reached depth i (offered), of those accepting >= i
// (reached) and >= i - 1 (prior); unconditional = reached / offered, conditional = reached /
// prior (docs/analysis.md; 0 where nothing was offered, as report --json gives it).
std::string acceptance_csv(const ModeData& m) {
  int k_max = 0;
  for (const StepRecord& s : m.steps) k_max = std::max(k_max, s.depth);
  std::vector<std::int64_t> offered(k_max + 1), reached(k_max + 1), prior(k_max + 1);
  for (const StepRecord& s : m.steps)
    for (int i = 1; i <= s.depth; ++i) {
      ++offered[i];
      if (s.accepted >= i) ++reached[i];
      if (s.accepted >= i - 1) ++prior[i];
    }
  std::string out = row({"depth", "offered", "reached", "prior", "unconditional", "conditional"});
  auto ratio = [](std::int64_t a, std::int64_t b) {
    return b == 0 ? std::string("0") : number(static_cast<double>(a) / static_cast<double>(b));
  };
  for (int i = 1; i <= k_max; ++i)
    out +=
        row({std::to_string(i), std::to_string(offered[i]), std::to_string(reached[i]),
             std::to_string(prior[i]), ratio(reached[i], offered[i]), ratio(reached[i], prior[i])});
  return out;
}

std::string summary_csv(const RunSummary& s) {
  std::string out =
      row({"mode", "prompts", "batches", "generated", "verify_steps", "drafted", "accepted",
           "seconds", "tokens_per_s", "tau", "alpha", "speedup", "speedup_low", "speedup_high"});
  for (const ModeSummary& m : s.modes) {
    const bool paired = s.paired && m.mode == "speculative";
    out +=
        row({csv_field(m.mode), std::to_string(m.prompts), std::to_string(m.batches),
             std::to_string(m.generated), std::to_string(m.verify_steps), std::to_string(m.drafted),
             std::to_string(m.accepted), number(m.seconds), number(m.tokens_per_s), number(m.tau),
             number(m.alpha), paired ? number(s.speedup.value) : "",
             paired ? number(s.speedup.low) : "", paired ? number(s.speedup.high) : ""});
  }
  return out;
}

}  // namespace

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::string> write_csv_tables(const std::vector<ModeData>& modes,
                                          const RunSummary& summary, const std::string& dir,
                                          bool overwrite, const std::vector<std::string>& inputs) {
  std::vector<std::pair<std::string, std::string>> files;
  files.emplace_back("summary.csv", summary_csv(summary));
  for (const ModeData& m : modes) {
    SPEC_INPUT_CHECK(m.mode.find_first_of("/\\") == std::string::npos && !m.mode.empty(),
                     "mode name \"" << m.mode << "\" cannot name a CSV file");
    files.emplace_back(m.mode + "_sequences.csv", sequences_csv(m));
    files.emplace_back(m.mode + "_steps.csv", steps_csv(m));
    files.emplace_back(m.mode + "_timings.csv", timings_csv(m));
    files.emplace_back(m.mode + "_acceptance.csv", acceptance_csv(m));
  }
  const OutputPolicy policy{overwrite, inputs, "--csv file", true};
  std::vector<std::string> paths;
  for (const auto& [name, text] : files) {
    paths.push_back((std::filesystem::path(dir) / name).string());
    check_output_path(paths.back(), policy);  // every file before any is written
  }
  create_output_folder(dir);
  for (std::size_t i = 0; i < files.size(); ++i)
    write_file_atomically(paths[i], files[i].second, policy);
  return paths;
}

}  // namespace specrun
