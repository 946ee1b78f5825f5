// `specrun make-model OUTDIR [options]`: a synthetic Llama target (OUTDIR/target) and draft
// (OUTDIR/draft) in Hugging Face layout; see src/model/synthetic.h for the construction. Runs on
// rank 0 only when started under mpirun.
#include <algorithm>
#include <boost/program_options.hpp>
#include <sstream>

#include "app/command_line.h"
#include "app/commands.h"
#include "common/atomic_output.h"
#include "common/error.h"
#include "common/log.h"
#include "dist/mpi_comm.h"
#include "model/synthetic.h"

namespace po = boost::program_options;

namespace specrun {

int cmd_make_model(CommandContext& ctx, const std::vector<std::string>& args) {
  SyntheticSpec s;
  std::string outdir, dtype, mlp_only_layers;
  CommandLine cli("specrun make-model OUTDIR [options]");
  cli.add_options()(
      "arch", po::value(&s.architecture)->default_value(s.architecture),
      "architecture: llama (LlamaForCausalLM), qwen3 (Qwen3ForCausalLM, q/k norms), the "
      "mixtures of experts qwen3_moe (Qwen3MoeForCausalLM) and mixtral (MixtralForCausalLM), or "
      "the DeepSeek-V3 family (MLA, YaRN): deepseek_v3 (DeepseekV3ForCausalLM) and kimi_k25 "
      "(KimiK25ForConditionalGeneration, text_config)")(
      "hidden", po::value(&s.hidden)->default_value(s.hidden), "hidden size")(
      "head-dim", po::value(&s.head_dim)->default_value(s.head_dim),
      "attention head size (0: hidden / heads)")(
      "layers", po::value(&s.layers)->default_value(s.layers), "target decoder layers")(
      "heads", po::value(&s.heads)->default_value(s.heads), "attention heads")(
      "kv-heads", po::value(&s.kv_heads)->default_value(s.kv_heads), "key/value heads (GQA)")(
      "intermediate", po::value(&s.intermediate)->default_value(s.intermediate),
      "MLP intermediate size")("vocab", po::value(&s.vocab)->default_value(s.vocab),
                               "vocabulary size (shared by target and draft)")(
      "max-pos", po::value(&s.max_pos)->default_value(s.max_pos), "max_position_embeddings")(
      "draft-layers", po::value(&s.draft_layers)->default_value(s.draft_layers),
      "draft layers: the draft is the target truncated to its first N layers")(
      "seed", po::value(&s.seed)->default_value(s.seed), "weight seed")(
      "dtype", po::value(&dtype)->default_value("bf16"), "weight dtype: bf16 or f32")(
      "deep-scale", po::value(&s.deep_scale)->default_value(s.deep_scale),
      "scale of o_proj/down_proj in target layers the draft lacks (smaller: more agreement)")(
      "rope-theta", po::value(&s.rope_theta)->default_value(s.rope_theta), "RoPE base")(
      "weight-std", po::value(&s.weight_std)->default_value(s.weight_std),
      "std of the linear weights")("embed-std", po::value(&s.embed_std)->default_value(s.embed_std),
                                   "std of the token embeddings")(
      "lm-head-std", po::value(&s.lm_head_std)->default_value(s.lm_head_std),
      "std of lm_head (larger: peakier next-token distributions)")(
      "experts", po::value(&s.experts)->default_value(s.experts),
      "qwen3_moe, mixtral: routed experts per MoE layer")(
      "experts-per-tok", po::value(&s.experts_per_tok)->default_value(s.experts_per_tok),
      "qwen3_moe, mixtral: experts each token is routed to (top-k)")(
      "moe-intermediate", po::value(&s.moe_intermediate)->default_value(s.moe_intermediate),
      "qwen3_moe: each expert's intermediate size (0: --intermediate; mixtral: --intermediate)")(
      "norm-topk-prob", po::value(&s.norm_topk_prob)->default_value(s.norm_topk_prob),
      "qwen3_moe: renormalise the top-k router weights (mixtral always does)")(
      "decoder-sparse-step",
      po::value(&s.decoder_sparse_step)->default_value(s.decoder_sparse_step),
      "qwen3_moe: layer l is MoE when (l + 1) % step == 0 (and not in --mlp-only-layers)")(
      "mlp-only-layers", po::value(&mlp_only_layers)->default_value(""),
      "qwen3_moe: comma-separated ids of dense layers, e.g. 0,3")(
      "router-std", po::value(&s.router_std)->default_value(s.router_std),
      "qwen3_moe, mixtral: std of the router weights (larger: a more decided routing)")(
      "q-lora-rank", po::value(&s.q_lora_rank)->default_value(s.q_lora_rank),
      "deepseek_v3, kimi_k25: q_lora_rank (0: null, a plain q_proj)")(
      "kv-lora-rank", po::value(&s.kv_lora_rank)->default_value(s.kv_lora_rank),
      "deepseek_v3, kimi_k25: kv_lora_rank (the latent cache's c_kv width)")(
      "qk-nope-head-dim", po::value(&s.qk_nope_head_dim)->default_value(s.qk_nope_head_dim),
      "deepseek_v3, kimi_k25: qk_nope_head_dim")(
      "qk-rope-head-dim", po::value(&s.qk_rope_head_dim)->default_value(s.qk_rope_head_dim),
      "deepseek_v3, kimi_k25: qk_rope_head_dim")(
      "v-head-dim", po::value(&s.v_head_dim)->default_value(s.v_head_dim),
      "deepseek_v3, kimi_k25: v_head_dim")(
      "first-k-dense", po::value(&s.first_k_dense_replace)->default_value(s.first_k_dense_replace),
      "deepseek_v3, kimi_k25: first_k_dense_replace (layers below it are dense)")(
      "mtp-layers", po::value(&s.mtp_layers)->default_value(s.mtp_layers),
      "deepseek_v3, kimi_k25: MTP modules after the decoder (num_nextn_predict_layers)")(
      "n-group", po::value(&s.n_group)->default_value(s.n_group),
      "deepseek_v3, kimi_k25: the router's expert groups (n_group)")(
      "topk-group", po::value(&s.topk_group)->default_value(s.topk_group),
      "deepseek_v3, kimi_k25: groups eligible per token (topk_group)")(
      "n-shared-experts", po::value(&s.n_shared_experts)->default_value(s.n_shared_experts),
      "deepseek_v3, kimi_k25: shared experts (n_shared_experts)")(
      "routed-scaling", po::value(&s.routed_scaling_factor)->default_value(s.routed_scaling_factor),
      "deepseek_v3, kimi_k25: routed_scaling_factor")(
      "router-bias-std", po::value(&s.router_bias_std)->default_value(s.router_bias_std),
      "deepseek_v3, kimi_k25: std of the float32 e_score_correction_bias")(
      "rope-factor", po::value(&s.rope_factor)->default_value(s.rope_factor),
      "deepseek_v3, kimi_k25: YaRN factor (1: no YaRN; original_max_position_embeddings = "
      "--max-pos / factor)")("yarn-mscale", po::value(&s.yarn_mscale)->default_value(s.yarn_mscale),
                             "deepseek_v3, kimi_k25: YaRN mscale")(
      "yarn-mscale-all-dim",
      po::value(&s.yarn_mscale_all_dim)->default_value(s.yarn_mscale_all_dim),
      "deepseek_v3, kimi_k25: YaRN mscale_all_dim")(
      "rope-interleave", po::value(&s.rope_interleave)->default_value(s.rope_interleave),
      "deepseek_v3, kimi_k25: rope_interleave (1: DeepSeek's interleaved rope pairs)")(
      "mla-std", po::value(&s.mla_std)->default_value(s.mla_std),
      "deepseek_v3, kimi_k25: std scale of q_b/q_proj, kv_a and kv_b (attention scores O(1))")(
      "quantize", po::value(&s.quantize),
      "write target and draft quantized as their publishers ship them: int4-g32 "
      "(compressed-tensors pack-quantized, 4-bit, group 32, symmetric: Kimi-K2.5's experts), "
      "int4-g128-asym (group 128 with zero points) or fp8-block (DeepSeek-V3's e4m3 with 128x128 "
      "weight_scale_inv); the rules are in docs/reference.md")(
      "quant-roles", po::value(&s.quant_roles),
      "with --quantize: experts (the routed experts only; the default for MoE targets), linear "
      "(every Linear but lm_head and routers; the default otherwise) or all (lm_head too)")(
      "overwrite", "replace the files of a model already in OUTDIR (otherwise an error)");
  cli.positional("outdir", po::value(&outdir));
  if (!cli.parse(
          ctx, args,
          "\nWrites OUTDIR/target and OUTDIR/draft (config.json, generation_config.json,\n"
          "model.safetensors) and, for llama, qwen3_moe and mixtral targets of 4+ layers,\n"
          "OUTDIR/eagle3: a hand-built EAGLE-3 head for the target (draft.kind = \"eagle3\").\n"
          "The draft is the target truncated to --draft-layers (an MoE target's draft keeps its\n"
          "routers and experts). Weights are seeded and identical on every machine.\n"))
    return 0;
  const po::variables_map& vm = cli.values();
  Logger log(ctx.mpi.rank(), ctx.mpi.size());
  SPEC_INPUT_CHECK(!outdir.empty(), "usage: specrun make-model OUTDIR [options] (see --help)");
  SPEC_INPUT_CHECK(dtype == "bf16" || dtype == "f32",
                   "--dtype " << dtype << " is not supported: use bf16 or f32");
  s.dtype = dtype == "f32" ? DType::kF32 : DType::kBF16;
  for (std::size_t at = 0; at < mlp_only_layers.size();) {
    const std::size_t comma = std::min(mlp_only_layers.find(',', at), mlp_only_layers.size());
    const std::string item = mlp_only_layers.substr(at, comma - at);
    SPEC_INPUT_CHECK(!item.empty() && item.size() <= 6 &&
                         item.find_first_not_of("0123456789") == std::string::npos,
                     "--mlp-only-layers \"" << mlp_only_layers << "\": '" << item
                                            << "' is not a layer id (write e.g. 0,3)");
    s.mlp_only_layers.push_back(std::stoi(item));
    at = comma + 1;
  }
  validate(s);
  if (!log.is_root()) return 0;
  // Every file is checked before any is written: a model already there is not half replaced.
  for (const std::string& file : make_model_outputs(s, outdir))
    check_output_path(file, OutputPolicy{vm.count("overwrite") > 0, {}, "model file", true});
  make_model_pair(s, outdir);
  const bool head = can_make_eagle3_head(s);
  if (head) make_eagle3_head(s, outdir + "/eagle3");
  std::ostringstream msg;
  msg << "wrote " << outdir << "/target (" << s.layers << " layers), " << outdir << "/draft ("
      << s.draft_layers << " layer" << (s.draft_layers == 1 ? "" : "s") << ")"
      << (head ? " and " + outdir + "/eagle3 (an EAGLE-3 head)" : "") << ": hidden " << s.hidden
      << ", heads " << s.heads << "/" << s.kv_heads << ", vocab " << s.vocab << ", " << dtype
      << ", " << s.architecture << ", seed " << s.seed;
  if (!s.quantize.empty())
    msg << ", quantized " << s.quantize << " (" << s.resolved_quant_roles() << ")";
  log.info(msg.str());
  return 0;
}

}  // namespace specrun
