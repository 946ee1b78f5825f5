#include "engine/dataset_job.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/activity.h"
#include "common/build_info.h"
#include "common/clock.h"
#include "common/error.h"
#include "dist/gather.h"
#include "engine/dataset_generator.h"
#include "engine/decoder.h"
#include "engine/stop_request.h"
#include "engine/stop_tokens.h"
#include "io/dataset_file.h"
#include "io/result_file.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"
#include "spec/token_ops.h"

namespace specrun {

namespace fs = std::filesystem;

std::vector<int> dataset_capture_layers(const std::string& hidden_layers,
                                        const ModelConfig& config) {
  const int N = config.num_layers;
  std::vector<int> ids;
  if (hidden_layers == "none") return ids;
  const std::size_t comma = hidden_layers.find(',');
  if (hidden_layers.compare(0, comma, "eagle3") == 0 && comma != std::string::npos) {
    // "eagle3,<more ids>": EAGLE-3's three, then the others (e.g. "eagle3,final").
    ids = dataset_capture_layers("eagle3", config);
    for (int id : dataset_capture_layers(hidden_layers.substr(comma + 1), config)) {
      SPEC_INPUT_CHECK(id > ids.back(), "dataset.hidden_layers = \""
                                            << hidden_layers << "\": layer " << id
                                            << " must come after EAGLE-3's " << ids.back());
      ids.push_back(id);
    }
    return ids;
  }
  if (hidden_layers == "eagle3") {
    // The reference default {2, N/2, N-3}, kept strictly ascending inside [1, N-1].
    SPEC_INPUT_CHECK(N >= 4,
                     "dataset.hidden_layers = \"eagle3\" needs a target of at least 4 "
                     "layers (it has "
                         << N << "): name the layers, e.g. \"1,2,final\"");
    const int low = std::clamp(2, 1, N - 3);
    const int mid = std::max(N / 2, low + 1);
    const int high = std::max(N - 3, mid + 1);
    SPEC_INPUT_CHECK(high <= N - 1,
                     "dataset.hidden_layers = \"eagle3\": no three distinct layers "
                     "in a target of "
                         << N << " layers: name them");
    return {low, mid, high};
  }
  std::stringstream in(hidden_layers);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    const int id = item == "final" ? N : std::stoi(item);
    SPEC_INPUT_CHECK(id >= 0 && id <= N && (ids.empty() || id > ids.back()),
                     "dataset.hidden_layers = \"" << hidden_layers
                                                  << "\": layer ids must ascend within 0.." << N
                                                  << " (the target has " << N << " layers; " << N
                                                  << " or \"final\" is the final norm's output)");
    ids.push_back(id);
  }
  return ids;
}

namespace {

std::string capture_convention(const std::vector<int>& ids, int num_layers) {
  std::ostringstream out;
  out << "layer ids [";
  for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? ", " : "") << ids[i];
  out << "] of a " << num_layers
      << "-layer target: id i < num_layers is the residual stream at the input of layer i "
         "(Hugging Face hidden_states[i], vLLM's eagle_aux_hidden_state_layer_ids; SGLang's "
         "eagle_config ids are i - 1), id num_layers the final norm's output";
  return out.str();
}

std::string format_bytes(double b) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(b >= 1e9 ? 2 : 1);
  if (b >= 1e9)
    out << b / 1e9 << " GB";
  else if (b >= 1e6)
    out << b / 1e6 << " MB";
  else
    out << b / 1e3 << " kB";
  return out.str();
}

// Rank 0: the job's uncompressed bytes against the free space of job.output's file system.
void check_space(const JobConfig& config, const PromptReader& prompts, std::int64_t n_prompts,
                 const DatasetLayout& layout, const std::vector<std::string>& shards) {
  const double share = prompts.size() > 0 ? static_cast<double>(n_prompts) / prompts.size() : 0;
  const double positions = static_cast<double>(prompts.total_tokens()) * share +
                           static_cast<double>(n_prompts) * config.decode.max_new_tokens;
  double need = positions * (static_cast<double>(layout.row_bytes()) + 4.0) +
                static_cast<double>(n_prompts) * 256.0;
  for (const std::string& shard : shards)  // a resumed job has written part of it already
    for (const std::string& p : dataset_shard_parts(shard)) {
      std::error_code ec;
      const auto size = fs::file_size(p, ec);
      if (!ec) need -= static_cast<double>(size);
    }
  need = std::max(need, 0.0);
  std::string dir = fs::path(config.job.output.resolved).parent_path().string();
  if (dir.empty()) dir = ".";
  struct statvfs st {};
  SPEC_INPUT_CHECK(::statvfs(dir.c_str(), &st) == 0,
                   "cannot read the free space of " << dir << " (job.output)");
  const double avail = static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize);
  SPEC_INPUT_CHECK(
      need <= avail,
      "the dataset job would write about "
          << format_bytes(need) << " (" << std::llround(positions) << " positions x "
          << layout.row_bytes() << " bytes, before compression) but " << dir << " has "
          << format_bytes(avail)
          << " free: free space, write elsewhere (job.output), use fewer prompts "
             "(data.max_prompts), fewer layers (dataset.hidden_layers) or dataset.dtype = "
             "\"bf16\"");
}

