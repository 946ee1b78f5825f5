#include "analysis/outputs_export.h"

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "analysis/summary.h"
#include "common/atomic_output.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "io/checked_read.h"
#include "io/prompt_file.h"
#include "io/records.h"
#include "text/tokenizer.h"

namespace specrun {

namespace {

std::string resolved_string(const nlohmann::json& resolved, const char* section, const char* key) {
  if (!resolved.is_object() || !resolved.contains(section)) return "";
  const nlohmann::json& s = resolved[section];
  if (!s.is_object() || !s.contains(key) || !s[key].is_string()) return "";
  return s[key].get<std::string>();
}

nlohmann::json mode_entry(const SequenceRecord& s, const Tokenizer* tokenizer,
                          int last_prompt_token, bool speculative) {
  nlohmann::json j;
  std::vector<int> ids(s.output_tokens.begin(), s.output_tokens.end());
  j["text"] = tokenizer ? nlohmann::json(tokenizer->decode_after(ids, last_prompt_token))
                        : nlohmann::json(nullptr);
  j["tokens"] = ids;
  j["generated"] = s.generated;
  j["finish"] = s.finish_reason == kFinishEos ? "eos" : "length";
  j["wall_s"] = s.wall_s;
  j["verify_steps"] = s.verify_steps;
  // Per prompt, as the summary's per-category figures: tokens after the prefill's per step.
  j["tau"] = s.verify_steps > 0 ? nlohmann::json(static_cast<double>(s.generated - 1) /
                                                 static_cast<double>(s.verify_steps))
                                : nlohmann::json(nullptr);
  j["alpha"] =
      speculative && s.drafted > 0
          ? nlohmann::json(static_cast<double>(s.accepted) / static_cast<double>(s.drafted))
          : nlohmann::json(nullptr);
  return j;
}

std::string target_folder(const ResultReader& reader, const std::string& model_dir) {
  return model_dir.empty()
             ? resolved_string(parse_json_or_discarded(reader.info().header.resolved_json),
                               "target", "path")
             : model_dir;
}

// The files `report --outputs` reads: the result, the recorded prompt file and the tokenizer's
// folder (OutputPolicy::inputs). An output may be none of them.
std::vector<std::string> export_inputs(const ResultReader& reader, const std::string& model_dir) {
  std::vector<std::string> inputs = {reader.path()};
  const std::string prompts = resolved_string(
      parse_json_or_discarded(reader.info().header.resolved_json), "data", "prompts");
  if (!prompts.empty()) inputs.push_back(prompts);
  if (const std::string target = target_folder(reader, model_dir); !target.empty())
    inputs.push_back(target);
  return inputs;
}

}  // namespace

OutputsExport export_outputs(const ResultReader& reader, const std::string& out_path,
                             const std::string& model_dir, bool overwrite) {
  const ResultInfo& info = reader.info();
  OutputPolicy policy;
  policy.overwrite = overwrite;
  policy.inputs = export_inputs(reader, model_dir);
  policy.what = "--outputs file";
  check_output_path(out_path, policy);  // before any work: a bad path fails at once

  // The records hold what `report` checks before it prints a number: the per-prompt tau and
  // alpha below come from the same rows.
  for (const ModeData& m : load_mode_data(reader)) check_identities(m);

  const nlohmann::json resolved = parse_json_or_discarded(info.header.resolved_json);
  const std::string target = target_folder(reader, model_dir);
  const std::string prompts_path = resolved_string(resolved, "data", "prompts");
  SPEC_INPUT_CHECK(!prompts_path.empty(),
                   reader.path() << ": the job's data.prompts is not recorded; cannot name the "
                                    "prompts of the outputs");
  const std::string hash = check_prompt_file(prompts_path);  // in a child process first
  SPEC_INPUT_CHECK(hash == info.header.prompts_hash,
                   prompts_path << " is not the prompt file " << reader.path()
                                << " was made from (content hash " << hash << ", the run recorded "
                                << info.header.prompts_hash << ")");
  const PromptReader prompts(prompts_path);
  OutputsExport result;
  std::unique_ptr<Tokenizer> tokenizer;
  if (!target.empty() && std::filesystem::is_directory(target))
    tokenizer = load_tokenizer_for(target);
  result.decoded = tokenizer != nullptr;
  result.tokenizer = tokenizer ? tokenizer->format() : "";

  // prompt index -> (mode -> record)
  std::map<std::int64_t, std::map<std::string, SequenceRecord>> by_prompt;
  for (const std::string& mode : reader.modes())
    for (SequenceRecord& s : reader.sequences(mode)) by_prompt[s.prompt_index][mode] = std::move(s);

  AtomicOutput out(out_path, policy);
  for (const auto& [index, modes] : by_prompt) {
    const Prompt p = prompts.read(index, 1).front();
    const std::vector<int> prompt_ids(p.tokens.begin(), p.tokens.end());
    nlohmann::json line = {{"prompt_index", index},
                           {"id", p.id.empty() ? std::to_string(index) : p.id},
                           {"category", p.category},
                           {"prompt_tokens", prompt_ids.size()}};
    std::string text = prompts.read_text(index);
    if (text.empty() && tokenizer) text = tokenizer->decode(prompt_ids);
    line["prompt"] = text;
    const int last = prompt_ids.empty() ? -1 : prompt_ids.back();
    for (const auto& [mode, s] : modes)
      line[mode] = mode_entry(s, tokenizer.get(), last, mode == kModeSpeculative);
    auto b = modes.find(kModeBaseline), s = modes.find(kModeSpeculative);
    if (b != modes.end() && s != modes.end() && b->second.generated > 0 &&
        s->second.generated > 0 && s->second.wall_s > 0)
      line["speedup"] =
          (b->second.wall_s / b->second.generated) / (s->second.wall_s / s->second.generated);
    else
      line["speedup"] = nullptr;
    out.write(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    ++result.prompts;
  }
  out.commit();
  return result;
}

}  // namespace specrun
