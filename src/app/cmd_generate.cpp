// `specrun generate MODEL_DIR --tokens 1,403,407 [--max-new-tokens N] [--backend cpu|cuda]
// [--threads N] [--dump-logits FILE]`: greedy continuation of token ids with one model,
// tensor-parallel over all ranks (tp = world size). This is how people and tests check the engine
// against other implementations. Rank 0 prints one line of space-separated generated ids, then the
// decoded text when the model folder has a tokenizer the project reads.
//
// --dump-logits FILE (written by rank 0), little-endian:
//   char[4]  magic "SRLG"
//   u32      version = 1
//   u32      rows    = prompt length + max_new_tokens - 1
//   u32      vocab
//   f32      logits[rows][vocab]
// Row i holds the logits computed at position i (the prediction of token i + 1): rows
// 0..prompt-1 are the prompt positions, the rest the positions of generated tokens fed back.
//
// --dump-mtp-logits FILE (a DeepSeek-V3-family MODEL_DIR with num_nextn_predict_layers >= 1;
// the same format): the MTP draft head's logits (docs/mtp-design.md) over the sequence S of
// the prompt and the generated tokens, T = prompt length + max_new_tokens ids. Rows 0..T-2: one
// head forward over the pairs (the target's final norm output at position i, S[i+1]) at
// positions i, as the drafter's extend; then rows T-1 and T: two chain steps, each fed the
// argmax of the previous row and the head's output there (--mtp-chain-hidden: pre_norm or
// shared_head_norm), as the drafter's chain of depth 3.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <boost/program_options.hpp>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <thread>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/atomic_output.h"
#include "common/error.h"
#include "dist/mpi_comm.h"
#include "model/checkpoint.h"
#include "model/draft_head.h"
#include "model/model_factory.h"
#include "spec/token_ops.h"
#include "text/tokenizer.h"

namespace po = boost::program_options;

namespace specrun {

namespace {

constexpr char kHelpTail[] =
    "\nRuns under `mpirun -np N` with tensor parallelism over all N ranks; every rank loads\n"
    "only its shard. Greedy decoding (argmax, lowest id on ties), no EOS stopping.\n"
    "Rank 0 prints the generated ids on one line, then their text when MODEL_DIR has\n"
    "tokenizer.json, tokenizer.model (sentencepiece) or tokenizer.bin (llama2.c).\n"
    "--text encodes the prompt with that tokenizer (special tokens added, as transformers).\n\n"
    "--dump-logits FILE format (little-endian): char[4] \"SRLG\", u32 version (1), u32 rows,\n"
    "u32 vocab, then rows*vocab float32. rows = prompt length + max-new-tokens - 1; row i holds\n"
    "the logits at position i (prompt positions first, then each generated token fed back).\n"
    "--dump-mtp-logits FILE (a DeepSeek-V3-family MODEL_DIR with an MTP layer), the same format:\n"
    "the MTP draft head's logits, rows 0..T-2 over the pairs (the target's final norm output at\n"
    "position i, token i + 1) of the T = prompt + max-new-tokens ids, then two chain steps.\n";

std::vector<std::int32_t> parse_token_list(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SPEC_INPUT_CHECK(used == item.size() && !item.empty() && v >= 0 && v <= INT32_MAX,
                     "--tokens: '" << item
                                   << "' is not a token id (expected comma-separated "
                                      "non-negative integers, e.g. 1,403,407)");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  SPEC_INPUT_CHECK(!ids.empty(), "--tokens needs at least one token id (e.g. --tokens 1)");
  return ids;
}

void write_u32(AtomicOutput& out, std::uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                              static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 24)};
  out.write(reinterpret_cast<const char*>(b), 4);
}

}  // namespace

