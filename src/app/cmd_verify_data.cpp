// `specrun verify-data FILE`: re-runs the target on a sample of a dataset's sequences (one
// sequence at a time, one prefill of its tokens, tp 1 on the CPU or, with --backend cuda, one
// GPU; the model built by ModelFactory as `run` builds it) and compares what the file
// stores: the hidden states of every stored position, the top-k ids and probabilities, and for
// greedy data the generated tokens (each must be the target's argmax after the tokens before
// it). Catches rows that belong to another sequence or position (the batch > 1 corruption of
// other tools), truncated sequences and altered values. A serial command.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "dist/mpi_comm.h"
#include "io/checked_read.h"
#include "io/dataset_file.h"
#include "kernels/cpu/dtype.h"
#include "model/checkpoint.h"
#include "model/model_factory.h"

namespace po = boost::program_options;

namespace specrun {

namespace {

// Rounds a float32 to the storage type and back (what a stored value of `v` reads as).
float through_storage(StoreType t, float v) {
  switch (t) {
    case StoreType::kBF16:
      return bf16_to_f32(f32_to_bf16(v));
    case StoreType::kF16:
      return f16_to_f32(f32_to_f16(v));
    case StoreType::kF32:
      break;
  }
  return v;
}

}  // namespace

int cmd_verify_data(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli("specrun verify-data FILE [options]");
  cli.add_options()("sample", po::value<int>()->default_value(16),
                    "sequences to check (chosen at random with --seed); 0 = all")(
      "seed", po::value<std::uint64_t>()->default_value(1), "seed of the sample")(
      "tolerance", po::value<double>()->default_value(0.02),
      "largest |stored - recomputed| / rms(row) accepted for a hidden-state row (0: exact "
      "after rounding to the stored type)")(
      "model", po::value<std::string>(),
      "target directory (default: target.path recorded in the file)")(
      "threads", po::value<int>()->default_value(1), "CPU threads")(
      "backend", po::value<std::string>()->default_value("cpu"),
      "cpu, or cuda (one GPU; needs a CUDA build)");
  cli.positional("file", po::value<std::string>());
  if (!cli.parse(ctx, args,
                 "\nFILE: a dataset's top-level file or one shard. Exit 0 when every checked "
                 "sequence matches,\n1 when one does not (each named), 2 on bad input.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  SPEC_INPUT_CHECK(vm.count("file"), "usage: specrun verify-data FILE [--sample N]");
  const BackendKind backend = parse_backend(vm["backend"].as<std::string>(), "--backend");
  if (ctx.mpi.rank() != 0) return 0;
  const std::string path = vm["file"].as<std::string>();
  const double tolerance = vm["tolerance"].as<double>();
  // NaN would pass every row (no comparison with it is true), infinity too, and a negative
  // tolerance would fail identical rows.
  SPEC_INPUT_CHECK(std::isfinite(tolerance) && tolerance >= 0,
                   "--tolerance " << tolerance
                                  << ": expected a finite number >= 0 (the largest accepted "
                                     "|stored - recomputed| / rms of a row; 0 = exact)");
  SPEC_INPUT_CHECK(vm["sample"].as<int>() >= 0,
                   "--sample " << vm["sample"].as<int>()
                               << ": expected the number of sequences to check, 0 for all");
  check_dataset_file(path);  // first in a child process: a corrupted file fails clearly
  DatasetReader data(path);
  const DatasetLayout& layout = data.layout();
  const nlohmann::json resolved = parse_json_or_discarded(data.header().resolved_json);
  std::string model_dir;
  if (vm.count("model")) {
    model_dir = vm["model"].as<std::string>();
  } else {
    SPEC_INPUT_CHECK(!resolved.is_discarded() && resolved.contains("target") &&
                         resolved["target"].contains("path"),
                     path << ": no target.path in the recorded job; give --model");
    model_dir = resolved["target"]["path"].get<std::string>();
  }
  const std::string fingerprint = model_fingerprint(model_dir);
  SPEC_INPUT_CHECK(fingerprint == data.header().target_fingerprint,
                   model_dir << " (fingerprint " << fingerprint
                             << ") is not the target that generated " << path << " ("
                             << data.header().target_fingerprint << "); give --model");
  const bool greedy = !resolved.is_discarded() && resolved.contains("decode") &&
                      resolved["decode"].value("temperature", 0.0) <= 0.0;

  // Rank 0 alone, a whole copy of the model: a world of one process (its device by local rank).
  const Checkpoint ckpt(model_dir);
  MpiComm tp_comm(MPI_COMM_SELF), self_comm(MPI_COMM_SELF);
  const World alone = World::make(0, 1, ctx.mpi.local_rank(), ctx.mpi.local_size(), 1);
  ModelFactory factory(backend, tp_comm, self_comm, alone, vm["threads"].as<int>(),
                       /*comm_timeout_s=*/600);
  std::unique_ptr<LanguageModel> model = factory.load(ckpt, /*sharded=*/false);
  const int H = layout.hidden_size, L = static_cast<int>(layout.layers.size());
  const int V = model->config().vocab_size, k = layout.topk;

  // The sample.
  std::vector<std::size_t> order(data.sequences().size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(vm["seed"].as<std::uint64_t>());
  std::shuffle(order.begin(), order.end(), rng);
  const int sample = vm["sample"].as<int>();
  if (sample > 0 && static_cast<std::size_t>(sample) < order.size()) order.resize(sample);
  std::sort(order.begin(), order.end());

  int bad = 0;
  double worst = 0;
  std::int64_t rows_checked = 0, exact_rows = 0, tokens_checked = 0, near_ties = 0;
  std::vector<float> logits_row(static_cast<std::size_t>(V)), rows;
  for (std::size_t idx : order) {
    const DatasetRow& r = data.sequences()[idx];
    std::ostringstream who;
    who << "prompt " << r.prompt_index << " (id '" << r.prompt_id << "', shard " << r.shard << ")";
    const std::vector<std::int32_t> tokens = data.tokens(r);
    const int total = static_cast<int>(tokens.size());
    if (total < 2) continue;
    auto cache = model->new_cache(total);
    const SeqChunk chunk{cache.get(), tokens.data(), total - 1};
    const ForwardResult fwd = model->forward({&chunk, 1}, ForwardRequest{true, layout.layers});
    std::string problem;
    // Hidden states.
    if (L > 0) {
      const std::vector<float> stored = data.hidden(r);
      rows.resize(static_cast<std::size_t>(r.n_rows) * L * H);
      if (r.n_rows > 0) model->read(fwd.hidden, r.first_row, r.n_rows, rows.data());
      for (int j = 0; j < r.n_rows && problem.empty(); ++j) {
        bool exact = true;
        for (int l = 0; l < L && problem.empty(); ++l) {
          const std::size_t at = (static_cast<std::size_t>(j) * L + l) * H;
          double rms = 0, diff = 0;
          for (int h = 0; h < H; ++h) {
            const float want = through_storage(layout.dtype, rows[at + h]);
            rms += static_cast<double>(want) * want;
            diff = std::max(diff, std::fabs(static_cast<double>(stored[at + h]) - want));
          }
          rms = std::sqrt(rms / H) + 1e-30;
          exact = exact && diff == 0;
          worst = std::max(worst, diff / rms);
          if (diff / rms > tolerance) {
            std::ostringstream p;
            p << who.str() << ": hidden state of token " << r.first_row + j << ", layer id "
              << layout.layers[l] << " differs by " << std::setprecision(3) << diff / rms
              << " x its rms (tolerance " << tolerance << ")";
            problem = p.str();
          }
        }
        ++rows_checked;
        exact_rows += exact;
      }
    }
    // Tokens (greedy data): each generated token is the argmax after the tokens before it.
    for (int j = r.prompt_len - 1; j < total - 1 && problem.empty() && greedy; ++j) {
      model->read(fwd.logits, j, 1, logits_row.data());
      const int best = static_cast<int>(std::max_element(logits_row.begin(), logits_row.end()) -
                                        logits_row.begin());
      ++tokens_checked;
      if (best == tokens[j + 1]) continue;
      const float gap = logits_row[best] - logits_row[tokens[j + 1]];
      if (gap <= 1e-4f * std::max(1.0f, std::fabs(logits_row[best]))) {
        ++near_ties;
        continue;
      }
      std::ostringstream p;
      p << who.str() << ": token " << j + 1 << " is " << tokens[j + 1]
        << " but the target's argmax after the tokens before it is " << best << " (by " << gap
        << " logits)";
      problem = p.str();
    }
    // Top-k ids at the stored positions.
    if (k > 0 && problem.empty()) {
      const std::vector<std::int32_t> ids = data.topk_ids(r);
      for (int j = 0; j < r.n_rows && problem.empty(); ++j) {
        model->read(fwd.logits, r.first_row + j, 1, logits_row.data());
        const std::int32_t top = ids[static_cast<std::size_t>(j) * k];
        const float best = *std::max_element(logits_row.begin(), logits_row.end());
        if (top < 0 || top >= V || best - logits_row[top] > 1e-4f * std::max(1.0f, best)) {
          std::ostringstream p;
          p << who.str() << ": top-1 of token " << r.first_row + j << " is stored as " << top
            << ", not the target's argmax";
          problem = p.str();
        }
      }
    }
    if (!problem.empty()) {
      std::cout << "MISMATCH " << problem << "\n";
      ++bad;
    }
  }
  std::cout << "verify-data " << path << ": " << order.size() << " of " << data.sequences().size()
            << " sequences checked against " << model_dir
            << " (tp 1, one sequence per forward): " << rows_checked << " hidden-state rows, "
            << exact_rows << " bit-identical after rounding to " << store_type_name(layout.dtype)
            << ", largest difference " << std::setprecision(3) << worst << " x rms";
  if (greedy)
    std::cout << "; " << tokens_checked << " generated tokens checked (" << near_ties
              << " near-ties)";
  std::cout << "\n"
            << (bad == 0 ? "OK" : "FAILED: " + std::to_string(bad) + " sequences differ")
            << std::endl;
  return bad == 0 ? 0 : 1;
}

}  // namespace specrun
