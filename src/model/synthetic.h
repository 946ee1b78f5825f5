// Synthetic Llama target/draft pairs in Hugging Face layout, for tests, benchmarks and the
// default demo (nothing is downloaded).
//
// Construction (all weights from a seeded generator, identical on every machine):
//  - Every tensor is drawn from its own stream, seeded by splitmix64(seed, FNV-1a(tensor name)),
//    so a tensor's values depend only on (seed, name, shape), not on the order of generation.
//    Normals come from Box-Muller over splitmix64 uniforms.
//  - Linear weights ~ N(0, weight_std) (0.02); embeddings ~ N(0, embed_std) (1.0) so that the
//    token identity dominates the residual stream; lm_head ~ N(0, lm_head_std) so logits are not
//    flat; RMSNorm weights = 1 (Qwen3's q/k norms: 1 + N(0, norm_std)). No biases, untied
//    lm_head.
//  - The draft is a truncated target: it has the target's embeddings, its first `draft_layers`
//    decoder layers (bit-identical), final norm and lm_head, with num_hidden_layers =
//    draft_layers. Same vocabulary and tokenizer-free ids.
//  - In the target, the output projections (o_proj, down_proj) of the layers the draft does not
//    have are multiplied by `deep_scale`. With these stds every layer perturbs the residual
//    stream only a little (the embedding dominates), so an unscaled truncated target already
//    agrees ~94% of the time; deep_scale < 1 pushes agreement towards 100%, > 1 lowers it. The
//    default 2.0 gives greedy agreement argmax(draft) == argmax(target) of about 0.8 and
//    alpha = sum_x min(p, q) of about 0.83 on the target's own greedy continuations (measured
//    with an independent numpy forward pass for seeds 3, 7, 11, draft_layers 1 and 2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "model/model_config.h"

namespace specrun {

struct SyntheticSpec {
  // "llama" (LlamaForCausalLM) or "qwen3" (Qwen3ForCausalLM: per-head q/k RMSNorm weights, drawn
  // as 1 + N(0, norm_std) so that a graph that skips or swaps them is caught, and a head_dim
  // given on its own), or a mixture of experts: "qwen3_moe" (Qwen3MoeForCausalLM: q/k norms as
  // Qwen3, experts of moe_intermediate, dense layers by decoder_sparse_step and mlp_only_layers)
  // or "mixtral" (MixtralForCausalLM: every layer MoE, experts of `intermediate`).
  std::string architecture = "llama";
  int head_dim = 0;  // 0: hidden / heads
  double norm_std = 0.2;
  int hidden = 256;
  int layers = 4;  // target layers
  int heads = 8;
  int kv_heads = 4;
  int intermediate = 688;
  int vocab = 512;
  int max_pos = 1024;
  int draft_layers = 1;  // 1..layers
  std::uint64_t seed = 1;
  DType dtype = DType::kBF16;  // kBF16 or kF32
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-5f;
  double weight_std = 0.02;
  double embed_std = 1.0;
  double lm_head_std = 0.2;  // logits std ~ lm_head_std*sqrt(hidden): mean max prob ~0.3
  double deep_scale = 2.0;   // multiplies o_proj/down_proj of target layers >= draft_layers
  // Mixture of experts (qwen3_moe, mixtral): routed experts, top-k, the experts' width
  // (qwen3_moe; 0: `intermediate`), Qwen3-MoE's norm_topk_prob, decoder_sparse_step and
  // mlp_only_layers, and the std of the router weights (its logits' std is about router_std *
  // sqrt(hidden): larger is a more decided routing, far from ties).
  int experts = 8;
  int experts_per_tok = 2;
  int moe_intermediate = 0;
  bool norm_topk_prob = true;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  double router_std = 0.1;