namespace {

// Greedy continuation of `prompt` (one sequence). dump: the prompt pass computes the logits of
// every position (all ranks must agree on it); they and every later step's go to `dumped` when
// it is given (rank 0), in the --dump-logits order.
std::vector<std::int32_t> greedy_continuation(LanguageModel& model, TokenOps& ops,
                                              const std::vector<std::int32_t>& prompt, int max_new,
                                              bool dump, std::vector<float>* dumped) {
  const int V = model.config().vocab_size;
  const int prompt_len = static_cast<int>(prompt.size());
  auto cache = model.new_cache(prompt_len + max_new);
  cache->set_sequence_id(0);
  SeqChunk chunk{cache.get(), prompt.data(), prompt_len};
  ForwardResult out = model.forward({&chunk, 1}, ForwardRequest{dump, {}});
  auto keep = [&](const RowsView& logits) {
    if (dumped == nullptr) return;
    const std::size_t at = dumped->size();
    dumped->resize(at + static_cast<std::size_t>(logits.rows) * V);
    model.read(logits, 0, logits.rows, dumped->data() + at);
  };
  keep(out.logits);
  std::vector<std::int32_t> generated;
  std::int32_t next = 0;
  for (int i = 0; i < max_new; ++i) {
    const int last = out.logits.rows - 1;
    ops.argmax(out.logits, {&last, 1}, {&next, 1});
    generated.push_back(next);
    if (i + 1 == max_new) break;
    SeqChunk step{cache.get(), &generated.back(), 1};
    out = model.forward({&step, 1}, ForwardRequest{});
    keep(out.logits);
  }
  return generated;
}

// The --dump-mtp-logits rows (format above) of the MTP head of `checkpoint` over `seq`.
std::vector<float> mtp_logits(ModelFactory& factory, const Checkpoint& checkpoint,
                              LanguageModel& model, TokenOps& ops,
                              const std::vector<std::int32_t>& seq, bool chain_shared_head_norm) {
  const int V = model.config().vocab_size, T = static_cast<int>(seq.size());
  std::unique_ptr<DraftHead> head =
      factory.load_head(checkpoint.dir(), checkpoint, /*sharded=*/true, chain_shared_head_norm);
  auto target_cache = model.new_cache(T);
  target_cache->set_sequence_id(0);
  SeqChunk chunk{target_cache.get(), seq.data(), T - 1};
  const ForwardResult target =
      model.forward({&chunk, 1}, ForwardRequest{false, head->target_capture()});
  auto cache = head->new_cache(T + 2);
  cache->set_sequence_id(0);
  std::vector<int> rows(static_cast<std::size_t>(T - 1));
  for (int i = 0; i < T - 1; ++i) rows[i] = i;
  SeqChunk pairs{cache.get(), seq.data() + 1, T - 1};
  ForwardResult out = head->forward({&pairs, 1}, target.hidden, rows, true);
  std::vector<float> dumped(static_cast<std::size_t>(T - 1) * V);
  model.read(out.logits, 0, T - 1, dumped.data());
  int parent = T - 2;  // the row of the previous output
  for (int step = 0; step < 2; ++step) {
    std::int32_t token = 0;
    const int last = out.logits.rows - 1;
    ops.argmax(out.logits, {&last, 1}, {&token, 1});
    SeqChunk next{cache.get(), &token, 1};
    out = head->forward({&next, 1}, out.hidden, {&parent, 1}, true);
    parent = 0;
    const std::size_t at = dumped.size();
    dumped.resize(at + V);
    model.read(out.logits, 0, 1, dumped.data() + at);
  }
  return dumped;
}

void write_dump(const std::string& path, const std::vector<float>& dumped, int vocab,
                const OutputPolicy& policy) {
  AtomicOutput out(path, policy);
  out.write("SRLG", 4);
  write_u32(out, 1);
  write_u32(out, static_cast<std::uint32_t>(dumped.size() / vocab));
  write_u32(out, static_cast<std::uint32_t>(vocab));
  static_assert(std::endian::native == std::endian::little, "dump format is little-endian");
  out.write(dumped.data(), dumped.size() * sizeof(float));
  out.commit();
}

}  // namespace

