#include "engine/decode_job.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "analysis/host_load.h"
#include "analysis/summary.h"
#include "common/activity.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/host_stats.h"
#include "common/log.h"
#include "dist/gather.h"
#include "dist/mpi_comm.h"
#include "engine/acceptance_alarm.h"
#include "engine/batch_codec.h"
#include "engine/decoder.h"
#include "engine/stop_request.h"
#include "engine/stop_tokens.h"
#include "io/checked_read.h"
#include "io/prompt_file.h"
#include "io/provenance.h"
#include "io/result_file.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "model/weight_schema.h"
#include "spec/drafter_registry.h"
#include "spec/token_ops.h"

namespace specrun {
namespace {

// Which batches each mode has already committed (--resume), known on every rank.
std::map<std::string, std::set<std::int64_t>> committed_batches(const JobConfig& config,
                                                                MpiComm& world_comm,
                                                                const World& world) {
  std::map<std::string, std::set<std::int64_t>> out;
  for (const std::string& mode : config.decode.modes) {
    std::vector<std::int64_t> done;
    if (world.is_root()) {
      ResultReader reader(result_resume_path(config.job.output.resolved));
      done = reader.committed_batches(mode);
    }
    std::int64_t n = static_cast<std::int64_t>(done.size());
    world_comm.broadcast(&n, sizeof(n), 0);
    done.resize(n);
    if (n > 0) world_comm.broadcast(done.data(), n * sizeof(std::int64_t), 0);
    out[mode] = std::set<std::int64_t>(done.begin(), done.end());
  }
  return out;
}

// Resume is allowed only for the same configuration and the same prompts. The file resumed is
// job.output, or its unfinished replacement (a job.overwrite job stopped before it finished).
void check_resumable(const JobConfig& config, const std::string& prompts_hash, const Logger& log) {
  const std::string path = result_resume_path(config.job.output.resolved);
  check_result_file(path);  // in a child: corrupt files fail clearly
  ResultReader reader(path);
  for (const std::string& w : reader.warnings()) log.warn(w + "; --resume continues after them");
  const ResultHeader& h = reader.info().header;
  check_resume_schema(path, reader.info().schema_version, h.specrun_version);
  SPEC_INPUT_CHECK(h.config_hash == config_hash_hex(config),
                   "cannot resume " << path
                                    << ": the job configuration differs from the one recorded "
                                       "in it (hash "
                                    << h.config_hash << ", now " << config_hash_hex(config)
                                    << "); run with the same job file and --set values, or "
                                       "write to a new job.output");
  SPEC_INPUT_CHECK(h.prompts_hash == prompts_hash,
                   "cannot resume " << path << ": the prompt file " << config.data.prompts.resolved
                                    << " differs from the one recorded (" << h.prompts_path << ", "
                                    << h.prompts_hash << ")");
}

// Rank 0, before the models load, so that a bad job.output fails fast: the checks of creating
// (or of resuming) the result file, touching nothing.
void check_result_target(const JobConfig& config, const RunOptions& options,
                         const std::string& prompts_hash, const Logger& log) {
  if (options.resume)
    check_resumable(config, prompts_hash, log);
  else
    ResultWriter::check_creatable(config.job.output.resolved, config.job.overwrite);
}

// The result file, created (or reopened for --resume) by rank 0 once the models loaded, so that a
// job whose drafter or model fails to load leaves an existing file (job.overwrite, --resume) as
// it was. Rank 0 only; errors abort every rank through main.
std::unique_ptr<ResultWriter> open_result(
    const JobConfig& config, const World& world, const RunOptions& options,
    const std::vector<ProvenanceRecord>& records, const std::string& prompts_hash,
    const std::string& models, const std::vector<std::int64_t>& weight_bytes, const Logger& log) {
  std::unique_ptr<ResultWriter> writer;
  if (options.resume) {  // checked by check_result_target
    writer = std::make_unique<ResultWriter>(ResultWriter::reopen(config.job.output.resolved));
  } else {
    // Never silently: a replaced result is named in the log (job.overwrite = true). It stays
    // whole until this job finishes (ResultWriter::create).
    if (config.job.overwrite && std::filesystem::exists(config.job.output.resolved))
      log.warn("job.overwrite = true (" + config.origin("job.overwrite") + "): replacing " +
               config.job.output.resolved + ", the result of an earlier run, when this job " +
               "finishes; until then the new result is " +
               result_replacement_path(config.job.output.resolved));
    ResultHeader header = job_header(config, world, prompts_hash, records, &models);
    header.target_weight_bytes = weight_bytes;
    writer = std::make_unique<ResultWriter>(
        ResultWriter::create(config.job.output.resolved, header, config.job.overwrite));
  }
  for (const Mismatch& m : find_mismatches(records)) log.warn(describe(m));
  return writer;
}

DecodeOptions decode_options(const JobConfig& config) {
  DecodeOptions decode;
  decode.max_new_tokens = config.decode.max_new_tokens;
  decode.shape = config.decode.shape;
  decode.sampling = sampling_params(config);
  decode.stop_at_eos = config.decode.stop_at_eos;
  decode.seed = static_cast<std::uint64_t>(config.job.seed);
  decode.acceptance = parse_synthetic_acceptance(config.decode.acceptance);
  decode.inject_delay_ms = config.debug.inject_delay_ms;
  decode.inject_phase = config.debug.inject_phase;
  return decode;
}

std::string format_eta(double seconds) {
  std::ostringstream out;
  int s = static_cast<int>(std::lround(seconds));
  if (s >= 3600)
    out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s / 60) % 60 << "m";
  else if (s >= 60)
    out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else
    out << s << "s";
  return out.str();
}

// Progress of the job, kept on rank 0: one line per batch written.
class Progress {
 public:
  Progress(std::int64_t n_prompts, std::int64_t n_batches, std::int64_t batches_total)
      : n_prompts_(n_prompts), n_batches_(n_batches), total_(batches_total) {}