  // The DeepSeek-V3 family: "deepseek_v3" (DeepseekV3ForCausalLM) or "kimi_k25" (the outer
  // KimiK25ForConditionalGeneration config.json with the text model as text_config, tensors
  // named "language_model.*"). MLA shapes (q_lora_rank 0: a plain q_proj), YaRN (rope_factor >
  // 1: original_max_position_embeddings = max_pos / rope_factor), the dense layers below
  // first_k_dense_replace and MoE layers with DeepSeek-V3's router fields (n_group groups, the
  // topk_group best eligible, a nonzero float32 e_score_correction_bias of std router_bias_std,
  // n_shared_experts shared experts). mla_std: the std of q_b/q_proj, kv_a and kv_b, large
  // enough that attention scores are O(1) (a flat softmax would hide a wrong scale).
  int q_lora_rank = 64;
  int kv_lora_rank = 48;
  int qk_nope_head_dim = 24;
  int qk_rope_head_dim = 16;
  int v_head_dim = 32;
  int first_k_dense_replace = 1;
  int n_group = 2;
  int topk_group = 1;
  int n_shared_experts = 1;
  double routed_scaling_factor = 2.5;
  double router_bias_std = 0.1;
  double rope_factor = 4.0;
  double yarn_mscale = 1.0;
  double yarn_mscale_all_dim = 1.0;
  double mla_std = 0.2;
  bool rope_interleave = true;  // config.json's rope_interleave
  // num_nextn_predict_layers of the target: MTP modules written as layers `layers`.. (enorm,
  // hnorm, eh_proj, a decoder layer, shared_head.norm; docs/mtp-design.md). 0: none.
  int mtp_layers = 0;

  // make-model --quantize (model/synthetic_quant.h): "" (float), "int4-g32", "int4-g128-asym"
  // or "fp8-block"; quant_roles "experts", "linear", "all" or "" (experts when the target has
  // routed experts, else linear). Target and draft alike; the EAGLE-3 head stays float.
  std::string quantize;
  std::string quant_roles;

  bool moe() const { return architecture == "qwen3_moe" || architecture == "mixtral"; }
  bool deepseek() const { return architecture == "deepseek_v3" || architecture == "kimi_k25"; }
  std::string resolved_quant_roles() const {
    return !quant_roles.empty() ? quant_roles : moe() || deepseek() ? "experts" : "linear";
  }
};

// Throws (exit code 2) naming the option (--hidden, --heads, ...) when `spec` is inconsistent.
void validate(const SyntheticSpec& spec);

// The config.json of the target (num_layers = spec.layers) or the draft (spec.draft_layers).
ModelConfig synthetic_config(const SyntheticSpec& spec, bool draft);

// Writes OUTDIR/target and OUTDIR/draft, each with config.json, generation_config.json
// (bos 1, eos 2) and model.safetensors (an MoE target's draft is the truncated MoE target: its
// routers and experts bit-identical). Creates the directories; replaces existing files (each
// through a temporary file and a rename, never through a link: common/atomic_output.h).
void make_model_pair(const SyntheticSpec& spec, const std::string& outdir);
// Every file `specrun make-model` writes for `spec` (the pair, and the EAGLE-3 head when
// can_make_eagle3_head): what the command checks before it writes any of them.
std::vector<std::string> make_model_outputs(const SyntheticSpec& spec, const std::string& outdir);

// A synthetic EAGLE-3 head for the target of `spec` (SGLang layout: config.json with
// LlamaForCausalLMEagle3, fc / midlayer.* / norm / lm_head; the draft vocabulary is the
// target's, so no d2t). Hand-built rather than random so that it drafts usefully: fc passes the
// deepest captured layer through, the midlayer's attention copies the current token's
// normalised embedding into the output and cancels the hidden input, and lm_head is the
// target's, so it predicts what the target would with its layers' small contributions left
// out (the synthetic targets are embedding-dominated, see above). For the demo and tests; the
// trained head for a trained target is shared/models/code-eagle3.
// llama, qwen3_moe or mixtral; head dim | hidden; >= 4 layers.
bool can_make_eagle3_head(const SyntheticSpec& spec);
void make_eagle3_head(const SyntheticSpec& spec, const std::string& dir);

// The deterministic generator behind the weights, exposed for tests: splitmix64 stream.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  double uniform();  // in (0, 1]
  double normal();   // N(0, 1), Box-Muller

 private:
  std::uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace specrun
