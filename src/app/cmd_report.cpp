// `specrun report RESULT.h5 [--json]`: the summary of a result file (analysis/summary.h), derived
// from the raw records in the file; with several files, one row per run (a sweep's table). A
// serial command; under mpirun only rank 0 prints.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "analysis/compare.h"
#include "analysis/csv_export.h"
#include "analysis/host_load.h"
#include "analysis/outputs_export.h"
#include "analysis/summary.h"
#include "analysis/workload.h"
#include "app/command_line.h"
#include "app/commands.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "dist/mpi_comm.h"
#include "io/checked_read.h"
#include "io/provenance.h"
#include "io/result_file.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace specrun {

namespace {

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

// `specrun report A.h5 B.h5 ...`: one row per run, with the configuration keys whose values
// differ between the runs (a sweep's axes), tau, alpha, speculative tokens/s and the speedup.
int report_table(const std::vector<std::string>& files, bool json) {
  struct Row {
    std::string file;
    std::map<std::string, std::string> config;
    RunSummary summary;
    std::map<std::string, std::map<std::string, double>> ms_per_token;  // mode -> phase -> ms
  };
  std::vector<Row> rows;
  for (const std::string& path : files) {
    check_result_file(path);
    ResultReader reader(path);
    print_reader_warnings(reader);
    const ResultInfo& info = reader.info();
    Row row;
    row.file = path;
    flatten_json(parse_json_or_discarded(info.header.resolved_json), "", row.config);
    const std::vector<ModeData> modes = load_mode_data(reader);
    row.summary = summarize_run(modes, resolved_is_greedy(info.header.resolved_json),
                                resolved_seed(info.header.resolved_json));
    for (const ModeData& m : modes) row.ms_per_token[m.mode] = phase_ms_per_token(m);
    rows.push_back(std::move(row));
  }
  std::set<std::string> keys;
  for (const Row& r : rows)
    for (const auto& [k, v] : r.config) keys.insert(k);
  std::vector<std::string> differing;
  for (const std::string& k : keys) {
    if (k == "job.output" || k == "job.name") continue;
    for (const Row& r : rows) {
      auto a = r.config.find(k);
      auto b = rows.front().config.find(k);
      const std::string va = a == r.config.end() ? "" : a->second;
      const std::string vb = b == rows.front().config.end() ? "" : b->second;
      if (va != vb) {
        differing.push_back(k);
        break;
      }
    }
  }
  auto spec = [](const RunSummary& s) -> const ModeSummary* {
    for (const ModeSummary& m : s.modes)
      if (m.mode == kModeSpeculative) return &m;
    return nullptr;
  };
  if (json) {
    nlohmann::json out = {{"keys", differing}, {"runs", nlohmann::json::array()}};
    for (const Row& r : rows) {
      nlohmann::json config = nlohmann::json::object();
      for (const std::string& k : differing)
        config[k] = r.config.count(k) ? r.config.at(k) : std::string();
      nlohmann::json j = {{"file", r.file}, {"config", config}};
      const ModeSummary* m = spec(r.summary);
      j["tau"] = m ? nlohmann::json(m->tau) : nlohmann::json(nullptr);
      j["alpha"] = m ? nlohmann::json(m->alpha) : nlohmann::json(nullptr);
      j["tokens_per_s"] = m ? nlohmann::json(m->tokens_per_s) : nlohmann::json(nullptr);
      if (r.summary.paired)
        j["speedup"] = {{"value", r.summary.speedup.value},
                        {"ci_low", r.summary.speedup.low},
                        {"ci_high", r.summary.speedup.high}};
      else
        j["speedup"] = nullptr;
      j["ms_per_token"] = r.ms_per_token;
      out["runs"].push_back(j);
    }
    std::cout << out.dump(2) << std::endl;
    return 0;
  }
  std::vector<std::string> header = {"file"};
  for (const std::string& k : differing) header.push_back(k);
  for (const char* h : {"tau", "alpha", "tokens/s", "speedup [95% CI]"}) header.push_back(h);
  std::vector<std::vector<std::string>> table = {header};
  for (const Row& r : rows) {
    std::vector<std::string> line = {fs::path(r.file).filename().string()};
    for (const std::string& k : differing) line.push_back(r.config.count(k) ? r.config.at(k) : "-");
    const ModeSummary* m = spec(r.summary);
    line.push_back(m ? fixed(m->tau, 3) : "-");
    line.push_back(m && m->drafted > 0 ? fixed(m->alpha, 3) : "-");
    line.push_back(m ? fixed(m->tokens_per_s, 1) : "-");
    line.push_back(r.summary.paired ? fixed(r.summary.speedup.value, 3) + "x [" +
                                          fixed(r.summary.speedup.low, 3) + ", " +
                                          fixed(r.summary.speedup.high, 3) + "]"
                                    : "-");
    table.push_back(line);
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& line : table)
    for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  for (const auto& line : table) {
    for (std::size_t c = 0; c < line.size(); ++c)
      std::cout << (c ? "  " : "") << std::left << std::setw(static_cast<int>(width[c])) << line[c];
    std::cout << "\n";
  }
  std::cout << rows.size() << " runs; columns: the configuration keys that differ between them"
            << (differing.empty() ? " (none)" : "") << ", then speculative tau, alpha and "
            << "tokens/s, and the speedup over baseline (docs/analysis.md)\n";
  return 0;
}

// The /provenance models attribute as JSON ({} in files from before it was recorded; a value
// that is not JSON is reported as such rather than failing the whole report).
nlohmann::json parse_models(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text.empty() ? "{}" : text, nullptr, false);
  return j.is_discarded() || !j.is_object() ? nlohmann::json::object() : j;
}