  void batch_written(const std::string& mode, const BatchResult& merged, const Logger& log) {
    Mode& mp = modes_[mode];
    double batch_wall = 0;
    for (const SequenceRecord& s : merged.sequences) {
      mp.prompts += 1;
      mp.tokens += s.generated;
      mp.steps += s.verify_steps;
      mp.step_tokens += s.generated - 1;
      batch_wall = std::max(batch_wall, s.wall_s);
    }
    mp.seconds += batch_wall;
    ++done_;
    const double elapsed = seconds_since(start_);
    const double eta = done_ > 0 ? elapsed / done_ * (total_ - done_) : 0;
    std::ostringstream line;
    line << std::fixed << "[" << mode << "] batch " << merged.batch + 1 << "/" << n_batches_ << ": "
         << mp.prompts << "/" << n_prompts_ << " prompts, " << std::setprecision(1)
         << (mp.seconds > 0 ? mp.tokens / mp.seconds : 0.0) << " tokens/s";
    if (mode == kModeSpeculative)
      line << std::setprecision(2) << ", tau "
           << (mp.steps > 0 ? static_cast<double>(mp.step_tokens) / mp.steps : 0.0);
    line << ", ETA " << format_eta(eta);
    log.info(line.str());
  }
  std::int64_t done() const { return done_; }
  std::int64_t total() const { return total_; }

