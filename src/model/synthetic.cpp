// Synthetic target/draft pairs: see synthetic.h for the construction.
#include "model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/atomic_output.h"
#include "common/error.h"
#include "common/hash.h"
#include "model/safetensors.h"
#include "model/synthetic_quant.h"

namespace specrun {

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() {
  // 53 random bits -> (0, 1]
  return (static_cast<double>(next() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

double SplitMix64::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double kTwoPi = 6.283185307179586476925;
  double r = std::sqrt(-2.0 * std::log(uniform()));
  double theta = kTwoPi * uniform();
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

namespace {

// N(0, std) values of tensor `name`, from its own stream.
TensorToWrite random_tensor(const SyntheticSpec& spec, const std::string& name,
                            std::vector<std::int64_t> shape, double std_dev) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  SplitMix64 mixer(spec.seed ^ fnv1a64(name));
  SplitMix64 rng(mixer.next());
  TensorToWrite t{name, spec.dtype, std::move(shape), {}};
  t.bytes.resize(static_cast<std::size_t>(n) * dtype_size(spec.dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(rng.normal() * std_dev);
    if (spec.dtype == DType::kF32) {
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    } else {
      const std::uint16_t b = f32_to_bf16(v);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    }
  }
  return t;
}

// 1 + N(0, std) for every element: a norm weight that is not the identity.
TensorToWrite near_ones(const SyntheticSpec& spec, const std::string& name, std::int64_t n,
                        double std_dev) {
  TensorToWrite t = random_tensor(spec, name, {n}, std_dev);
  for (std::int64_t i = 0; i < n; ++i) {
    if (spec.dtype == DType::kF32) {
      float v;
      std::memcpy(&v, t.bytes.data() + 4 * i, 4);
      v += 1.0f;
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    } else {
      std::uint16_t b;
      std::memcpy(&b, t.bytes.data() + 2 * i, 2);
      b = f32_to_bf16(bf16_to_f32(b) + 1.0f);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    }
  }
  return t;
}

TensorToWrite ones(const SyntheticSpec& spec, const std::string& name, std::int64_t n) {
  TensorToWrite t{name, spec.dtype, {n}, {}};
  t.bytes.resize(static_cast<std::size_t>(n) * dtype_size(spec.dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    if (spec.dtype == DType::kF32) {
      const float one = 1.0f;
      std::memcpy(t.bytes.data() + 4 * i, &one, 4);
    } else {
      const std::uint16_t b = f32_to_bf16(1.0f);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    }
  }
  return t;
}

// An MoE layer's router and experts under prefix p ("model.layers.{l}."), named as the
// architecture's checkpoints name them; the experts' down projections of std out_std.
void add_experts(const SyntheticSpec& spec, const ModelConfig& c, const std::string& p,
                 double out_std, std::vector<TensorToWrite>& t) {
  const std::int64_t H = c.hidden_size, I = c.moe_intermediate_size, E = c.num_experts;
  const bool mixtral = c.moe_naming == ModelConfig::MoeNaming::kBlockSparseMoe;
  const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
  t.push_back(random_tensor(spec, block + "gate.weight", {E, H}, spec.router_std));
  for (std::int64_t e = 0; e < E; ++e) {
    const std::string x = block + "experts." + std::to_string(e) + ".";
    t.push_back(random_tensor(spec, x + (mixtral ? "w1" : "gate_proj") + ".weight", {I, H},
                              spec.weight_std));
    t.push_back(
        random_tensor(spec, x + (mixtral ? "w3" : "up_proj") + ".weight", {I, H}, spec.weight_std));
    t.push_back(
        random_tensor(spec, x + (mixtral ? "w2" : "down_proj") + ".weight", {H, I}, out_std));
  }
}

// A dense SwiGLU MLP's gate, up and down under prefix p, down of std out_std.
void add_dense_mlp(const SyntheticSpec& spec, const std::string& p, std::int64_t I, std::int64_t H,
                   double out_std, std::vector<TensorToWrite>& t) {
  t.push_back(random_tensor(spec, p + "gate_proj.weight", {I, H}, spec.weight_std));
  t.push_back(random_tensor(spec, p + "up_proj.weight", {I, H}, spec.weight_std));
  t.push_back(random_tensor(spec, p + "down_proj.weight", {H, I}, out_std));
}

// model.safetensors, config.json and generation_config.json (bos 1, eos 2) of a model in dir.
// With spec.quantize, the modules its quantization_config quantizes are written quantized and
// the config carries it (Kimi-K2.5: in the outer object, as its publisher ships it).
void write_model_files(const SyntheticSpec& spec, const std::string& dir, ModelConfig c,
                       std::vector<TensorToWrite> t) {
  std::string config_text = c.to_json_text();
  if (!spec.quantize.empty()) {
    const nlohmann::ordered_json q =
        quantization_config_json(c, spec.quantize, spec.resolved_quant_roles());
    c.quant = QuantConfig::parse(nlohmann::json::parse(q.dump()), dir + "/config.json");
    t = quantize_tensors(c, std::move(t));
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(config_text);
    j["quantization_config"] = q;
    config_text = j.dump(2) + "\n";
  }
  create_output_folder(dir);
  write_safetensors(dir + "/model.safetensors", t);
  const OutputPolicy replace{true, {}, "model file"};
  write_file_atomically(dir + "/config.json", config_text, replace);
  write_file_atomically(dir + "/generation_config.json",
                        "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"do_sample\": "
                        "false\n}\n",
                        replace);
}

// A float32 tensor of N(0, std) values whatever spec.dtype (the router's
// e_score_correction_bias is float32 in DeepSeek-V3's checkpoints).
TensorToWrite random_f32(const SyntheticSpec& spec, const std::string& name, std::int64_t n,
                         double std_dev) {
  SyntheticSpec f32 = spec;
  f32.dtype = DType::kF32;
  return random_tensor(f32, name, {n}, std_dev);
}

// The DeepSeek-V3 family's tensors (HF names; Kimi-K2.5: with ModelConfig::tensor_prefix).
std::vector<TensorToWrite> deepseek_tensors(const SyntheticSpec& spec, const ModelConfig& c) {
  const std::string pre = c.tensor_prefix;
  const MlaConfig& m = c.mla;
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t heads = c.num_heads, R = m.kv_lora_rank;
  // The MTP modules (num_nextn_predict_layers) are layers num_layers.. of the same kind rule.
  ModelConfig with_mtp = c;
  with_mtp.num_layers += c.num_nextn_predict_layers;
  std::vector<TensorToWrite> t;
  t.push_back(random_tensor(spec, pre + "model.embed_tokens.weight", {V, H}, spec.embed_std));
  for (int l = 0; l < with_mtp.num_layers; ++l) {
    const std::string p = pre + "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    const double out_std = spec.weight_std * (l >= spec.draft_layers ? spec.deep_scale : 1.0);
    const std::int64_t q_rows = heads * m.qk_head_dim();
    if (m.q_lora_rank > 0) {
      t.push_back(random_tensor(spec, a + "q_a_proj.weight", {m.q_lora_rank, H}, spec.weight_std));
      t.push_back(near_ones(spec, a + "q_a_layernorm.weight", m.q_lora_rank, spec.norm_std));
      t.push_back(random_tensor(spec, a + "q_b_proj.weight", {q_rows, m.q_lora_rank},
                                spec.mla_std / std::sqrt(m.q_lora_rank / 16.0)));
    } else {
      t.push_back(random_tensor(spec, a + "q_proj.weight", {q_rows, H},
                                spec.mla_std / std::sqrt(H / 16.0)));
    }
    t.push_back(random_tensor(spec, a + "kv_a_proj_with_mqa.weight", {R + m.qk_rope_head_dim, H},
                              spec.mla_std / std::sqrt(H / 16.0)));
    t.push_back(near_ones(spec, a + "kv_a_layernorm.weight", R, spec.norm_std));
    t.push_back(random_tensor(spec, a + "kv_b_proj.weight",
                              {heads * (m.qk_nope_head_dim + m.v_head_dim), R},
                              spec.mla_std / std::sqrt(R / 16.0)));
    t.push_back(random_tensor(spec, a + "o_proj.weight", {H, heads * m.v_head_dim}, out_std));
    if (with_mtp.layer_kind(l).mlp == MlpKind::kMoe) {
      const std::int64_t E = c.num_experts, IE = c.moe_intermediate_size;
      const std::string x = p + "mlp.";
      t.push_back(random_tensor(spec, x + "gate.weight", {E, H}, spec.router_std));
      t.push_back(random_f32(spec, x + "gate.e_score_correction_bias", E, spec.router_bias_std));
      for (std::int64_t e = 0; e < E; ++e)
        add_dense_mlp(spec, x + "experts." + std::to_string(e) + ".", IE, H, out_std, t);
      if (c.router.n_shared_experts > 0)
        add_dense_mlp(spec, x + "shared_experts.", IE * c.router.n_shared_experts, H, out_std, t);
    } else {
      add_dense_mlp(spec, p + "mlp.", I, H, out_std, t);
    }
    t.push_back(ones(spec, p + "input_layernorm.weight", H));
    t.push_back(ones(spec, p + "post_attention_layernorm.weight", H));
    if (l >= c.num_layers) {
      // An MTP module (docs/mtp-design.md): enorm, hnorm, eh_proj [H, 2H] over
      // cat(enorm(embed), hnorm(h)), shared_head.norm; embed_tokens and shared_head.head are
      // the target's (not written).
      t.push_back(near_ones(spec, p + "enorm.weight", H, spec.norm_std));
      t.push_back(near_ones(spec, p + "hnorm.weight", H, spec.norm_std));
      t.push_back(random_tensor(spec, p + "eh_proj.weight", {H, 2 * H}, spec.weight_std));
      t.push_back(near_ones(spec, p + "shared_head.norm.weight", H, spec.norm_std));
    }
  }
  t.push_back(ones(spec, pre + "model.norm.weight", H));
  t.push_back(random_tensor(spec, pre + "lm_head.weight", {V, H}, spec.lm_head_std));
  return t;
}

void write_model(const SyntheticSpec& spec, bool draft, const std::string& dir) {
  const ModelConfig c = synthetic_config(spec, draft);
  if (spec.deepseek()) {
    write_model_files(spec, dir, c, deepseek_tensors(spec, c));
    return;
  }
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t q = static_cast<std::int64_t>(c.num_heads) * c.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
  std::vector<TensorToWrite> t;
  t.push_back(random_tensor(spec, "model.embed_tokens.weight", {V, H}, spec.embed_std));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // Layers the draft lacks write only a little into the residual stream.
    const double out_std = spec.weight_std * (l >= spec.draft_layers ? spec.deep_scale : 1.0);
    t.push_back(random_tensor(spec, p + "self_attn.q_proj.weight", {q, H}, spec.weight_std));
    t.push_back(random_tensor(spec, p + "self_attn.k_proj.weight", {kv, H}, spec.weight_std));
    t.push_back(random_tensor(spec, p + "self_attn.v_proj.weight", {kv, H}, spec.weight_std));
    t.push_back(random_tensor(spec, p + "self_attn.o_proj.weight", {H, q}, out_std));
    if (c.layer_kind(l).mlp == MlpKind::kMoe) {
      add_experts(spec, c, p, out_std, t);
    } else {
      add_dense_mlp(spec, p + "mlp.", I, H, out_std, t);
    }
    t.push_back(ones(spec, p + "input_layernorm.weight", H));
    t.push_back(ones(spec, p + "post_attention_layernorm.weight", H));
    if (c.qk_norm) {
      t.push_back(near_ones(spec, p + "self_attn.q_norm.weight", c.head_dim, spec.norm_std));
      t.push_back(near_ones(spec, p + "self_attn.k_norm.weight", c.head_dim, spec.norm_std));
    }
  }
  t.push_back(ones(spec, "model.norm.weight", H));
  t.push_back(random_tensor(spec, "lm_head.weight", {V, H}, spec.lm_head_std));
  write_model_files(spec, dir, c, std::move(t));
}

}  // namespace

void validate(const SyntheticSpec& s) {
  SPEC_INPUT_CHECK(s.hidden > 0 && s.layers > 0 && s.heads > 0 && s.kv_heads > 0 &&
                       s.intermediate > 0 && s.vocab > 0 && s.max_pos > 0,
                   "make-model: --hidden, --layers, --heads, --kv-heads, --intermediate, --vocab "
                   "and --max-pos must be positive");
  SPEC_INPUT_CHECK(s.vocab >= 3, "make-model: --vocab " << s.vocab
                                                        << " must be at least 3 (ids 1 and 2 are "
                                                           "BOS and EOS)");
  SPEC_INPUT_CHECK(
      s.architecture == "llama" || s.architecture == "qwen3" || s.moe() || s.deepseek(),
      "make-model: --arch " << s.architecture
                            << " is not supported: use llama, qwen3, qwen3_moe, "
                               "mixtral, deepseek_v3 or kimi_k25");
  if (s.deepseek()) {
    SPEC_INPUT_CHECK(s.q_lora_rank >= 0 && s.kv_lora_rank >= 1 && s.qk_nope_head_dim >= 1 &&
                         s.qk_rope_head_dim >= 2 && s.qk_rope_head_dim % 2 == 0 &&
                         s.v_head_dim >= 1,
                     "make-model: --q-lora-rank must be >= 0 (0: a plain q_proj), --kv-lora-rank, "
                     "--qk-nope-head-dim and --v-head-dim >= 1, --qk-rope-head-dim even and >= 2");
    SPEC_INPUT_CHECK(s.experts >= 1 && s.n_group >= 1 && s.experts % s.n_group == 0 &&
                         (s.n_group == 1 || s.experts / s.n_group >= 2) && s.topk_group >= 1 &&
                         s.topk_group <= s.n_group && s.experts_per_tok >= 1 &&
                         s.experts_per_tok <= s.topk_group * (s.experts / s.n_group),
                     "make-model: need --n-group dividing --experts with >= 2 experts per group, "
                     "1 <= --topk-group <= --n-group and 1 <= --experts-per-tok <= the experts "
                     "of --topk-group groups");
    SPEC_INPUT_CHECK(s.first_k_dense_replace >= 0 && s.n_shared_experts >= 0 &&
                         s.routed_scaling_factor > 0 && s.rope_factor >= 1 &&
                         s.max_pos / s.rope_factor >= 1 && s.mla_std > 0 && s.moe_intermediate >= 0,
                     "make-model: need --first-k-dense >= 0, --n-shared-experts >= 0, "
                     "--routed-scaling > 0, --rope-factor >= 1 (<= --max-pos), --mla-std > 0");
  }
  SPEC_INPUT_CHECK(s.mtp_layers >= 0 && s.mtp_layers <= 4 && (s.mtp_layers == 0 || s.deepseek()),
                   "make-model: --mtp-layers " << s.mtp_layers
                                               << " must be in 0..4, and 0 unless --arch is "
                                                  "deepseek_v3 or kimi_k25");
  if (s.moe()) {
    SPEC_INPUT_CHECK(s.experts >= 1 && s.experts_per_tok >= 1 && s.experts_per_tok <= s.experts,
                     "make-model: --experts " << s.experts << " and --experts-per-tok "
                                              << s.experts_per_tok
                                              << " must satisfy 1 <= experts-per-tok <= experts");
    SPEC_INPUT_CHECK(s.moe_intermediate >= 0 && s.decoder_sparse_step >= 1 && s.router_std > 0,
                     "make-model: --moe-intermediate must be >= 0 (0: --intermediate), "
                     "--decoder-sparse-step >= 1 and --router-std > 0");
    for (int layer : s.mlp_only_layers)
      SPEC_INPUT_CHECK(layer >= 0 && layer < s.layers,
                       "make-model: --mlp-only-layers lists "
                           << layer << ", which is not a layer in 0.." << s.layers - 1);
    SPEC_INPUT_CHECK(
        s.architecture == "qwen3_moe" ||
            (s.decoder_sparse_step == 1 && s.mlp_only_layers.empty() && s.moe_intermediate == 0),
        "make-model: --decoder-sparse-step, --mlp-only-layers and --moe-intermediate "
        "are Qwen3-MoE's (--arch qwen3_moe); Mixtral's experts are --intermediate "
        "wide and every layer is MoE");
  }
  SPEC_INPUT_CHECK(s.head_dim >= 0, "make-model: --head-dim must be >= 0 (0: hidden / heads)");
  SPEC_INPUT_CHECK(s.head_dim > 0 || s.hidden % s.heads == 0 || s.deepseek(),
                   "make-model: --hidden " << s.hidden << " is not divisible by --heads " << s.heads
                                           << " (or give --head-dim)");
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.hidden / s.heads;
  SPEC_INPUT_CHECK(head_dim % 2 == 0 || s.deepseek(),
                   "make-model: head dim " << head_dim << " must be even (rotary pairs)");
  SPEC_INPUT_CHECK(s.deepseek() || s.heads % s.kv_heads == 0, "make-model: --heads "
                                                                  << s.heads
                                                                  << " is not a multiple of "
                                                                     "--kv-heads "
                                                                  << s.kv_heads);
  SPEC_INPUT_CHECK(s.draft_layers >= 1 && s.draft_layers <= s.layers,
                   "make-model: --draft-layers " << s.draft_layers << " must be in 1..--layers ("
                                                 << s.layers << ")");
  SPEC_INPUT_CHECK(s.dtype == DType::kBF16 || s.dtype == DType::kF32,
                   "make-model: --dtype must be bf16 or f32");
  SPEC_INPUT_CHECK(s.weight_std > 0 && s.embed_std > 0 && s.lm_head_std > 0 && s.deep_scale >= 0,
                   "make-model: standard deviations must be positive and --deep-scale >= 0");
  if (!s.quantize.empty()) {
    validate_quantize(s.quantize, s.quant_roles);
  } else {
    SPEC_INPUT_CHECK(s.quant_roles.empty(), "make-model: --quant-roles needs --quantize");
  }
}

ModelConfig synthetic_config(const SyntheticSpec& spec, bool draft) {
  validate(spec);
  ModelConfig c;
  const bool qwen3 = spec.architecture == "qwen3" || spec.architecture == "qwen3_moe";
  if (spec.architecture == "qwen3_moe") {
    c.architecture = "Qwen3MoeForCausalLM";
  } else if (spec.architecture == "mixtral") {
    c.architecture = "MixtralForCausalLM";
  } else {
    c.architecture = qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
  }
  c.model_type = spec.architecture;
  c.qk_norm = qwen3;
  if (spec.moe()) {
    c.num_experts = spec.experts;
    c.num_experts_per_tok = spec.experts_per_tok;
    const bool mixtral = spec.architecture == "mixtral";
    c.moe_intermediate_size =
        mixtral || spec.moe_intermediate == 0 ? spec.intermediate : spec.moe_intermediate;
    c.norm_topk_prob = mixtral || spec.norm_topk_prob;
    c.decoder_sparse_step = spec.decoder_sparse_step;
    const int layers = draft ? spec.draft_layers : spec.layers;
    for (int layer : spec.mlp_only_layers)
      if (layer < layers) c.mlp_only_layers.push_back(layer);
    c.moe_naming =
        mixtral ? ModelConfig::MoeNaming::kBlockSparseMoe : ModelConfig::MoeNaming::kMlpExperts;
  }
  c.hidden_size = spec.hidden;
  c.intermediate_size = spec.intermediate;
  c.num_layers = draft ? spec.draft_layers : spec.layers;
  if (spec.deepseek()) {
    c.architecture = spec.architecture == "kimi_k25" ? "KimiK25ForConditionalGeneration"
                                                     : "DeepseekV3ForCausalLM";
    c.model_type = spec.architecture == "kimi_k25" ? "kimi_k2" : "deepseek_v3";
    c.tensor_prefix = spec.architecture == "kimi_k25" ? "language_model." : "";
    c.qk_norm = false;
    c.num_heads = c.num_kv_heads = spec.heads;
    MlaConfig& m = c.mla;
    m.q_lora_rank = spec.q_lora_rank;
    m.kv_lora_rank = spec.kv_lora_rank;
    m.qk_nope_head_dim = spec.qk_nope_head_dim;
    m.qk_rope_head_dim = spec.qk_rope_head_dim;
    m.v_head_dim = spec.v_head_dim;
    m.rope_interleave = spec.rope_interleave;
    c.head_dim = m.qk_rope_head_dim;
    c.num_experts = spec.experts;
    c.num_experts_per_tok = spec.experts_per_tok;
    c.moe_intermediate_size = spec.moe_intermediate > 0 ? spec.moe_intermediate : 64;
    c.norm_topk_prob = spec.norm_topk_prob;
    c.first_k_dense_replace = spec.first_k_dense_replace;
    c.num_nextn_predict_layers = draft ? 0 : spec.mtp_layers;
    c.router = MoeRouterConfig{MoeRouterConfig::kSigmoidNoauxTc, spec.n_group, spec.topk_group,
                               spec.routed_scaling_factor, spec.n_shared_experts};
    c.vocab_size = spec.vocab;
    c.max_position_embeddings = spec.max_pos;
    c.rms_norm_eps = spec.rms_norm_eps;
    c.rope_theta = spec.rope_theta;
    if (spec.rope_factor > 1) {
      c.rope_type = "yarn";
      c.rope_factor = spec.rope_factor;
      c.rope_original_max_position = static_cast<int>(spec.max_pos / spec.rope_factor);
      c.rope_beta_fast = 32;
      c.rope_beta_slow = 1;
      c.rope_mscale = spec.yarn_mscale;
      c.rope_mscale_all_dim = spec.yarn_mscale_all_dim;
    }
    c.tie_word_embeddings = false;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    return c;
  }
  c.num_heads = spec.heads;
  c.num_kv_heads = spec.kv_heads;
  c.head_dim = spec.head_dim > 0 ? spec.head_dim : spec.hidden / spec.heads;
  c.vocab_size = spec.vocab;
  c.max_position_embeddings = spec.max_pos;
  c.rms_norm_eps = spec.rms_norm_eps;
  c.rope_theta = spec.rope_theta;
  c.tie_word_embeddings = false;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

std::vector<std::string> make_model_outputs(const SyntheticSpec& spec, const std::string& outdir) {
  std::vector<std::string> files;
  for (const char* role : {"/target/", "/draft/"})
    for (const char* name : {"model.safetensors", "config.json", "generation_config.json"})
      files.push_back(outdir + role + name);
  if (can_make_eagle3_head(spec))
    for (const char* name : {"model.safetensors", "config.json"})
      files.push_back(outdir + "/eagle3/" + name);
  return files;
}

void make_model_pair(const SyntheticSpec& spec, const std::string& outdir) {
  validate(spec);
  write_model(spec, false, outdir + "/target");
  write_model(spec, true, outdir + "/draft");
}

namespace {

// A tensor holding `values` (row-major, converted to spec.dtype).
TensorToWrite from_values(const SyntheticSpec& spec, const std::string& name,
                          std::vector<std::int64_t> shape, const std::vector<float>& values) {
  TensorToWrite t{name, spec.dtype, std::move(shape), {}};
  t.bytes.resize(values.size() * dtype_size(spec.dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (spec.dtype == DType::kF32) {
      std::memcpy(t.bytes.data() + 4 * i, &values[i], 4);
    } else {
      const std::uint16_t b = f32_to_bf16(values[i]);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    }
  }
  return t;
}

// rows x cols, block [r0.., c0..] of size n x n = scale * identity, zero elsewhere.
std::vector<float> identity_block(std::int64_t rows, std::int64_t cols, std::int64_t r0,
                                  std::int64_t c0, std::int64_t n, float scale) {
  std::vector<float> m(static_cast<std::size_t>(rows * cols), 0.0f);
  for (std::int64_t i = 0; i < n; ++i)
    m[static_cast<std::size_t>((r0 + i) * cols + c0 + i)] = scale;
  return m;
}

}  // namespace

bool can_make_eagle3_head(const SyntheticSpec& spec) {
  const ModelConfig t = synthetic_config(spec, false);
  return (spec.architecture == "llama" || spec.moe()) && t.hidden_size % t.head_dim == 0 &&
         t.num_layers >= 4;
}

void make_eagle3_head(const SyntheticSpec& spec, const std::string& dir) {
  validate(spec);
  SPEC_INPUT_CHECK(can_make_eagle3_head(spec),
                   "make-model: a synthetic EAGLE-3 head needs --arch llama, qwen3_moe or mixtral, "
                   "a head dim that divides --hidden and at least 4 target layers");
  const ModelConfig t = synthetic_config(spec, false);
  const std::int64_t H = t.hidden_size, I = t.intermediate_size, V = t.vocab_size;
  const std::int64_t heads = H / t.head_dim;  // q and kv widths = H
  std::vector<TensorToWrite> w;
  // fc passes the deepest captured layer through: hidden = f_high (its RMS is about 1).
  w.push_back(from_values(spec, "fc.weight", {H, 3 * H}, identity_block(H, 3 * H, 0, 2 * H, H, 1)));
  w.push_back(ones(spec, "midlayer.input_layernorm.weight", H));
  w.push_back(ones(spec, "midlayer.hidden_norm.weight", H));
  // Attention over [norm(embed), norm(hidden)]: q = k = 2 norm(embed), so each position attends
  // to itself (a token's own q.k beats the others by ~5 sigma per head); v = norm(embed) -
  // norm(hidden), so the output hidden + v is about norm(embed of the current token) whatever
  // the hidden input was (the target's features, or the head's previous output).
  w.push_back(from_values(spec, "midlayer.self_attn.q_proj.weight", {H, 2 * H},
                          identity_block(H, 2 * H, 0, 0, H, 2)));
  w.push_back(from_values(spec, "midlayer.self_attn.k_proj.weight", {H, 2 * H},
                          identity_block(H, 2 * H, 0, 0, H, 2)));
  std::vector<float> v = identity_block(H, 2 * H, 0, 0, H, 1);
  for (std::int64_t i = 0; i < H; ++i) v[static_cast<std::size_t>(i * 2 * H + H + i)] = -1;
  w.push_back(from_values(spec, "midlayer.self_attn.v_proj.weight", {H, 2 * H}, v));
  w.push_back(from_values(spec, "midlayer.self_attn.o_proj.weight", {H, H},
                          identity_block(H, H, 0, 0, H, 1)));
  w.push_back(ones(spec, "midlayer.post_attention_layernorm.weight", H));
  w.push_back(random_tensor(spec, "midlayer.mlp.gate_proj.weight", {I, H}, spec.weight_std));
  w.push_back(random_tensor(spec, "midlayer.mlp.up_proj.weight", {I, H}, spec.weight_std));
  w.push_back(random_tensor(spec, "midlayer.mlp.down_proj.weight", {H, I}, spec.weight_std / 4));
  w.push_back(ones(spec, "norm.weight", H));
  // The target's own lm_head (same name and seed: the same values): the head predicts what the
  // target would after the current token with its layers' small contributions left out.
  w.push_back(random_tensor(spec, "lm_head.weight", {V, H}, spec.lm_head_std));

  nlohmann::ordered_json c;
  c["architectures"] = {"LlamaForCausalLMEagle3"};
  c["model_type"] = "llama";
  c["hidden_act"] = "silu";
  c["hidden_size"] = H;
  c["intermediate_size"] = I;
  c["num_hidden_layers"] = 1;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = heads;
  c["head_dim"] = t.head_dim;
  c["vocab_size"] = V;
  c["draft_vocab_size"] = V;
  c["max_position_embeddings"] = t.max_position_embeddings;
  c["rms_norm_eps"] = static_cast<double>(t.rms_norm_eps);
  c["rope_theta"] = t.rope_theta;
  c["rope_scaling"] = nullptr;
  c["tie_word_embeddings"] = false;
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  // SGLang's ids (layer outputs; ascending, at most L - 2): the first layer's, one in the middle,
  // the last but one's.
  const int L = t.num_layers;
  c["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {0, std::max(1, (L - 2) / 2), L - 2}},
                       {"use_aux_hidden_state", true}};

  create_output_folder(dir);
  write_safetensors(dir + "/model.safetensors", w);
  write_file_atomically(dir + "/config.json", c.dump(2) + "\n",
                        OutputPolicy{true, {}, "model file"});
}

}  // namespace specrun
