#!/usr/bin/python3
"""An independent mixture-of-experts forward pass in numpy (float64) for Qwen3MoeForCausalLM and
MixtralForCausalLM, written from the architectures' description (Hugging Face transformers'
modeling_qwen3_moe and modeling_mixtral: RMSNorm, Qwen3's per-head q_norm / k_norm before rotary
embeddings, rotate_half RoPE, grouped-query causal attention; the sparse MoE block: router logits
of `gate`, softmax over all experts, the top num_experts_per_tok by probability, their weights
renormalised to sum 1 when norm_topk_prob (Mixtral: always), each selected expert's SwiGLU
down(silu(gate x) * up x) weighted and summed; a Qwen3-MoE layer is MoE when it is not in
mlp_only_layers, num_experts > 0 and (layer + 1) % decoder_sparse_step == 0, else a dense SwiGLU
MLP of intermediate_size), not from specrun's graph; the attention block is qwen3_reference.py's
(Mixtral's is Qwen3's without the q/k norms). It reads config.json and model.safetensors itself.

usage: moe_reference.py MODEL_DIR LOGITS_DUMP TOKENS [--tolerance T] [--min-margin M]
  LOGITS_DUMP: a `specrun generate --dump-logits` file (format in src/app/cmd_generate.cpp),
  TOKENS: the prompt and the generated ids, comma-separated, as generate ran them.
Computes the logits of every position of TOKENS[:-1] (the dump's rows) and compares each row:
the relative L2 error ||specrun - reference|| / ||reference|| must be below the tolerance and
every row's argmax must agree. The comparison is only meaningful when no routing decision is a
near tie (float32 round-off could then pick the other expert): the smallest gap between a
token's k-th and (k+1)-th router logit, over every token and MoE layer, must exceed
--min-margin (default 1e-3; float32 round-off of the logits is ~1e-6). Exit 0/1.
"""
import json
import os
import sys

import numpy as np

# The checkpoint reader, RMSNorm, the attention block (RoPE, Qwen3's q/k norms, GQA) and the
# logits dump reader are the Qwen3 reference's (independent of specrun's code like this file).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_reference import attention, read_dump, read_safetensors, rms_norm, rope_tables  # noqa: E402


def swiglu(x, gate, up, down):
    g = x @ gate.T
    return (g / (1.0 + np.exp(-g)) * (x @ up.T)) @ down.T


class Family:
    """Where a family keeps its MoE tensors and which layers are MoE."""

    def __init__(self, cfg):
        arch = cfg["architectures"][0]
        self.mixtral = arch == "MixtralForCausalLM"
        assert self.mixtral or arch == "Qwen3MoeForCausalLM", arch
        self.qk_norm = not self.mixtral
        if self.mixtral:
            self.n_experts = cfg["num_local_experts"]
            self.norm_topk = True
        else:
            self.n_experts = cfg["num_experts"]
            self.norm_topk = cfg.get("norm_topk_prob", False)
        self.top_k = cfg["num_experts_per_tok"]
        self.step = cfg.get("decoder_sparse_step", 1)
        self.dense = cfg.get("mlp_only_layers") or []

    def is_moe(self, layer):
        if self.mixtral:
            return True
        return layer not in self.dense and self.n_experts > 0 and (layer + 1) % self.step == 0

    def router(self, p):
        return p + ("block_sparse_moe.gate.weight" if self.mixtral else "mlp.gate.weight")

    def expert(self, p, e):
        if self.mixtral:
            x = f"{p}block_sparse_moe.experts.{e}."
            return x + "w1.weight", x + "w3.weight", x + "w2.weight"
        x = f"{p}mlp.experts.{e}."
        return x + "gate_proj.weight", x + "up_proj.weight", x + "down_proj.weight"


def moe_block(fam, w, p, h, margins):
    logits = h @ w[fam.router(p)].T  # [T, E]
    prob = np.exp(logits - logits.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    order = np.argsort(-prob, axis=-1, kind="stable")  # ties: the lower index first
    top = order[:, : fam.top_k]
    if fam.top_k < fam.n_experts:
        ranked = np.take_along_axis(logits, order, axis=-1)
        margins.append(float((ranked[:, fam.top_k - 1] - ranked[:, fam.top_k]).min()))
    weight = np.take_along_axis(prob, top, axis=-1)
    if fam.norm_topk:
        weight /= weight.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for e in range(fam.n_experts):
        rows, slot = np.nonzero(top == e)
        if len(rows) == 0:
            continue
        gate, up, down = (w[n] for n in fam.expert(p, e))
        out[rows] += weight[rows, slot][:, None] * swiglu(h[rows], gate, up, down)
    return out


def forward(cfg, w, tokens, margins):
    fam = Family(cfg)
    eps, tables = cfg["rms_norm_eps"], rope_tables(cfg, len(tokens))
    x = w["model.embed_tokens.weight"][tokens]  # [T, H]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        x = attention(cfg, w, p, x, tables, qk_norm=fam.qk_norm)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if fam.is_moe(layer):
            x = x + moe_block(fam, w, p, h, margins)
        else:
            x = x + swiglu(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                           w[p + "mlp.down_proj.weight"])
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def option(name, default):
    return float(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main():
    model_dir, dump_path, tokens_text = sys.argv[1:4]
    tolerance = option("--tolerance", 1e-5)
    min_margin = option("--min-margin", 1e-3)
    cfg = json.load(open(f"{model_dir}/config.json"))
    tokens = [int(t) for t in tokens_text.split(",")]
    margins = []
    want = forward(cfg, read_safetensors(f"{model_dir}/model.safetensors"), tokens[:-1], margins)
    got = read_dump(dump_path).astype(np.float64)
    assert got.shape == want.shape, f"dump {got.shape} vs reference {want.shape}"
    rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    worst = int(np.argmax(rel))
    flips = int(np.sum(np.argmax(got, axis=1) != np.argmax(want, axis=1)))
    margin = min(margins) if margins else float("inf")
    print(f"{cfg['architectures'][0]} reference: {got.shape[0]} positions x {got.shape[1]} "
          f"logits, worst relative L2 {rel[worst]:.3g} at position {worst} (tolerance "
          f"{tolerance:g}); argmax differs in {flips} rows; smallest top-k router margin "
          f"{margin:.3g} (needs > {min_margin:g})")
    if margin <= min_margin:
        print("a routing decision is a near tie: choose another seed or a larger --router-std")
        return 1
    return 0 if rel.max() < tolerance and flips == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
