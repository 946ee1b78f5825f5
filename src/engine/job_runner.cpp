#include "engine/job_runner.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "common/build_info.h"
#include "common/error.h"
#include "common/log.h"
#include "dist/gather.h"
#include "dist/mpi_comm.h"
#include "engine/batch_codec.h"
#include "engine/decoder.h"
#include "engine/stop_request.h"
#include "engine/summary.h"
#include "io/prompt_file.h"
#include "io/provenance.h"
#include "io/result_file.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"

namespace specrun {
namespace {

using Clock = std::chrono::steady_clock;

int choose_threads(const JobConfig& config, const World& world) {
  if (config.parallel.threads > 0) return config.parallel.threads;
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(hw) / std::max(1, world.local_size));
}

void check_dtype(const JobConfig& config, const Checkpoint& ckpt, const char* section) {
  const std::string& want = config.target.dtype;
  if (want == "auto") return;
  const TensorView& t = ckpt.tensor("model.embed_tokens.weight");
  std::string have = dtype_name(t.dtype);
  std::string want_upper = want == "f32" ? "F32" : want == "bf16" ? "BF16" : "F16";
  SPEC_INPUT_CHECK(have == want_upper,
                   section << ".dtype = \"" << want << "\" but the checkpoint " << ckpt.dir()
                           << " stores " << have
                           << " weights; specrun keeps weights in their checkpoint dtype: set "
                           << section << ".dtype = \"auto\" or convert the checkpoint");
}

// Which batches each mode has already committed (--resume), known on every rank.
std::map<std::string, std::set<std::int64_t>> committed_batches(const JobConfig& config,
                                                                MpiComm& world_comm,
                                                                const World& world) {
  std::map<std::string, std::set<std::int64_t>> out;
  for (const std::string& mode : config.decode.modes) {
    std::vector<std::int64_t> done;
    if (world.is_root()) {
      ResultReader reader(config.job.output.resolved);
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

// Resume is allowed only for the same configuration and the same prompts.
void check_resumable(const JobConfig& config, const std::string& prompts_hash) {
  ResultReader reader(config.job.output.resolved);
  const ResultHeader& h = reader.info().header;
  SPEC_INPUT_CHECK(h.config_hash == config_hash_hex(config),
                   "cannot resume " << config.job.output.resolved
                                    << ": the job configuration differs from the one recorded "
                                       "in it (hash "
                                    << h.config_hash << ", now " << config_hash_hex(config)
                                    << "); run with the same job file and --set values, or "
                                       "write to a new job.output");
  SPEC_INPUT_CHECK(h.prompts_hash == prompts_hash,
                   "cannot resume " << config.job.output.resolved << ": the prompt file "
                                    << config.data.prompts.resolved
                                    << " differs from the one recorded (" << h.prompts_path << ", "
                                    << h.prompts_hash << ")");
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

// Progress of one mode, kept on rank 0.
struct ModeProgress {
  std::int64_t prompts = 0, tokens = 0, steps = 0, step_tokens = 0;
  double seconds = 0;
};

}  // namespace

int run_job(const JobConfig& config, MpiSession& mpi, const RunOptions& options) {
  // Everything that can be checked before loading models is checked first.
  const World world = mpi.world(config.parallel.tp);
  Logger log(world.rank, world.size);
  ModelFactory::check_backend(config.parallel.backend);
  SPEC_INPUT_CHECK(!config.data.prompts.empty(),
                   "data.prompts is not set: give an HDF5 prompt file "
                   "made by `specrun prepare`");
  SPEC_INPUT_CHECK(!config.target.path.empty(),
                   "target.path is not set: give a Hugging Face model "
                   "directory");
  MpiComm world_comm(MPI_COMM_WORLD);
  MpiComm tp_comm = MpiComm::tp_group(world);
  MpiComm self_comm(MPI_COMM_SELF);
  const int threads = choose_threads(config, world);
  omp_set_num_threads(threads);

  PromptReader prompts(config.data.prompts.resolved);
  const std::int64_t n_prompts = config.data.max_prompts > 0
                                     ? std::min(config.data.max_prompts, prompts.size())
                                     : prompts.size();
  const std::int64_t batch_size = config.data.batch_size;
  const std::int64_t n_batches = batch_count(n_prompts, batch_size);
  const std::string prompts_hash = world.is_root() ? prompts.content_hash() : "";

  // Provenance: every rank's record, gathered before anything heavy happens.
  ProvenanceRecord local = collect_local_provenance(mpi);
  std::vector<ProvenanceRecord> records = gather_provenance(world_comm, local);

  // The result file: created (or reopened) by rank 0 before the models load, so that a path
  // that cannot be written fails fast. Errors abort every rank through main.
  std::unique_ptr<ResultWriter> writer;
  if (world.is_root()) {
    if (options.resume) {
      check_resumable(config, prompts_hash);
      writer = std::make_unique<ResultWriter>(ResultWriter::reopen(config.job.output.resolved));
    } else {
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
      for (const ProvenanceRecord& r : records)
        header.provenance.push_back(nlohmann::json(r).dump());
      header.provenance_mismatches = nlohmann::json(find_mismatches(records)).dump();
      writer = std::make_unique<ResultWriter>(
          ResultWriter::create(config.job.output.resolved, header, config.job.overwrite));
    }
    for (const Mismatch& m : find_mismatches(records)) log.warn(describe(m));
  }
  world_comm.barrier();
  auto done = options.resume ? committed_batches(config, world_comm, world)
                             : std::map<std::string, std::set<std::int64_t>>{};

  // Models.
  auto t_load = Clock::now();
  Checkpoint target_ckpt(config.target.path.resolved);
  check_dtype(config, target_ckpt, "target");
  ModelFactory factory(config.parallel.backend, tp_comm, self_comm, world, threads,
                       config.parallel.comm_timeout_s);
  std::unique_ptr<LanguageModel> target = factory.load(target_ckpt, /*sharded=*/true);
  std::unique_ptr<Checkpoint> draft_ckpt;
  std::unique_ptr<LanguageModel> draft;
  const bool sharded = config.draft.placement == "sharded";
  if (config.draft.kind == "model") {
    SPEC_INPUT_CHECK(!config.draft.path.empty(),
                     "draft.kind = \"model\" but draft.path is not set");
    draft_ckpt = std::make_unique<Checkpoint>(config.draft.path.resolved);
    draft = factory.load(*draft_ckpt, sharded);
  }
  double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  {
    std::ostringstream line;
    line << "specrun run " << config.job.name << ": " << n_prompts << " prompts in " << n_batches
         << " batches of " << batch_size << ", world " << world.size << " = dp " << world.dp
         << " x tp " << world.tp << ", " << threads << " thread(s) per rank; models loaded in "
         << std::fixed << std::setprecision(2) << load_s << " s";
    log.info(line.str());
  }
  if (config.parallel.backend != "cpu") log.info("backend: " + factory.description());

  DecodeOptions decode;
  decode.max_new_tokens = config.decode.max_new_tokens;
  decode.draft_len = config.decode.draft_len;
  decode.sampling.temperature = static_cast<float>(config.decode.temperature);
  decode.sampling.top_k = config.decode.top_k;
  decode.sampling.top_p = static_cast<float>(config.decode.top_p);
  decode.stop_at_eos = config.decode.stop_at_eos;
  decode.seed = static_cast<std::uint64_t>(config.job.seed);
  decode.draft_sharded = sharded;
  decode.inject_delay_ms = config.debug.inject_delay_ms;
  decode.inject_phase = config.debug.inject_phase;
  BatchDecoder decoder(*target, draft.get(), factory.tp_comm(), decode);

  install_stop_handlers();
  // Collective: every rank learns whether any rank got a stop signal.
  auto stop_everywhere = [&]() {
    float flag = stop_requested() ? 1.0f : 0.0f;
    world_comm.all_reduce_max(&flag, 1);
    return flag > 0;
  };
  bool stopped = false;

  std::map<std::string, ModeProgress> progress;
  const std::int64_t rounds = (n_batches + world.dp - 1) / world.dp;
  auto t_start = Clock::now();
  std::int64_t batches_done = 0,
               batches_total = n_batches * static_cast<std::int64_t>(config.decode.modes.size());
  for (auto& [mode, set] : done) batches_total -= static_cast<std::int64_t>(set.size());

  for (std::int64_t round = 0; round < rounds && !stopped; ++round) {
    const std::int64_t my_batch = round * world.dp + world.dp_index;
    std::vector<Prompt> batch_prompts;
    if (my_batch < n_batches) {
      BatchRange range = batch_range(n_prompts, batch_size, my_batch);
      batch_prompts = prompts.read(range.first, range.count);
    }
    for (const std::string& mode : config.decode.modes) {
      if (stop_everywhere()) {
        stopped = true;
        break;
      }
      const bool mine = my_batch < n_batches && !done[mode].count(my_batch);
      std::string payload;
      if (mine) {
        factory.tp_comm().reset_timing();
        BatchResult result = decoder.run(mode, my_batch, batch_prompts);
        payload = encode_batch(result, world.tp_rank == 0);
      }
      std::vector<std::string> blobs = gather_strings(world_comm, payload, 0);
      if (!world.is_root()) continue;
      for (int g = 0; g < world.dp; ++g) {
        if (blobs[g * world.tp].empty()) continue;
        std::vector<BatchResult> parts;
        for (int r = 0; r < world.tp; ++r) parts.push_back(decode_batch(blobs[g * world.tp + r]));
        BatchResult merged = merge_group(parts);
        // Timings are stored for every world rank; ranks of other groups are NaN for this batch.
        std::vector<float> wide(static_cast<std::size_t>(merged.n_steps) * world.size * kNumPhases,
                                std::numeric_limits<float>::quiet_NaN());
        for (int s = 0; s < merged.n_steps; ++s)
          for (int r = 0; r < world.tp; ++r)
            for (int p = 0; p < kNumPhases; ++p)
              wide[(static_cast<std::size_t>(s) * world.size + g * world.tp + r) * kNumPhases + p] =
                  merged.timings_ms[(static_cast<std::size_t>(s) * world.tp + r) * kNumPhases + p];
        merged.timings_ms = std::move(wide);
        merged.n_ranks = world.size;
        writer->append_batch(mode, merged);

        ModeProgress& mp = progress[mode];
        double batch_wall = 0;
        for (const SequenceRecord& s : merged.sequences) {
          mp.prompts += 1;
          mp.tokens += s.generated;
          mp.steps += s.verify_steps;
          mp.step_tokens += s.generated - 1;
          batch_wall = std::max(batch_wall, s.wall_s);
        }
        mp.seconds += batch_wall;
        ++batches_done;
        double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
        double eta = batches_done > 0 ? elapsed / batches_done * (batches_total - batches_done) : 0;
        std::ostringstream line;
        line << std::fixed << "[" << mode << "] batch " << merged.batch + 1 << "/" << n_batches
             << ": " << mp.prompts << "/" << n_prompts << " prompts, " << std::setprecision(1)
             << (mp.seconds > 0 ? mp.tokens / mp.seconds : 0.0) << " tokens/s";
        if (mode == kModeSpeculative)
          line << std::setprecision(2) << ", tau "
               << (mp.steps > 0 ? static_cast<double>(mp.step_tokens) / mp.steps : 0.0);
        line << ", ETA " << format_eta(eta);
        log.info(line.str());
      }
    }
  }

  if (stopped) {
    int sig = 0;
    stop_requested(&sig);
    if (world.is_root()) {
      writer.reset();  // closed and flushed; `finished` stays unset
      log.info("stopped by a signal after " + std::to_string(batches_done) + " of " +
               std::to_string(batches_total) + " batches; every finished batch is in " +
               config.job.output.resolved + "; continue with `specrun run ... --resume`");
    }
    world_comm.barrier();
    return kExitStopped;
  }
  if (world.is_root()) {
    writer->finish();
    writer.reset();
    ResultReader reader(config.job.output.resolved);
    RunSummary summary = summarize_run(load_mode_data(reader), config.decode.temperature <= 0,
                                       static_cast<std::uint64_t>(config.job.seed));
    log.info(format_summary(summary) + "result file: " + config.job.output.resolved);
  }
  world_comm.barrier();
  return 0;
}

}  // namespace specrun