// A shard may be continued only by the same job on the same prompts.
void check_resumable_shard(const std::string& path, const JobConfig& config,
                           const std::string& prompts_hash) {
  DatasetReader r(path);
  const DatasetHeader& h = r.header();
  SPEC_INPUT_CHECK(h.config_hash == config_hash_hex(config),
                   "cannot resume " << path
                                    << ": the job configuration differs from the one recorded in "
                                       "it (hash "
                                    << h.config_hash << ", now " << config_hash_hex(config)
                                    << "); run with the same job file and --set values");
  SPEC_INPUT_CHECK(h.prompts_hash == prompts_hash,
                   "cannot resume " << path << ": the prompt file " << config.data.prompts.resolved
                                    << " differs from the one recorded (" << h.prompts_hash << ")");
}

std::string broadcast_string(MpiComm& comm, std::string s) {
  std::uint64_t n = s.size();
  comm.broadcast(&n, sizeof(n), 0);
  s.resize(static_cast<std::size_t>(n));
  if (n > 0) comm.broadcast(s.data(), static_cast<std::size_t>(n), 0);
  return s;
}

}  // namespace

int run_dataset_job(const JobConfig& config, const RunOptions& options, JobSetup& job) {
  // SIGINT too: an interactive Ctrl-C seals the open parts like SIGTERM (a decoding job's
  // SIGINT still ends it at once; its result file needs no sealing).
  install_stop_handlers(/*interrupt=*/true);
  const World& world = job.world;
  const Logger& log = job.log;
  const std::string top = config.job.output.resolved;
  std::vector<std::string> shard_paths;
  for (int g = 0; g < world.dp; ++g) shard_paths.push_back(dataset_shard_path(top, g, world.dp));
  const std::string& my_shard = shard_paths[static_cast<std::size_t>(world.dp_index)];
  const std::int64_t n_prompts = job.n_prompts;
  std::vector<std::int64_t> stream;  // this group's prompts, in order
  for (std::int64_t i = world.dp_index; i < n_prompts; i += world.dp) stream.push_back(i);

  // What is kept, from the target's config (cheap: the weights are mapped, not read).
  Checkpoint target_ckpt(config.target.path.resolved);
  check_target_dtype(config, target_ckpt);
  const ModelConfig& mc = target_ckpt.config();
  DatasetLayout layout;
  layout.layers = dataset_capture_layers(config.dataset.hidden_layers, mc);
  layout.num_layers = mc.num_layers;
  layout.hidden_size = mc.hidden_size;
  layout.positions = config.dataset.positions;
  layout.dtype = parse_store_type(config.dataset.dtype);
  layout.topk = config.dataset.topk;
  layout.topk_dtype = parse_store_type(config.dataset.topk_dtype);
  layout.compression = config.dataset.compression;
  layout.level = config.dataset.level;
  layout.chunk_rows = config.dataset.chunk_rows;
  SPEC_INPUT_CHECK(layout.topk <= mc.vocab_size,
                   "dataset.topk = " << layout.topk << " exceeds the target's vocabulary ("
                                     << mc.vocab_size << ")");

  // Checks that touch nothing, before the model loads (rank 0 holds job.output's lock: JobSetup).
  const std::string prompts_hash = broadcast_string(job.world_comm, job.prompts_hash);
  if (world.is_root()) {
    check_all_prompts(job.prompts, n_prompts, mc, config.decode.max_new_tokens);
    if (!options.resume) ResultWriter::check_creatable(top, config.job.overwrite, kDatasetSchema);
    check_space(config, job.prompts, n_prompts, layout,
                options.resume ? shard_paths : std::vector<std::string>{});
    // An overwritten job's top-level file goes before any of its parts: left in place, it would
    // still say finished while it presents the new job's parts, or none (HDF5 reads the rows of
    // a missing part as zeros). The new one is written when every group is done.
    if (!options.resume && config.job.overwrite) {
      std::error_code ec;
      fs::remove(top, ec);
      SPEC_INPUT_CHECK(!ec, "cannot remove the earlier top-level file "
                                << top << " (job.overwrite): " << ec.message());
    }
  }
  const std::vector<std::string> my_parts = dataset_shard_parts(my_shard);
  const bool shard_exists = !my_parts.empty();
  if (world.is_tp_leader()) {
    if (options.resume && shard_exists) {
      check_resumable_shard(my_parts.front(), config, prompts_hash);
    } else {
      SPEC_INPUT_CHECK(!shard_exists || config.job.overwrite || options.resume,
                       my_parts.front() << " exists (part of an earlier dataset job); set "
                                           "job.overwrite = true to replace it, or --resume");
    }
  }
  job.world_comm.barrier();

  const SteadyClockPoint t_load = SteadyClock::now();
  const JobTarget target = load_target(config, job, target_ckpt);
  Communicator& decisions = target.factory->tp_comm();

  // The shard: created, or continued after its last sealed part.
  std::unique_ptr<DatasetShardWriter> writer;
  std::int64_t committed = 0;
  if (world.is_tp_leader()) {
    DatasetHeader h;
    static_cast<ResultHeader&>(h) = job_header(config, world, prompts_hash, job.records);
    h.shard = world.dp_index;
    h.target_fingerprint = model_fingerprint(config.target.path.resolved);
    h.capture_convention = capture_convention(layout.layers, mc.num_layers);
    DatasetCommitPolicy policy;
    policy.seconds = config.dataset.commit_s;
    if (options.resume && shard_exists) {
      writer = std::make_unique<DatasetShardWriter>(
          DatasetShardWriter::reopen(my_shard, h, layout, policy));
      committed = writer->committed_sequences();
    } else {
      writer = std::make_unique<DatasetShardWriter>(DatasetShardWriter::create(
          my_shard, h, layout, policy, config.job.overwrite || options.resume));
    }
  }
  job.tp_comm.broadcast(&committed, sizeof(committed), 0);
  SPEC_INPUT_CHECK(committed <= static_cast<std::int64_t>(stream.size()),
                   my_shard << " holds " << committed << " sequences but this group's stream has "
                            << stream.size());
  {
    std::ostringstream line;
    line << "specrun run " << config.job.name << " (dataset): " << n_prompts << " prompts over dp "
         << world.dp << " x tp " << world.tp << ", " << layout.layers.size() << " layers ("
         << config.dataset.hidden_layers << ") in " << config.dataset.dtype << ", "
         << (config.dataset.continuous ? "continuous" : "static") << " batches of "
         << config.data.batch_size << "; models loaded in " << std::fixed << std::setprecision(2)
         << seconds_since(t_load) << " s";
    if (options.resume) line << "; resuming at sequence " << committed << " of group 0";
    log.info(line.str());
  }

  GenerateOptions gen;
  gen.slots = config.data.batch_size;
  gen.max_new_tokens = config.decode.max_new_tokens;
  gen.sampling = sampling_params(config);
  gen.stop_at_eos = config.decode.stop_at_eos;
  gen.extra_stop_ids = extra_stop_ids(config, target.model->config());
  gen.seed = static_cast<std::uint64_t>(config.job.seed);
  gen.capture = layout.layers;
  gen.positions = layout.positions;
  gen.topk = layout.topk;
  gen.continuous = config.dataset.continuous;
  DatasetGenerator generator(*target.model, *target.ops, decisions, gen);

  StopVote vote(job.world_comm, config.parallel.comm_timeout_s);
  std::size_t cursor = static_cast<std::size_t>(committed);
  std::int64_t finished = 0, generated = 0;
  SteadyClockPoint last_line = SteadyClock::now();
  const SteadyClockPoint t0 = SteadyClock::now();
  bool stopped = false;
  auto next = [&](Prompt& p) {
    if (cursor >= stream.size()) return false;
    p = job.prompts.read(stream[cursor++], 1).front();
    return true;
  };
  // Sequences finish out of order (continuous batching); the shard keeps them in stream order,
  // so that its sealed sequences are always a prefix of the stream (where --resume continues)
  // and an interrupted job ends with the same rows as an uninterrupted one. A finished sequence
  // waits here until those before it are written.
  std::map<std::int64_t, DatasetSequence> waiting;  // by stream position
  std::int64_t next_out = committed;
  auto done = [&](DatasetSequence&& s) {
    ++finished;
    generated += s.generated;
    if (writer) {
      waiting.emplace((s.prompt_index - world.dp_index) / world.dp, std::move(s));
      while (!waiting.empty() && waiting.begin()->first == next_out) {
        writer->add(std::move(waiting.begin()->second));
        waiting.erase(waiting.begin());
        ++next_out;
      }
    }
    if (world.is_root() && seconds_since(last_line) > 10) {
      last_line = SteadyClock::now();
      const double el = seconds_since(t0);
      std::ostringstream line;
      line << std::fixed << std::setprecision(1) << "[dataset] group 0: " << committed + finished
           << "/" << stream.size() << " sequences, " << generated << " tokens generated, "
           << generated / std::max(el, 1e-9) << " tokens/s";
      log.info(line.str());
    }
  };
  // This group stops at a step boundary when one of its ranks got a signal or a round of the vote
  // agreed on one (a signal to any rank of any group); its tp ranks agree through tp rank 0.
  auto stop = [&]() {
    const bool agreed = vote.poll();
    float flag = agreed || stop_requested() ? 1.0f : 0.0f;
    if (decisions.size() > 1) decisions.all_reduce_max(&flag, 1);
    stopped = flag > 0;
    return stopped;
  };
  set_activity("generation");  // the phase a timed-out collective names (common/activity.h)
  const DatasetGenerator::Stats stats = generator.run(next, done, stop, writer != nullptr);
  SPEC_CHECK(stopped || waiting.empty(), waiting.size()
                                             << " finished sequences never reached the shard");
  if (writer) writer->finish();  // seals the open part (also on a graceful stop)
  writer.reset();

  set_activity("end-of-job");
  // Every rank takes part in the vote until all are done or a stop is agreed: a group that ends
  // its stream early still learns of a stop requested elsewhere, and every rank leaves here with
  // the same answer.
  const int stop_signal = vote.finish();
  SPEC_CHECK(stop_signal != 0 || !stopped,
             "group " << world.dp_index << " stopped but the ranks' vote says none did");
  // Every group's figures, for the summary.
  std::ostringstream mine;
  if (world.is_tp_leader())
    mine << world.dp_index << " " << stats.sequences << " " << stats.generated << " " << stats.steps
         << " " << stats.busy_slot_steps << " " << stats.slot_steps << " " << stats.seconds;
  const std::vector<std::string> all = gather_strings(job.world_comm, mine.str(), 0);
  if (stop_signal != 0) {
    if (world.is_root())
      log.info("stopped by a signal (" + stop_signal_name(stop_signal) +
               "); every rank sealed its group's open part at a step boundary, every committed "
               "sequence is in the shards of " +
               top + "; continue with `specrun run ... --resume`");
    job.world_comm.barrier();
    return kExitStopped;
  }
  if (world.is_root()) {
    std::vector<std::string> parts;
    for (const std::string& shard : shard_paths)
      for (const std::string& p : dataset_shard_parts(shard)) parts.push_back(p);
    write_dataset_index(top, parts);
    DatasetReader index(top);
    std::int64_t rows = 0, tokens = 0;
    for (const DatasetRow& r : index.sequences()) {
      rows += r.n_rows;
      tokens += r.prompt_len + r.generated;
    }
    double stored = static_cast<double>(fs::file_size(top));
    for (const std::string& shard : shard_paths)
      for (const std::string& p : dataset_shard_parts(shard))
        stored += static_cast<double>(fs::file_size(p));
    const double raw = static_cast<double>(rows) * static_cast<double>(layout.row_bytes()) +
                       4.0 * static_cast<double>(tokens);
    std::ostringstream out;
    out << std::fixed << "dataset summary: " << index.sequences().size() << " sequences, " << tokens
        << " tokens, " << rows << " stored positions\n";
    out << "  bytes: " << format_bytes(raw) << " raw, " << format_bytes(stored) << " stored ("
        << std::setprecision(3) << (raw > 0 ? stored / raw : 0) << " of raw; "
        << std::setprecision(1) << (rows > 0 ? stored / rows : 0) << " bytes per position, "
        << (config.dataset.compression == "gzip" ? "gzip " + std::to_string(config.dataset.level)
                                                 : config.dataset.compression)
        << ")\n";
    out << "  group   sequences   generated   tokens/s   slot use   steps\n";
    for (const std::string& g : all) {
      if (g.empty()) continue;
      std::istringstream is(g);
      int group = 0;
      std::int64_t seqs = 0, gen_tokens = 0, steps = 0, busy = 0, slots = 0;
      double seconds = 0;
      is >> group >> seqs >> gen_tokens >> steps >> busy >> slots >> seconds;
      out << std::setw(7) << group << std::setw(12) << seqs << std::setw(12) << gen_tokens
          << std::setw(11) << std::setprecision(1) << (seconds > 0 ? gen_tokens / seconds : 0.0)
          << std::setw(10) << std::setprecision(3)
          << (slots > 0 ? static_cast<double>(busy) / slots : 0.0) << std::setw(8) << steps << "\n";
    }
    out << "dataset file: " << top;
    log.info(out.str());
  }
  job.world_comm.barrier();
  return 0;
}

}  // namespace specrun