// One line per model: "models: target xxh3:... (path: 3 files, 268.2 MB, hashed in 0.014 s)".
std::vector<std::string> model_lines(const std::string& text) {
  std::vector<std::string> lines;
  const nlohmann::json models = parse_models(text);
  std::vector<std::string> roles;
  for (const char* role : {"target", "draft"})
    if (models.contains(role)) roles.push_back(role);
  for (auto it = models.begin(); it != models.end(); ++it)
    if (it.key() != "target" && it.key() != "draft") roles.push_back(it.key());
  for (const std::string& role : roles) {
    const nlohmann::json& m = models[role];
    if (!m.is_object()) continue;
    std::ostringstream line;
    line << "model " << role << ": " << m.value("fingerprint", std::string("?")) << " ("
         << m.value("path", std::string("?"));
    if (m.contains("files") && m["files"].is_array()) {
      double bytes = 0;
      for (const nlohmann::json& f : m["files"]) bytes += f.value("bytes", 0.0);
      line << ": " << m["files"].size() << " files, " << fixed(bytes / 1e6, 1) << " MB, hashed in "
           << fixed(m.value("hash_s", 0.0), 3) << " s"
           << (m.value("complete", true) ? ""
                                         : "; weights by size and header only: the job did "
                                           "not finish");
    }
    line << ")";
    lines.push_back(line.str());
  }
  return lines;
}

}  // namespace