 private:
  struct Mode {
    std::int64_t prompts = 0, tokens = 0, steps = 0, step_tokens = 0;
    double seconds = 0;
  };
  std::map<std::string, Mode> modes_;
  std::int64_t n_prompts_, n_batches_, total_, done_ = 0;
  SteadyClockPoint start_ = SteadyClock::now();
};

// Merges one dp group's per-tp-rank results; timings, CPU rows and host snapshots are stored for
// every world rank (ranks of other groups are NaN for this batch).
BatchResult merge_for_world(const std::vector<std::string>& blobs, int group, const World& world) {
  std::vector<BatchResult> parts;
  for (int r = 0; r < world.tp; ++r) parts.push_back(decode_batch(blobs[group * world.tp + r]));
  return place_group(merge_group(parts), group * world.tp, world.size);
}

// This rank's host after a batch: the snapshot (other processes of the job on this host are not
// counted as busy; on CUDA the GPU's clocks, temperature, power and slowdowns) and its busy
// processes, into `result` (one rank's row).
void record_host(HostMonitor& monitor, ModelFactory& factory, BatchResult& result) {
  HostSnapshot snap = monitor.sample();
  factory.sample_device(snap);
  result.host.assign(snap.values.begin(), snap.values.end());
  std::string busy;
  for (const std::string& b : snap.busy) busy += (busy.empty() ? "" : "; ") + b;
  result.host_busy = {busy};
}

// The process ids of every rank (a rank's busy-process scan leaves the job's own out).
std::set<long> job_pids(MpiComm& world_comm) {
  const std::int64_t mine = static_cast<std::int64_t>(::getpid());
  std::vector<std::int64_t> all(static_cast<std::size_t>(world_comm.size()));
  world_comm.all_gather(&mine, all.data(), sizeof mine);
  return std::set<long>(all.begin(), all.end());
}

// The models, the drafter and the decisions of one rank, loaded once for the job.
struct RankModels {
  JobTarget target;  // the factory, the target model, the token decisions
  // A mixture-of-experts draft model's routing, pass by pass (declared before the drafter, whose
  // model reports to it: destroyed after it).
  std::unique_ptr<DraftExpertLog> draft_experts = std::make_unique<DraftExpertLog>();
  std::unique_ptr<Drafter> drafter;
  DType target_weights = DType::kF32;  // the checkpoint's stored type
};

RankModels load_models(const JobConfig& config, JobSetup& job) {
  RankModels m;
  Checkpoint target_ckpt(config.target.path.resolved);
  check_target_dtype(config, target_ckpt);
  m.target_weights = target_ckpt.tensor(embedding_tensor(target_ckpt.config())).dtype;
  m.target = load_target(config, job, target_ckpt);
  if (config.uses_mode(kModeSpeculative)) {
    DrafterContext context{*m.target.factory,
                           *m.target.model,
                           target_ckpt,
                           *m.target.ops,
                           decode_options(config).draft(),
                           m.draft_experts.get()};
    m.drafter = make_drafter(config, context);
  }
  return m;
}

// How the prompts are cut into batches.
struct BatchPlan {
  std::int64_t n_prompts = 0, batch_size = 1, n_batches = 0;
};

// Decodes this rank's batches round by round (in round r, group g decodes batch r*dp + g), every
// mode of decode.modes on each, skipping what `done` holds; rank 0 gathers every group's
// records and timings after each mode and appends them to `writer`, and feeds the speculative
// batches to the acceptance alarm. Returns kSignal when a stop signal ended it early, kAlarm when
// decode.min_tau did (its text in `alarm`, on rank 0); every rank learns of it at the same mode
// boundary.
enum class RoundsEnd { kDone, kSignal, kAlarm };
RoundsEnd decode_rounds(const JobConfig& config, const World& world, MpiComm& world_comm,
                        PromptReader& prompts, const BatchPlan& plan,
                        std::map<std::string, std::set<std::int64_t>>& done, BatchDecoder& decoder,
                        Communicator& decisions, ModelFactory& factory, ResultWriter* writer,
                        Progress& progress, const Logger& log, std::string& alarm_stop) {
  HostMonitor host(job_pids(world_comm));
  AcceptanceAlarm alarm(config.decode.alarm_steps, config.decode.min_tau);
  // 0: go on; 1: a stop signal; 2: rank 0's acceptance alarm stops the job.
  auto stop_everywhere = [&]() {
    set_activity("batch-boundary");  // names the phase should a rank not arrive
    float flag = !alarm_stop.empty() ? 2.0f : stop_requested() ? 1.0f : 0.0f;
    world_comm.all_reduce_max(&flag, 1);
    return flag > 1 ? RoundsEnd::kAlarm : flag > 0 ? RoundsEnd::kSignal : RoundsEnd::kDone;
  };
  const std::int64_t rounds = (plan.n_batches + world.dp - 1) / world.dp;
  for (std::int64_t round = 0; round < rounds; ++round) {
    const std::int64_t my_batch = round * world.dp + world.dp_index;
    std::vector<Prompt> batch_prompts;
    if (my_batch < plan.n_batches) {
      BatchRange range = batch_range(plan.n_prompts, plan.batch_size, my_batch);
      batch_prompts = prompts.read(range.first, range.count);
    }
    for (const std::string& mode : config.decode.modes) {
      if (const RoundsEnd end = stop_everywhere(); end != RoundsEnd::kDone) return end;
      const bool mine = my_batch < plan.n_batches && !done[mode].count(my_batch);
      std::string payload;
      if (mine) {
        decisions.reset_timing();
        BatchResult result = decoder.run(mode, my_batch, batch_prompts);
        record_host(host, factory, result);
        payload = encode_batch(result, world.tp_rank == 0);
      }
      set_activity("batch-boundary");
      std::vector<std::string> blobs = gather_strings(world_comm, payload, 0);
      if (!world.is_root()) continue;
      for (int g = 0; g < world.dp; ++g) {
        if (blobs[g * world.tp].empty()) continue;
        BatchResult merged = merge_for_world(blobs, g, world);
        writer->append_batch(mode, merged);
        progress.batch_written(mode, merged, log);
        if (mode != kModeSpeculative) continue;
        const AcceptanceAlarm::Verdict verdict = alarm.add(merged);
        if (!verdict.warning.empty()) {
          log.warn(verdict.warning);
          writer->record_alarm(verdict.warning);
        }
        if (!verdict.stop.empty() && alarm_stop.empty()) {
          writer->record_alarm(verdict.stop);
          alarm_stop = verdict.stop;
        }
      }
    }
  }
  // Every batch is done: only the alarm can still end the job as a failure (a stop signal this
  // late lets it finish).
  float flag = alarm_stop.empty() ? 0.0f : 1.0f;
  world_comm.all_reduce_max(&flag, 1);
  return flag > 0 ? RoundsEnd::kAlarm : RoundsEnd::kDone;
}

}  // namespace

