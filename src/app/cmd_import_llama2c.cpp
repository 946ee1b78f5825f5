// `specrun import-llama2c MODEL.bin OUTDIR [--tokenizer tok.bin] [--dtype f32|bf16]`: converts
// a llama2.c checkpoint into a Hugging Face model directory (see src/model/llama2c.h). Runs on
// rank 0 only when started under mpirun.
#include <boost/program_options.hpp>
#include <sstream>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/atomic_output.h"
#include "common/error.h"
#include "common/log.h"
#include "dist/mpi_comm.h"
#include "model/llama2c.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_import_llama2c(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli("specrun import-llama2c MODEL.bin OUTDIR [options]");
  std::string model_bin, outdir, tokenizer, dtype;
  cli.add_options()("tokenizer", po::value(&tokenizer),
                    "llama2.c tokenizer .bin (e.g. tok512.bin) to copy to OUTDIR/tokenizer.bin")(
      "dtype", po::value(&dtype)->default_value("f32"), "weight dtype to write: f32 or bf16")(
      "overwrite", "replace the files of a model already in OUTDIR (otherwise an error)");
  cli.positional("model", po::value(&model_bin)).positional("outdir", po::value(&outdir));
  if (!cli.parse(ctx, args,
                 "\nWrites OUTDIR/config.json, model.safetensors (wq/wk rows permuted into "
                 "Hugging Face\nrotary order) and generation_config.json; the classifier is tied "
                 "when the file shares it.\n"))
    return 0;
  Logger log(ctx.mpi.rank(), ctx.mpi.size());
  SPEC_INPUT_CHECK(!model_bin.empty() && !outdir.empty(),
                   "usage: specrun import-llama2c MODEL.bin OUTDIR [--tokenizer tok.bin] "
                   "[--dtype f32|bf16]");
  SPEC_INPUT_CHECK(dtype == "f32" || dtype == "bf16",
                   "--dtype " << dtype << " is not supported: use f32 or bf16");
  if (!log.is_root()) return 0;

  Llama2cImportOptions opts;
  opts.tokenizer_path = tokenizer;
  opts.dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32;
  // Before converting: never over MODEL.bin or the tokenizer, nor an existing model unless told.
  for (const std::string& file : import_llama2c_outputs(outdir, opts))
    check_output_path(
        file, OutputPolicy{cli.has("overwrite"), {model_bin, tokenizer}, "model file", true});
  ModelConfig c = import_llama2c(model_bin, outdir, opts);
  std::ostringstream msg;
  msg << "wrote " << outdir << ": LlamaForCausalLM, hidden " << c.hidden_size << ", layers "
      << c.num_layers << ", heads " << c.num_heads << "/" << c.num_kv_heads << ", vocab "
      << c.vocab_size << ", context " << c.max_position_embeddings << ", "
      << (c.tie_word_embeddings ? "tied" : "separate") << " classifier, " << dtype
      << (tokenizer.empty() ? "" : ", tokenizer.bin");
  log.info(msg.str());
  return 0;
}

}  // namespace specrun