int cmd_generate(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cli("specrun generate MODEL_DIR (--tokens IDS | --text TEXT) [options]");
  cli.add_options()("tokens", po::value<std::string>(),
                    "prompt token ids, comma-separated (e.g. 1,403,407)")(
      "text", po::value<std::string>(), "prompt text, encoded with MODEL_DIR's tokenizer")(
      "max-new-tokens", po::value<int>()->default_value(32), "tokens to generate")(
      "backend", po::value<std::string>()->default_value("cpu"),
      "cpu, or cuda (one GPU per rank; needs a CUDA build)")(
      "threads", po::value<int>()->default_value(0),
      "OpenMP threads per rank (0: the node's cores divided among its ranks)")(
      "ep", po::value<int>()->default_value(0),
      "mixture-of-experts models: expert-parallel ranks, 0 (= the ranks: experts split over "
      "them) or 1 (every expert on every rank, each cut by the ranks)")(
      "dump-logits", po::value<std::string>(), "write float32 logits to FILE (format below)")(
      "dump-mtp-logits", po::value<std::string>(),
      "write the MTP draft head's float32 logits to FILE (format below)")(
      "mtp-chain-hidden", po::value<std::string>()->default_value("pre_norm"),
      "with --dump-mtp-logits: pre_norm or shared_head_norm (draft.mtp_chain_hidden)")(
      "overwrite", "with --dump-logits / --dump-mtp-logits: replace an existing FILE");
  cli.positional("model-dir", po::value<std::string>());
  if (!cli.parse(ctx, args, kHelpTail)) return 0;
  const po::variables_map& vm = cli.values();
  const bool root = ctx.mpi.rank() == 0;
  SPEC_INPUT_CHECK(vm.count("model-dir"), "specrun generate needs MODEL_DIR (see --help)");
  SPEC_INPUT_CHECK(vm.count("tokens") + vm.count("text") == 1,
                   "specrun generate needs --tokens or --text (see --help)");
  const BackendKind backend = parse_backend(vm["backend"].as<std::string>(), "--backend");
  const std::string model_dir = vm["model-dir"].as<std::string>();
  // Never over the model's own files; checked before the model loads (rank 0 writes the file).
  const OutputPolicy dump_policy{vm.count("overwrite") > 0, {model_dir}, "--dump-logits file"};
  if (root && vm.count("dump-logits"))
    check_output_path(vm["dump-logits"].as<std::string>(), dump_policy);
  if (root && vm.count("dump-mtp-logits"))
    check_output_path(vm["dump-mtp-logits"].as<std::string>(), dump_policy);
  const std::string chain_hidden = vm["mtp-chain-hidden"].as<std::string>();
  SPEC_INPUT_CHECK(
      chain_hidden == "pre_norm" || chain_hidden == "shared_head_norm",
      "--mtp-chain-hidden is \"" << chain_hidden << "\": choose pre_norm or shared_head_norm");
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer_for(model_dir);
  std::vector<std::int32_t> prompt;
  if (vm.count("text")) {
    SPEC_INPUT_CHECK(tokenizer && tokenizer->can_encode(),
                     model_dir << " has no tokenizer that encodes text (tokenizer.json or "
                                  "tokenizer.model); give --tokens");
    const std::vector<int> ids = tokenizer->encode(vm["text"].as<std::string>(), true);
    SPEC_INPUT_CHECK(!ids.empty(), "--text encodes to no tokens");
    prompt.assign(ids.begin(), ids.end());
  } else {
    prompt = parse_token_list(vm["tokens"].as<std::string>());
  }
  const int max_new = vm["max-new-tokens"].as<int>();
  SPEC_INPUT_CHECK(max_new >= 1, "--max-new-tokens must be at least 1, got " << max_new);
  int threads = vm["threads"].as<int>();
  SPEC_INPUT_CHECK(threads >= 0, "--threads must be >= 0, got " << threads);
  if (threads == 0)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                              std::max(1, ctx.mpi.local_size()));

  const World world = ctx.mpi.world(ctx.mpi.size());
  MpiComm tp_comm = MpiComm::tp_group(world);
  MpiComm self_comm(MPI_COMM_SELF);
  Checkpoint checkpoint(model_dir);
  const ModelConfig& config = checkpoint.config();
  const int prompt_len = static_cast<int>(prompt.size());
  SPEC_INPUT_CHECK(prompt_len + max_new <= config.max_position_embeddings,
                   "--tokens has " << prompt_len << " ids and --max-new-tokens is " << max_new
                                   << ", but " << model_dir << " has a context of "
                                   << config.max_position_embeddings
                                   << " positions (max_position_embeddings): generate fewer "
                                      "tokens or shorten the prompt");
  ModelFactory factory(backend, tp_comm, self_comm, world, threads, /*comm_timeout_s=*/600);
  factory.set_expert_parallel(vm["ep"].as<int>());
  std::unique_ptr<LanguageModel> model = factory.load(checkpoint, /*sharded=*/true);
  std::unique_ptr<TokenOps> ops = make_token_ops(backend, factory.cuda_context());

  const bool dump = vm.count("dump-logits") != 0;
  std::vector<float> dumped;
  const std::vector<std::int32_t> generated =
      greedy_continuation(*model, *ops, prompt, max_new, dump, dump && root ? &dumped : nullptr);
  std::vector<float> mtp;
  if (vm.count("dump-mtp-logits")) {
    std::vector<std::int32_t> seq = prompt;
    seq.insert(seq.end(), generated.begin(), generated.end());
    mtp = mtp_logits(factory, checkpoint, *model, *ops, seq, chain_hidden == "shared_head_norm");
  }
  if (!root) return 0;
  if (dump) write_dump(vm["dump-logits"].as<std::string>(), dumped, config.vocab_size, dump_policy);
  if (!mtp.empty())
    write_dump(vm["dump-mtp-logits"].as<std::string>(), mtp, config.vocab_size, dump_policy);

  for (std::size_t i = 0; i < generated.size(); ++i) std::cout << (i ? " " : "") << generated[i];
  std::cout << std::endl;
  if (tokenizer) {
    const std::vector<int> ids(generated.begin(), generated.end());
    std::cout << tokenizer->decode_after(ids, prompt.back()) << std::endl;
  }
  return 0;
}

}  // namespace specrun