bool tensor_core_projections(DType weights, const ModelConfig& target) {
  const int m = kCudaTensorCoreInputMultiple;
  return weights == DType::kBF16 && target.hidden_size % m == 0 &&
         target.intermediate_size % m == 0 && (target.num_heads * target.head_dim) % m == 0;
}

std::string batch_variance_warning(const JobConfig& config, BackendKind backend, DType weights,
                                   const ModelConfig& target) {
  if (backend != BackendKind::kCuda || config.decode.temperature > 0 ||
      !config.uses_mode(kModeSpeculative))
    return "";
  const bool eligible = tensor_core_projections(weights, target);
  const bool tensor_cores = config.parallel.cuda_tensor_cores && eligible;
  const int limit = tensor_cores ? kCudaTensorCoreBatchInvariantTokens : kCudaBatchInvariantTokens;
  const int window = 1 + config.decode.shape.max_nodes();  // the root and the proposal
  const std::int64_t tokens = static_cast<std::int64_t>(config.data.batch_size) * window;
  if (tokens <= limit) return "";
  std::ostringstream line;
  line << "data.batch_size " << config.data.batch_size << " x " << window
       << " tokens per verify window exceeds the " << limit
       << " tokens the CUDA kernels keep batch-invariant"
       << (tensor_cores ? " (BF16 weights on the tensor cores)" : "");
  if (config.parallel.cuda_tensor_cores && !eligible)
    line << " (parallel.cuda_tensor_cores takes BF16 weights with projection inputs a multiple of "
         << kCudaTensorCoreInputMultiple << "; the target's are " << dtype_name(weights)
         << ", hidden " << target.hidden_size << ", intermediate " << target.intermediate_size
         << ")";
  line << ": speculative greedy output may differ from baseline at a near-tie; data.batch_size <= "
       << std::max(1, limit / window) << " keeps them identical";
  if (!config.parallel.cuda_tensor_cores && eligible &&
      tokens <= kCudaTensorCoreBatchInvariantTokens)
    line << ", and so does parallel.cuda_tensor_cores = true (BF16 weights, up to "
         << kCudaTensorCoreBatchInvariantTokens << " tokens)";
  return line.str();
}

