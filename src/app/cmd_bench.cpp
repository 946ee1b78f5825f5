// `specrun bench [options]`: decode, verify, prefill and batched-decode speed of the CPU or CUDA
// backend on a synthetic model, next to the machine's measured bandwidth (src/engine/bench.h).
// Under `mpirun -np N` the N ranks run one tensor-parallel group (tp = N). Rank 0 prints the
// table and writes --json.
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/atomic_output.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "engine/bench.h"
#include "model/model_factory.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_bench(CommandContext& ctx, const std::vector<std::string>& args) {
  BenchOptions o;
  SyntheticSpec& s = o.spec;
  // The issue's ~100M-parameter model by default.
  s.hidden = 768;
  s.layers = 12;
  s.heads = 12;
  s.kv_heads = 12;
  s.intermediate = 2048;
  s.vocab = 32000;
  s.max_pos = 2048;
  std::string dtype = "bf16", json_path, cases, backend = "cpu";
  int tp = 0;
  CommandLine cli("specrun bench [options]");
  cli.add_options()("hidden", po::value(&s.hidden)->default_value(s.hidden), "hidden size")(
      "layers", po::value(&s.layers)->default_value(s.layers), "decoder layers")(
      "heads", po::value(&s.heads)->default_value(s.heads), "attention heads")(
      "kv-heads", po::value(&s.kv_heads)->default_value(s.kv_heads), "key/value heads")(
      "intermediate", po::value(&s.intermediate)->default_value(s.intermediate),
      "MLP intermediate size")("vocab", po::value(&s.vocab)->default_value(s.vocab),
                               "vocabulary size")("dtype", po::value(&dtype)->default_value(dtype),
                                                  "weight dtype: bf16 or f32")(
      "quantize", po::value(&s.quantize),
      "write the synthetic model quantized, as make-model --quantize: int4-g32, "
      "int4-g128-asym or fp8-block")("quant-roles", po::value(&s.quant_roles),
                                     "with --quantize: experts, linear or all (as make-model)")(
      "model-dir", po::value(&o.model_dir),
      "benchmark this make-model target directory instead of making one")(
      "tp", po::value(&tp)->default_value(0),
      "tensor-parallel size (0: world size; must equal it)")(
      "threads", po::value(&o.threads)->default_value(o.threads), "OpenMP threads per rank")(
      "backend", po::value(&backend)->default_value(backend),
      "cpu, or cuda (one GPU per rank; needs a CUDA build)")(
      "repeats", po::value(&o.repeats)->default_value(o.repeats),
      "recorded rounds (medians, min and max over them)")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "rounds run first, not recorded")(
      "steps", po::value(&o.steps)->default_value(o.steps),
      "forward calls per round for decode, verify and batch")(
      "context", po::value(&o.context)->default_value(o.context),
      "cached tokens each decode/verify/batch step starts from")(
      "verify-k", po::value(&o.verify_k)->default_value(o.verify_k),
      "draft length k: verify scores k+1 tokens")(
      "prefill", po::value(&o.prefill)->default_value(o.prefill), "prefill prompt length")(
      "batch", po::value(&o.batch)->default_value(o.batch), "sequences in batched decode")(
      "cases", po::value(&cases),
      "comma-separated subset of decode,verify,prefill,batch,experts,timing (experts: "
      "mixture-of-experts models only)")("json", po::value(&json_path),
                                         "also write the figures as JSON to FILE (rank 0)")(
      "overwrite", "with --json: replace an existing FILE");
  if (!cli.parse(ctx, args,
                 "\nBuilds the synthetic model (make-model into a temporary directory unless\n"
                 "--model-dir), then measures, round after round: a STREAM-like read of a\n"
                 "buffer as large as the weights, decode (batch 1), verify (k+1 tokens),\n"
                 "prefill and batched decode. Prints ms/step (median and min - max over the\n"
                 "rounds), tokens/s, weight GB/s and % of the measured bandwidth.\n"
                 "Under mpirun all ranks form one tp group and must share /tmp (one node).\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  const bool root = ctx.mpi.rank() == 0;
  SPEC_INPUT_CHECK(dtype == "bf16" || dtype == "f32",
                   "--dtype " << dtype << " is not supported: use bf16 or f32");
  s.dtype = dtype == "f32" ? DType::kF32 : DType::kBF16;
  SPEC_INPUT_CHECK(o.model_dir.empty() || (s.quantize.empty() && s.quant_roles.empty()),
                   "--quantize and --quant-roles shape the synthetic model; --model-dir "
                       << o.model_dir << " is benchmarked as its files store it");
  if (tp == 0) tp = ctx.mpi.size();
  SPEC_INPUT_CHECK(tp == ctx.mpi.size(), "--tp " << tp << " must equal the number of ranks ("
                                                 << ctx.mpi.size() << "): run `mpirun -np " << tp
                                                 << " specrun bench --tp " << tp << "`");
  if (vm.count("cases")) {
    o.cases.clear();
    std::stringstream in(cases);
    for (std::string item; std::getline(in, item, ',');) o.cases.push_back(item);
  }

  const BackendKind kind = parse_backend(backend, "--backend");
  // Checked before the measurement (rank 0 writes the file); never over --model-dir's files.
  const OutputPolicy json_policy{vm.count("overwrite") > 0, {o.model_dir}, "--json file"};
  if (root && !json_path.empty()) check_output_path(json_path, json_policy);
  World world = ctx.mpi.world(tp);
  MpiComm tp_comm = MpiComm::tp_group(world);
  MpiComm self_comm(MPI_COMM_SELF);
  ModelFactory factory(kind, tp_comm, self_comm, world, o.threads, /*comm_timeout_s=*/600);
  const BenchReport report = run_bench(o, factory, factory.tp_comm());
  if (!root) return 0;
  std::cout << format_table(report) << std::flush;
  if (!json_path.empty()) {
    std::string command = ctx.program + " bench";
    for (const std::string& a : args) command += " " + a;
    write_file_atomically(json_path, to_json(report, command) + "\n", json_policy);
  }
  return 0;
}

}  // namespace specrun
