#!/usr/bin/python3
"""An independent forward pass in numpy (float64) for the DeepSeek-V3 family
(DeepseekV3ForCausalLM, and KimiK25ForConditionalGeneration's text model: text_config, tensors
named "language_model.*"), written from Hugging Face transformers' modeling_deepseek_v3
semantics, not from specrun's graph:
  - RMSNorm (weight * x / sqrt(mean(x^2) + eps)); dense SwiGLU MLPs;
  - YaRN RoPE (_compute_yarn_parameters): inverse frequencies 1/theta^(2i/d) over the rope part
    (d = qk_rope_head_dim), blended between extrapolation (unchanged) and interpolation (/factor)
    by a linear ramp between floor/ceil of the correction dimensions of beta_fast and beta_slow
    (at original_max_position_embeddings); cos and sin times attention_factor (given, or
    mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else
    mscale(factor, 1); mscale(s, m) = 0.1 m ln s + 1 for s > 1);
  - rope_interleave (default true): q_rot and k_rot de-interleaved ((2i, 2i+1) pairs to halves)
    then rotate_half, as apply_rotary_pos_emb_interleave does;
  - MLA in the NAIVE form, as DeepseekV3Attention computes it: q = q_b(rmsnorm(q_a(x))) (or
    q_proj(x) when q_lora_rank is null), [c ; k_rot] = kv_a_proj_with_mqa(x),
    [k_nope ; v] = kv_b(rmsnorm(c)) per head, keys [k_nope ; k_rot] (k_rot shared by the heads),
    causal softmax with scaling qk_head_dim^-0.5 (times mscale(factor, mscale_all_dim)^2 when
    mscale_all_dim is set), o_proj;
  - and the same attention in the ABSORBED form (queries through kv_b's key part into the latent
    space, scores against the normed latent and k_rot, the output through kv_b's value part):
    both forms are computed at every layer and must agree to 1e-9 (relative), float64.
  - mixture-of-experts layers (layer >= first_k_dense_replace, layer % moe_layer_freq == 0):
    DeepseekV3TopkRouter's noaux_tc rule, sigmoid of the router logits, the choice on scores +
    e_score_correction_bias, with n_group > 1 only the topk_group groups of the highest group
    scores (a group's two best biased scores, summed) eligible and the others never chosen (the
    issue's rule; Hugging Face fills them with 0.0, which only differs when every eligible biased
    score is negative), the top num_experts_per_tok by the biased choice, weights the unbiased
    scores normalised (+1e-20) when norm_topk_prob, times routed_scaling_factor; each expert's
    SwiGLU weighted and summed, plus the shared experts' SwiGLU unweighted. The comparison is only
    meaningful without near ties: the smallest gap at the k-th expert and at the topk_group-th
    group must exceed --min-margin (default 1e-4).

usage: deepseek_reference.py MODEL_DIR LOGITS_DUMP TOKENS [--tolerance T] [--min-margin M]
  LOGITS_DUMP: a `specrun generate --dump-logits` file, TOKENS: the prompt and the generated
  ids, comma-separated. Every row's relative L2 error must be below the tolerance and every
  row's argmax must agree. Exit 0/1.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_reference import read_dump, read_safetensors, rms_norm, rotate_half  # noqa: E402


def yarn_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rope(cfg, T):
    """cos, sin [T, d] (HF's cat(freqs, freqs) layout, times attention_factor) and the softmax
    scale."""
    d = cfg["qk_rope_head_dim"]
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    scaling = (cfg["qk_nope_head_dim"] + d) ** -0.5
    factor_cs = 1.0
    rs = cfg.get("rope_scaling")
    if rs is not None and rs.get("rope_type", rs.get("type")) == "yarn":
        f = rs["factor"]
        omp = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
        af = rs.get("attention_factor")
        if af is None:
            af = yarn_mscale(f, ms) / yarn_mscale(f, msa) if ms and msa else yarn_mscale(f, 1)
        factor_cs = af

        def corr(rot):
            return d * math.log(omp / (rot * 2 * math.pi)) / (2 * math.log(theta))

        lo, hi = max(math.floor(corr(fast)), 0), min(math.ceil(corr(slow)), d - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(d // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        inv = inv / f * (1 - extra) + inv * extra
        if msa:
            scaling *= yarn_mscale(f, msa) ** 2
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    return np.cos(emb) * factor_cs, np.sin(emb) * factor_cs, scaling


def apply_rope(x, cos, sin, interleave):
    """x [..., T, d]."""
    if interleave:
        d = x.shape[-1]
        x = x.reshape(*x.shape[:-1], d // 2, 2).swapaxes(-1, -2).reshape(x.shape)
    return x * cos + rotate_half(x) * sin


def mla(cfg, w, p, h, cos, sin, scaling, worst_form):
    T = h.shape[0]
    nh = cfg["num_attention_heads"]
    dn, dr, dv, R = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"],
                     cfg["kv_lora_rank"])
    eps = cfg["rms_norm_eps"]
    a = p + "self_attn."
    if cfg.get("q_lora_rank") is None:
        q = h @ w[a + "q_proj.weight"].T
    else:
        qa = rms_norm(h @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], eps)
        q = qa @ w[a + "q_b_proj.weight"].T
    q = q.reshape(T, nh, dn + dr).transpose(1, 0, 2)  # [heads, T, qk]
    q_pass, q_rot = q[..., :dn], q[..., dn:]
    ckv = h @ w[a + "kv_a_proj_with_mqa.weight"].T
    c, k_rot = ckv[:, :R], ckv[:, R:]
    c = rms_norm(c, w[a + "kv_a_layernorm.weight"], eps)
    interleave = cfg.get("rope_interleave", True)
    q_rot = apply_rope(q_rot, cos, sin, interleave)
    k_rot = apply_rope(k_rot[None], cos, sin, interleave)[0]  # [T, dr]
    mask = np.triu(np.full((T, T), -np.inf), k=1)

    def softmax(s):
        s = s + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        return s / s.sum(axis=-1, keepdims=True)

    # Naive: keys and values expanded per head.
    kvb = w[a + "kv_b_proj.weight"]  # [heads * (dn + dv), R]
    kv = (c @ kvb.T).reshape(T, nh, dn + dv).transpose(1, 0, 2)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    scores = (q_pass @ k_nope.transpose(0, 2, 1) + q_rot @ k_rot.T[None]) * scaling
    naive = softmax(scores) @ v  # [heads, T, dv]
    # Absorbed: through kv_b's per-head key and value parts, over the latent.
    kvb_h = kvb.reshape(nh, dn + dv, R)
    w_uk, w_uv = kvb_h[:, :dn, :], kvb_h[:, dn:, :]
    q_lat = np.einsum("htd,hdr->htr", q_pass, w_uk)
    scores_abs = (q_lat @ c.T + q_rot @ k_rot.T[None]) * scaling
    absorbed = np.einsum("htr,hvr->htv", softmax(scores_abs) @ c, w_uv)
    worst_form[0] = max(worst_form[0],
                        float(np.linalg.norm(naive - absorbed) / np.linalg.norm(naive)))
    out = naive.transpose(1, 0, 2).reshape(T, nh * dv)
    return out @ w[a + "o_proj.weight"].T


def swiglu(x, w, p):
    g = x @ w[p + "gate_proj.weight"].T
    return (g / (1.0 + np.exp(-g)) * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def moe(cfg, w, p, h, margins):
    E, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    n_group, topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
    scores = 1.0 / (1.0 + np.exp(-(h @ w[p + "mlp.gate.weight"].T)))  # [T, E]
    choice = scores + w[p + "mlp.gate.e_score_correction_bias"][None, :]
    if n_group > 1:
        grouped = np.sort(choice.reshape(len(h), n_group, E // n_group), axis=-1)
        group_score = grouped[..., -1] + grouped[..., -2]  # [T, groups]
        order = np.argsort(-group_score, axis=-1, kind="stable")
        if topk_group < n_group:
            ranked = np.take_along_axis(group_score, order, axis=-1)
            margins.append(float((ranked[:, topk_group - 1] - ranked[:, topk_group]).min()))
        eligible = np.zeros((len(h), n_group), dtype=bool)
        np.put_along_axis(eligible, order[:, :topk_group], True, axis=-1)
        choice = np.where(np.repeat(eligible, E // n_group, axis=-1), choice, -np.inf)
    order = np.argsort(-choice, axis=-1, kind="stable")
    top = order[:, :k]
    ranked = np.take_along_axis(choice, order, axis=-1)
    if k < E and np.isfinite(ranked[:, k]).all():
        margins.append(float((ranked[:, k - 1] - ranked[:, k]).min()))
    weight = np.take_along_axis(scores, top, axis=-1)
    if cfg.get("norm_topk_prob", True):
        weight = weight / (weight.sum(axis=-1, keepdims=True) + 1e-20)
    weight = weight * cfg.get("routed_scaling_factor", 1.0)
    out = np.zeros_like(h)
    for e in range(E):
        rows, slot = np.nonzero(top == e)
        if len(rows):
            out[rows] += weight[rows, slot][:, None] * swiglu(h[rows], w, f"{p}mlp.experts.{e}.")
    if cfg.get("n_shared_experts"):
        out += swiglu(h, w, p + "mlp.shared_experts.")
    return out


def decoder_layer(cfg, w, layer, x, cos, sin, scaling, worst_form, margins):
    """Checkpoint layer `layer` (MLA, then a dense or MoE MLP by first_k_dense_replace and
    moe_layer_freq) on the residual stream x [T, H]."""
    first_dense = cfg.get("first_k_dense_replace", 0)
    freq = cfg.get("moe_layer_freq", 1)
    eps = cfg["rms_norm_eps"]
    p = f"model.layers.{layer}."
    x = x + mla(cfg, w, p, rms_norm(x, w[p + "input_layernorm.weight"], eps), cos, sin, scaling,
                worst_form)
    hn = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
    if cfg.get("n_routed_experts") is not None and layer >= first_dense and layer % freq == 0:
        return x + moe(cfg, w, p, hn, margins)
    return x + swiglu(hn, w, p + "mlp.")


def lm_head(cfg, w):
    return w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]


def forward(cfg, w, tokens, worst_form, margins, hidden=None):
    """The logits at every position; `hidden`, a list, receives the final norm's output."""
    cos, sin, scaling = rope(cfg, len(tokens))
    x = w["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["num_hidden_layers"]):
        x = decoder_layer(cfg, w, layer, x, cos, sin, scaling, worst_form, margins)
    x = rms_norm(x, w["model.norm.weight"], cfg["rms_norm_eps"])
    if hidden is not None:
        hidden.append(x)
    return x @ lm_head(cfg, w).T


def compare(dump_path, want):
    """(the dump's rows, each row's relative L2 error, the worst row, the rows whose argmax
    differs) of a --dump-logits style file against the reference rows."""
    got = read_dump(dump_path).astype(np.float64)
    assert got.shape == want.shape, f"dump {got.shape} vs reference {want.shape}"
    rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    flips = int(np.sum(np.argmax(got, axis=1) != np.argmax(want, axis=1)))
    return got, rel, int(np.argmax(rel)), flips


def margin_text(margins, min_margin):
    return (f"{len(margins)} routing decisions' smallest margin "
            f"{min(margins) if margins else float('inf'):.3g} (needs > {min_margin:g})")


def near_tie(margins, min_margin):
    """True (and says so) when a routing decision is too close to call."""
    if margins and min(margins) <= min_margin:
        print("a routing decision is a near tie: choose another seed")
        return True
    return False


def read_model(model_dir):
    """(text config, weights without the Kimi-K2.5 prefix, architecture)."""
    outer = json.load(open(f"{model_dir}/config.json"))
    arch = outer["architectures"][0]
    cfg, prefix = outer, ""
    if arch == "KimiK25ForConditionalGeneration":
        cfg, prefix = outer["text_config"], "language_model."
    else:
        assert arch == "DeepseekV3ForCausalLM", arch
    raw = read_safetensors(f"{model_dir}/model.safetensors")
    return cfg, {k[len(prefix):]: v for k, v in raw.items() if k.startswith(prefix)}, arch


def main():
    model_dir, dump_path, tokens_text = sys.argv[1:4]
    tolerance = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv \
        else 1e-5
    cfg, w, arch = read_model(model_dir)
    tokens = [int(t) for t in tokens_text.split(",")]
    min_margin = float(sys.argv[sys.argv.index("--min-margin") + 1]) if "--min-margin" in \
        sys.argv else 1e-4
    worst_form, margins = [0.0], []
    want = forward(cfg, w, tokens[:-1], worst_form, margins)
    got, rel, worst, flips = compare(dump_path, want)
    print(f"{arch} reference: {got.shape[0]} positions x {got.shape[1]} logits, worst relative "
          f"L2 {rel[worst]:.3g} at position {worst} (tolerance {tolerance:g}); argmax differs in "
          f"{flips} rows; absorbed vs naive MLA (float64) worst relative {worst_form[0]:.3g}; "
          f"{margin_text(margins, min_margin)}")
    if near_tie(margins, min_margin):
        return 1
    if worst_form[0] > 1e-9:
        print("the absorbed and naive forms of MLA disagree")
        return 1
    return 0 if rel.max() < tolerance and flips == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
