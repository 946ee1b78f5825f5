#include "engine/job_setup.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/activity.h"
#include "common/build_info.h"
#include "common/clock.h"
#include "common/error.h"
#include "engine/decoder.h"
#include "engine/stop_tokens.h"
#include "io/checked_read.h"
#include "io/model_fingerprint.h"
#include "io/prompt_sources.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/weight_schema.h"

namespace specrun {
namespace {

// The job's backend, once the inputs every job needs are named.
BackendKind check_job_inputs(const JobConfig& config) {
  const BackendKind backend = parse_backend(config.parallel.backend, "parallel.backend");
  SPEC_INPUT_CHECK(!config.data.prompts.empty(),
                   "data.prompts is not set: give an HDF5 prompt file "
                   "made by `specrun prepare`");
  SPEC_INPUT_CHECK(!config.target.path.empty(),
                   "target.path is not set: give a Hugging Face model "
                   "directory");
  set_activity("start-up");
  return backend;
}

MpiComm world_communicator(const JobConfig& config) {
  MpiComm comm(MPI_COMM_WORLD);
  comm.set_timeout(config.parallel.comm_timeout_s, "world", MpiComm::Overdue::kFailsIfStopped);
  return comm;
}

MpiComm tp_communicator(const JobConfig& config, const World& world) {
  MpiComm comm = MpiComm::tp_group(world);
  comm.set_timeout(config.parallel.comm_timeout_s, "tensor-parallel");
  return comm;
}

// choose_threads for this rank, set for OpenMP.
ThreadChoice set_threads(const JobConfig& config, const World& world) {
  ThreadChoice choice =
      choose_threads(config.parallel.threads, std::getenv("OMP_NUM_THREADS"),
                     std::max(1u, std::thread::hardware_concurrency()), world.local_size);
  omp_set_num_threads(choice.threads);
  return choice;
}

// The prompts a job decodes: the first data.max_prompts, or all.
std::int64_t prompts_used(const JobConfig& config, const PromptReader& prompts) {
  return config.data.max_prompts > 0 ? std::min(config.data.max_prompts, prompts.size())
                                     : prompts.size();
}

// Rank 0: the prompt file read whole in a child process, its prompt lengths checked against the
// target's context (when its config.json is there) and its hash; "" on the other ranks.
std::string check_prompts(const JobConfig& config, const World& world, const Logger& log) {
  if (!world.is_root()) return "";
  const std::string target_config = config.target.path.resolved + "/config.json";
  const bool have_target = std::filesystem::exists(target_config);
  const ModelConfig target = have_target ? ModelConfig::from_file(target_config) : ModelConfig{};
  const SteadyClockPoint t_check = SteadyClock::now();
  std::string hash = check_prompt_file(config.data.prompts.resolved, [&](const PromptReader& p) {
    check_prompt_tokenizer(p.root_attribute("prepared"), config.data.prompts.resolved,
                           config.target.path.resolved, "target.path");
    if (have_target)
      check_prompt_lengths(p, prompts_used(config, p), target, config.decode.max_new_tokens);
  });
  std::ostringstream line;
  line << "prompt file " << config.data.prompts.resolved << " read and checked in " << std::fixed
       << std::setprecision(3) << seconds_since(t_check) << " s";
  log.info(line.str());
  return hash;
}

// Every rank, once rank 0 has checked the file.
PromptReader open_prompts(const JobConfig& config, MpiComm& world_comm) {
  world_comm.barrier();
  return PromptReader(config.data.prompts.resolved);
}

// Rank 0: job.output claimed when its directory exists (a missing one fails the job's checks).
OutputLock claim_output(const JobConfig& config, const World& world) {
  if (!world.is_root()) return OutputLock();
  const std::filesystem::path dir = std::filesystem::path(config.job.output.resolved).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir)) return OutputLock();
  return OutputLock::acquire(config.job.output.resolved, "job.output");
}

}  // namespace