int cmd_report(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli("specrun report RESULT.h5 [MORE.h5 ...] [options]");
  cli.add_options()("json", "print the summary as one JSON object (keys: docs/analysis.md)")(
      "seed", po::value<std::uint64_t>(), "bootstrap seed (default: the job's job.seed)")(
      "outputs", po::value<std::string>(),
      "write every prompt's outputs as text to this JSONL file (id, category, prompt, per mode "
      "text, tokens, tau; speedup), decoded with the target's tokenizer")(
      "csv", po::value<std::string>(),
      "write the run's tables as CSV files into this folder: summary.csv and per mode "
      "sequences, steps, timings and acceptance (columns: docs/analysis.md)")(
      "model", po::value<std::string>(),
      "with --outputs: the model folder whose tokenizer decodes (default: the job's target)")(
      "overwrite",
      "with --outputs or --csv: replace existing files (never the result, the prompt file "
      "or a model file)");
  cli.positional("result", po::value<std::vector<std::string>>(), -1);
  if (!cli.parse(ctx, args,
                 "\nPrints tau, alpha, per-position acceptance, tokens/s per mode, the speedup "
                 "with a bootstrap\n95% interval, greedy equality, phase timings and "
                 "categories. Definitions: docs/analysis.md.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  SPEC_INPUT_CHECK(vm.count("result"), "usage: specrun report RESULT.h5 [MORE.h5 ...] [--json]");
  if (ctx.mpi.rank() != 0) return 0;
  const std::vector<std::string> files = vm["result"].as<std::vector<std::string>>();
  SPEC_INPUT_CHECK(!vm.count("csv") || (files.size() == 1 && !vm.count("outputs")),
                   "--csv writes one run's tables: give one result file, without --outputs");
  if (files.size() > 1) return report_table(files, vm.count("json") > 0);
  const std::string path = files.front();

  check_result_file(path);  // first in a child process: a corrupted file fails clearly
  ResultReader reader(path);
  print_reader_warnings(reader);
  const ResultInfo& info = reader.info();
  const bool greedy = resolved_is_greedy(info.header.resolved_json);
  const std::uint64_t seed =
      vm.count("seed") ? vm["seed"].as<std::uint64_t>() : resolved_seed(info.header.resolved_json);
  if (vm.count("outputs")) {
    const std::string out = vm["outputs"].as<std::string>();
    const OutputsExport e =
        export_outputs(reader, out, vm.count("model") ? vm["model"].as<std::string>() : "",
                       vm.count("overwrite") > 0);
    std::cout << "wrote " << out << ": " << e.prompts << " prompts"
              << (e.decoded ? ", text decoded with the " + e.tokenizer + " tokenizer"
                            : ", token ids only (the target folder has no tokenizer; pass --model)")
              << std::endl;
    return 0;
  }
  const std::vector<ModeData> modes = load_mode_data(reader);
  RunSummary summary = summarize_run(modes, greedy, seed);
  if (vm.count("csv")) {
    const std::vector<std::string> written = write_csv_tables(
        modes, summary, vm["csv"].as<std::string>(), vm.count("overwrite") > 0, {path});
    std::cout << "wrote " << written.size() << " CSV files to " << vm["csv"].as<std::string>()
              << " (summary.csv; per mode sequences, steps, timings, acceptance)" << std::endl;
    return 0;
  }
  const bool finished = !info.finished.empty();
  std::int64_t batches = 0;
  for (const std::string& mode : reader.modes()) batches += reader.batches_committed(mode);

  // Variables or versions that differed between the ranks of this run (a variable that reached
  // some ranks only): always shown, they are the first suspect of any slowdown.
  const std::vector<std::string> mismatches = recorded_mismatches(info, path);
  if (vm.count("json")) {
    nlohmann::json j = summary_to_json(summary);
    j["cross_rank_mismatches"] = mismatches;
    j["models"] = parse_models(info.header.models);
    j["target_weight_bytes"] = info.header.target_weight_bytes.empty()
                                   ? nlohmann::json(nullptr)
                                   : nlohmann::json(info.header.target_weight_bytes);
    j["hosts"] = hosts_to_json(modes);
    j["workload"] = workload_to_json(summarize_workload(modes));
    j["identities_checked"] = kIdentitiesChecked;
    j["warnings"] = reader.warnings();
    j["alarms"] = info.alarms;
    j["file"] = path;
    j["schema"] = info.schema;
    j["schema_version"] = info.schema_version;
    j["specrun_version"] = info.header.specrun_version;
    j["git_commit"] = info.header.git_commit;
    j["git_dirty"] = info.header.git_dirty;
    j["world_size"] = info.header.world_size;
    j["tp"] = info.header.tp;
    j["dp"] = info.header.dp;
    j["started"] = info.started;
    j["finished"] = info.finished;
    j["job_finished"] = finished;
    j["resumes"] = info.resumes;
    j["batches_committed"] = batches;
    std::cout << j.dump(2) << std::endl;
    return 0;
  }
  std::cout << "result " << path << ": world " << info.header.world_size << " = dp "
            << info.header.dp << " x tp " << info.header.tp << ", commit "
            << info.header.git_commit.substr(0, 12) << (info.header.git_dirty ? " (dirty)" : "")
            << ", started " << info.started;
  if (finished) std::cout << ", finished " << info.finished;
  if (info.resumes > 0) std::cout << ", resumed " << info.resumes << "x";
  std::cout << "\n";
  if (!finished)
    std::cout << "NOTE: the job did not finish (no `finished` time): reporting the " << batches
              << " committed batches; continue it with `specrun run ... --resume`\n";
  for (const std::string& alarm : info.alarms) std::cout << "ALARM " << alarm << "\n";
  if (mismatches.empty()) {
    std::cout << "cross-rank mismatches: none (every rank ran with the same recorded environment "
                 "and versions)\n";
  } else {
    std::cout << "cross-rank mismatches (" << mismatches.size() << "):\n";
    for (const std::string& m : mismatches) std::cout << "  " << m << "\n";
  }
  for (const std::string& line : model_lines(info.header.models)) std::cout << line << "\n";
  if (!info.header.target_weight_bytes.empty())
    std::cout << "target weights per rank (as loaded): "
              << describe_weight_memory(info.header.target_weight_bytes) << "\n";
  std::cout << format_summary(summary);
  std::cout << format_workload(summarize_workload(modes));
  std::cout << format_hosts(modes);
  std::cout << "identities checked for every mode: " << kIdentitiesChecked << "\n";
  return 0;
}

}  // namespace specrun