// `specrun preflight`'s verdict, once the models and the drafter are loaded (every rank): rank 0
// checks every prompt against the target and gathers the warnings a run would give at its start
// (a draft that is the target, by folder or by content; batch variance on CUDA); nothing is
// written. The content fingerprints are taken only when the files' headers already agree.
int preflight_verdict(const JobConfig& config, JobSetup& job, const RankModels& models,
                      std::int64_t n_batches, double load_s) {
  const World& world = job.world;
  if (world.is_root()) {
    check_all_prompts(job.prompts, job.n_prompts, models.target.model->config(),
                      config.decode.max_new_tokens);
    std::vector<std::string> warnings;
    if (std::string w = draft_is_target(config); !w.empty()) {
      warnings.push_back(std::move(w));
    } else {
      // Sizes and headers first (milliseconds); the whole contents only when those agree.
      const nlohmann::json headers =
          nlohmann::json::parse(models_json(config, false), nullptr, false);
      auto fingerprint = [&](const char* role) {
        return headers.is_object() && headers.contains(role) && headers[role].is_object()
                   ? headers[role].value("fingerprint", std::string())
                   : std::string();
      };
      if (!fingerprint("target").empty() && fingerprint("target") == fingerprint("draft"))
        if (std::string same = same_model_contents(models_json(config, true)); !same.empty())
          warnings.push_back(std::move(same));
    }
    if (std::string w = batch_variance_warning(config, job.backend, models.target_weights,
                                               models.target.model->config());
        !w.empty())
      warnings.push_back(std::move(w));
    for (const std::string& w : warnings) job.log.warn(w);
    std::ostringstream line;
    line << "preflight " << config.job.name << ": ready to run " << job.n_prompts << " prompts in "
         << n_batches << " batches on world " << world.size << " = dp " << world.dp << " x tp "
         << world.tp << "; target" << (models.drafter ? " and draft" : "")
         << " loaded and checked in " << std::fixed << std::setprecision(3) << load_s
         << " s; nothing decoded, " << config.job.output.resolved << " not written; "
         << warnings.size() << " warning" << (warnings.size() == 1 ? "" : "s");
    job.log.info(line.str());
  }
  job.world_comm.barrier();
  return 0;
}