ThreadChoice choose_threads(int configured, const char* omp_num_threads, unsigned cores,
                            int local_ranks) {
  const std::string omp = omp_num_threads == nullptr ? "" : omp_num_threads;
  const std::string omp_text = "OMP_NUM_THREADS=" + omp;
  if (configured > 0)
    return {configured, "parallel.threads = " + std::to_string(configured) +
                            (omp.empty() ? "" : ", over " + omp_text)};
  if (!omp.empty()) {
    // OpenMP's form: a positive integer, or a comma-separated list of them (nesting levels);
    // the first is this rank's.
    const std::string first = omp.substr(0, omp.find(','));
    const bool digits = !first.empty() && first.size() <= 6 &&
                        first.find_first_not_of("0123456789 ") == std::string::npos &&
                        first.find_first_not_of(' ') != std::string::npos;
    const int n = digits ? std::stoi(first) : 0;
    SPEC_INPUT_CHECK(n > 0, omp_text << " is not a positive thread count: set it to one (e.g. 2), "
                                     << "unset it, or set parallel.threads, which wins over it");
    return {n, omp_text + " (parallel.threads = 0)"};
  }
  const int n = std::max(1, static_cast<int>(cores) / std::max(1, local_ranks));
  return {n, std::to_string(cores) + " cores / " + std::to_string(std::max(1, local_ranks)) +
                 " ranks on the node (parallel.threads = 0, OMP_NUM_THREADS unset)"};
}

JobSetup::JobSetup(const JobConfig& config, MpiSession& mpi)
    : world(mpi.world(config.parallel.tp)),
      log(world.rank, world.size),
      backend(check_job_inputs(config)),
      world_comm(world_communicator(config)),
      tp_comm(tp_communicator(config, world)),
      self_comm(MPI_COMM_SELF),
      thread_choice(set_threads(config, world)),
      threads(thread_choice.threads),
      prompts_hash(check_prompts(config, world, log)),
      prompts(open_prompts(config, world_comm)),
      n_prompts(prompts_used(config, prompts)),
      records(gather_provenance(world_comm, collect_local_provenance(mpi))),
      output_lock(claim_output(config, world)) {}

std::string weight_memory_line(const LanguageModel& model, const World& world) {
  auto size = [](double bytes) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(1);
    if (bytes >= (1 << 20))
      out << bytes / (1 << 20) << " MiB";
    else
      out << bytes / 1024 << " KiB";
    return out.str();
  };
  std::ostringstream line;
  line << "target weights: " << size(static_cast<double>(model.weight_bytes())) << " per rank (tp "
       << world.tp;
  if (const ExpertRouting* r = model.routing()) {
    const int per_rank = r->n_experts / r->ep;
    line << ", ep " << r->ep << ": " << per_rank << " of " << r->n_experts << " experts per rank"
         << (r->ep == 1 && world.tp > 1 ? ", each cut by tp" : "") << ", "
         << size(static_cast<double>(r->expert_bytes)) << " per expert";
  }
  line << ")";
  return line.str();
}

JobTarget load_target(const JobConfig& config, JobSetup& job, const Checkpoint& checkpoint) {
  JobTarget t;
  t.factory = std::make_unique<ModelFactory>(job.backend, job.tp_comm, job.self_comm, job.world,
                                             job.threads, config.parallel.comm_timeout_s);
  t.factory->set_cuda_launch(
      CudaLaunchOptions{config.parallel.cuda_graphs, config.parallel.cuda_pdl,
                        config.parallel.cuda_tensor_cores, config.parallel.cuda_fused_ops});
  t.factory->set_expert_parallel(config.parallel.ep);
  t.model = t.factory->load(checkpoint, /*sharded=*/true);
  job.log.info(weight_memory_line(*t.model, job.world));
  if (const std::size_t kv = t.model->kv_bytes_per_token(); kv > 0)
    job.log.info("target KV cache: " + std::to_string(kv) + " bytes per token per rank (" +
                 std::to_string(t.model->config().num_layers) + " layers)");
  if (t.model->config().architecture == "KimiK25ForConditionalGeneration")
    job.log.info("target " + t.model->config().architecture +
                 ": its text model (text_config) runs; the vision tower is ignored (image inputs "
                 "are not supported)");
  t.ops = make_token_ops(job.backend, t.factory->cuda_context());
  // Every rank's, for the result file; the line above is rank 0's.
  const std::int64_t mine = static_cast<std::int64_t>(t.model->weight_bytes());
  t.weight_bytes.resize(static_cast<std::size_t>(job.world_comm.size()));
  job.world_comm.all_gather(&mine, t.weight_bytes.data(), sizeof mine);
  if (std::adjacent_find(t.weight_bytes.begin(), t.weight_bytes.end(), std::not_equal_to<>()) !=
      t.weight_bytes.end())
    job.log.info("target weights differ between ranks: " + describe_weight_memory(t.weight_bytes));
  return t;
}

std::string models_json(const JobConfig& config, bool contents) {
  nlohmann::json models = nlohmann::json::object();
  auto add_model = [&](const char* role, const std::string& dir) {
    nlohmann::json m = config.debug.fingerprints ? nlohmann::json(fingerprint_model(dir, contents))
                                                 : nlohmann::json::object();
    m["path"] = dir;
    // How its weights are stored (issue 44): compare names a change. A folder whose config.json
    // is not a model's (an EAGLE-3 head) or not readable has none here; the load says why.
    try {
      m["quantization"] = quantization_summary(
          ModelConfig::from_file((std::filesystem::path(dir) / "config.json").string()));
    } catch (const Error&) {
    }
    models[role] = std::move(m);
  };
  add_model("target", config.target.path.resolved);
  if (!config.draft.path.empty() && std::filesystem::is_directory(config.draft.path.resolved))
    add_model("draft", config.draft.path.resolved);
  return models.dump();
}

std::string draft_is_target(const JobConfig& config) {
  if (config.draft.kind != "model" || config.draft.path.empty()) return "";
  std::error_code ec;
  if (!std::filesystem::equivalent(config.target.path.resolved, config.draft.path.resolved, ec))
    return "";
  return "preflight: draft.path (" + config.draft.path.resolved + ") is target.path (" +
         config.target.path.resolved +
         "): the draft model is the target itself, so acceptance says nothing about a draft (set "
         "draft.path to the draft's folder)";
}

std::string same_model_contents(const std::string& models_json_text) {
  const nlohmann::json j = nlohmann::json::parse(models_json_text, nullptr, false);
  auto fingerprint = [&](const char* role) -> std::string {
    if (!j.is_object() || !j.contains(role) || !j[role].is_object()) return "";
    const nlohmann::json& m = j[role];
    if (!m.contains("fingerprint") || !m["fingerprint"].is_string()) return "";
    if (m.contains("complete") && m["complete"].is_boolean() && !m["complete"].get<bool>())
      return "";
    return m["fingerprint"].get<std::string>();
  };
  const std::string target = fingerprint("target"), draft = fingerprint("draft");
  if (target.empty() || target != draft) return "";
  auto path = [&](const char* role) {
    return j[role].contains("path") && j[role]["path"].is_string()
               ? j[role]["path"].get<std::string>()
               : std::string("?");
  };
  return "preflight: the draft model's files (" + path("draft") + ") are the target's (" +
         path("target") + "; content fingerprint " + target +
         "): the draft is a copy of the target, so acceptance says nothing about a draft";
}

ResultHeader job_header(const JobConfig& config, const World& world,
                        const std::string& prompts_hash,
                        const std::vector<ProvenanceRecord>& records, const std::string* models) {
  ResultHeader header;
  const BuildInfo& b = build_info();
  header.specrun_version = b.version;
  header.git_commit = b.git_commit;
  header.git_dirty = b.git_dirty;
  header.world_size = world.size;
  header.tp = world.tp;
  header.dp = world.dp;
  header.job_toml = config.job_text;
  header.resolved_json = to_json(config).dump();
  header.config_hash = config_hash_hex(config);
  header.prompts_path = config.data.prompts.text;
  header.prompts_hash = prompts_hash;
  for (const ProvenanceRecord& r : records) header.provenance.push_back(nlohmann::json(r).dump());
  header.provenance_mismatches = nlohmann::json(find_mismatches(records)).dump();
  // Which checkpoints, by content: a model replaced at the same path is told apart (compare).
  // Each file is hashed whole (io/model_fingerprint.h).
  header.models = models ? *models : models_json(config);
  header.stop_token_ids =
      nlohmann::json(all_stop_ids(config, ModelConfig::from_file(config.target.path.resolved +
                                                                 "/config.json")))
          .dump();
  return header;
}

SamplingParams sampling_params(const JobConfig& config) {
  SamplingParams sampling;
  sampling.temperature = static_cast<float>(config.decode.temperature);
  sampling.top_k = config.decode.top_k;
  sampling.top_p = static_cast<float>(config.decode.top_p);
  return sampling;
}

void check_target_dtype(const JobConfig& config, const Checkpoint& ckpt) {
  const std::string& want = config.target.dtype;
  if (want == "auto") return;
  const TensorView& t = ckpt.tensor(embedding_tensor(ckpt.config()));
  std::string have = dtype_name(t.dtype);
  std::string want_upper = want == "f32" ? "F32" : want == "bf16" ? "BF16" : "F16";
  SPEC_INPUT_CHECK(have == want_upper, "target.dtype = \""
                                           << want << "\" but the checkpoint " << ckpt.dir()
                                           << " stores " << have
                                           << " weights; specrun keeps weights in their checkpoint "
                                              "dtype: set target.dtype = \"auto\" or convert the "
                                              "checkpoint");
}

}  // namespace specrun