int run_decode_job(const JobConfig& config, const RunOptions& options, JobSetup& job) {
  const World& world = job.world;
  const Logger& log = job.log;
  const BackendKind backend = job.backend;
  MpiComm& world_comm = job.world_comm;
  PromptReader& prompts = job.prompts;
  const std::string& prompts_hash = job.prompts_hash;
  BatchPlan plan;
  plan.n_prompts = job.n_prompts;
  plan.batch_size = config.data.batch_size;
  plan.n_batches = batch_count(plan.n_prompts, plan.batch_size);

  // Rank 0, with job.output claimed (JobSetup): its checks, touching nothing.
  if (world.is_root()) check_result_target(config, options, prompts_hash, log);

  // The model files by name, size, header and small files' contents now (milliseconds); their
  // weights' whole contents when the job finishes, so that hashing never weighs on the load or
  // the timed steps (docs/analysis.md, "Model fingerprints: what they cost").
  const std::string models_text =
      world.is_root() && !options.resume ? models_json(config, false) : "";
  const SteadyClockPoint t_load = SteadyClock::now();
  RankModels models = load_models(config, job);
  const double load_s = seconds_since(t_load);
  if (options.preflight) return preflight_verdict(config, job, models, plan.n_batches, load_s);
  DecodeOptions decode = decode_options(config);
  decode.extra_stop_ids = extra_stop_ids(config, models.target.model->config());
  std::unique_ptr<ResultWriter> writer;
  if (world.is_root()) {
    // Every prompt against the target before the result file is touched.
    check_all_prompts(prompts, plan.n_prompts, models.target.model->config(),
                      config.decode.max_new_tokens);
    writer = open_result(config, world, options, job.records, prompts_hash, models_text,
                         models.target.weight_bytes, log);
    if (const std::string warning = draft_is_target(config); !warning.empty()) {
      log.warn(warning);
      writer->record_alarm(warning);
    }
  }
  world_comm.barrier();
  auto done = options.resume ? committed_batches(config, world_comm, world)
                             : std::map<std::string, std::set<std::int64_t>>{};
  {
    std::ostringstream line;
    line << "specrun run " << config.job.name << ": " << plan.n_prompts << " prompts in "
         << plan.n_batches << " batches of " << plan.batch_size << ", world " << world.size
         << " = dp " << world.dp << " x tp " << world.tp << ", " << job.threads
         << " thread(s) per rank (" << job.thread_choice.why << "); models loaded in " << std::fixed
         << std::setprecision(3) << load_s << " s";
    log.info(line.str());
  }
  if (backend != BackendKind::kCpu) log.info("backend: " + models.target.factory->description());
  if (const std::string warning = batch_variance_warning(config, backend, models.target_weights,
                                                         models.target.model->config());
      !warning.empty())
    log.warn(warning);
  Communicator& decisions = models.target.factory->tp_comm();
  BatchDecoder decoder(*models.target.model, models.drafter.get(), *models.target.ops, decisions,
                       decode, models.target.factory->device_timeline(),
                       models.draft_experts.get());

  install_stop_handlers();
  std::int64_t batches_total =
      plan.n_batches * static_cast<std::int64_t>(config.decode.modes.size());
  for (auto& [mode, set] : done) batches_total -= static_cast<std::int64_t>(set.size());
  Progress progress(plan.n_prompts, plan.n_batches, batches_total);
  std::string alarm_stop;
  const RoundsEnd end =
      decode_rounds(config, world, world_comm, prompts, plan, done, decoder, decisions,
                    *models.target.factory, writer.get(), progress, log, alarm_stop);

  set_activity("end-of-job");
  if (end == RoundsEnd::kAlarm) {
    if (world.is_root()) writer.reset();  // closed and flushed; `finished` stays unset
    throw CollectiveError(
        Error(world.is_root() ? alarm_stop : "stopped by rank 0's acceptance alarm", "",
              kExitFailure),
        world.is_root());
  }
  if (end == RoundsEnd::kSignal) {
    int sig = 0;
    stop_requested(&sig);
    if (world.is_root()) {
      const std::string written = writer->path();
      writer.reset();  // closed and flushed; `finished` stays unset
      log.info("stopped by a signal after " + std::to_string(progress.done()) + " of " +
               std::to_string(progress.total()) + " batches; every finished batch is in " +
               written +
               (written == config.job.output.resolved
                    ? std::string()
                    : " (it replaces " + config.job.output.resolved + " when the job finishes)") +
               "; continue with `specrun run ... --resume`");
    }
    world_comm.barrier();
    return kExitStopped;
  }
  if (const std::string graphs = models.target.factory->step_graph_report(); !graphs.empty())
    log.info(graphs);
  if (world.is_root()) {
    // A model directory that became unreadable meanwhile leaves the start's fingerprints (sizes
    // and headers) and a warning: the results are complete and must not be lost over it.
    const SteadyClockPoint t_hash = SteadyClock::now();
    std::string fingerprints;
    try {
      fingerprints = models_json(config, true);
      std::ostringstream line;
      line << "model files fingerprinted whole in " << std::fixed << std::setprecision(3)
           << seconds_since(t_hash) << " s after the last batch";
      log.info(line.str());
    } catch (const Error& e) {
      log.warn(std::string("model files not fingerprinted whole (the result keeps their sizes and "
                           "headers): ") +
               e.what());
    }
    if (const std::string warning = same_model_contents(fingerprints);
        !warning.empty() && draft_is_target(config).empty()) {
      log.warn(warning);
      writer->record_alarm(warning);
    }
    writer->finish(fingerprints);
    writer.reset();
    ResultReader reader(config.job.output.resolved);
    const std::vector<ModeData> modes = load_mode_data(reader);
    RunSummary summary = summarize_run(modes, config.decode.temperature <= 0,
                                       static_cast<std::uint64_t>(config.job.seed));
    log.info(format_summary(summary) + format_hosts(modes) +
             "result file: " + config.job.output.resolved);
  }
  world_comm.barrier();
  return 0;
}

}  // namespace specrun
