#!/usr/bin/python3
"""Checks a saved Qwen3-MoE checkpoint (config.json + model.safetensors, as HF writes them)
with an independent float64 numpy forward written from Hugging Face's modeling_qwen3_moe.py
semantics, against the torch model of scripts/train_moe.py on the same weights.

    /usr/bin/python3 scripts/check_moe_numpy.py models/code-moe [--prompts 4] [--tokens 32]

The checkpoint is read here on its own (safetensors header and raw little-endian data; BF16 is
the high half of a float32), widened to float64. For each held-out prompt (every 25th python
prompt of ../shared/prompts/code_prompts.jsonl) both implementations generate --tokens greedy
tokens (full recompute, no cache, ties -> lowest id); they must be equal, and the logits of the
whole final sequence must agree to a relative L2 of 1e-4 per position (torch computes in
float32; observed ~1e-6). metrics.json's reference.greedy_bf16_weights (written by
train_moe.py from the model in memory, not from the file), where present and the weights are
BF16, must begin with them too: a checkpoint written in a wrong layout reads back consistently
in both implementations, but not as the model that was trained. Exit status 0 when all agree,
1 otherwise.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

TOLERANCE = 1e-4


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out, dtypes = {}, set()
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            a, b = meta["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            if meta["dtype"] == "BF16":
                arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            elif meta["dtype"] == "F32":
                arr = np.frombuffer(raw, np.float32)
            else:
                raise SystemExit(f"{path}: tensor {name}: dtype {meta['dtype']} not handled")
            out[name] = arr.reshape(meta["shape"]).astype(np.float64)
            dtypes.add(meta["dtype"])
    return out, dtypes


def rms_norm(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def forward(W, c, tokens):
    """float64 logits [T, V] of one sequence, and the smallest top-k router margin seen."""
    T = len(tokens)
    H, nh, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or H // nh
    eps, k, E = c["rms_norm_eps"], c["num_experts_per_tok"], c["num_experts"]
    inv = 1.0 / c["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.cos(np.concatenate([ang, ang], -1))[:, None, :]  # [T, 1, hd]
    sin = np.sin(np.concatenate([ang, ang], -1))[:, None, :]

    def rope(x):  # x [T, heads, hd], HF rotate_half
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos + rot * sin

    causal = np.triu(np.full((T, T), -np.inf), 1)
    x = W["model.embed_tokens.weight"][np.asarray(tokens)]
    min_margin = np.inf
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = rms_norm((h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd),
                     W[p + "self_attn.q_norm.weight"], eps)
        kk = rms_norm((h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd),
                      W[p + "self_attn.k_norm.weight"], eps)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
        q, kk = rope(q), rope(kk)
        o = np.zeros((T, nh, hd))
        for head in range(nh):
            g = head // (nh // nkv)
            s = q[:, head] @ kk[:, g].T / np.sqrt(hd) + causal
            o[:, head] = softmax(s) @ v[:, g]
        x = x + o.reshape(T, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        sparse = (i not in c.get("mlp_only_layers", []) and E > 0
                  and (i + 1) % c.get("decoder_sparse_step", 1) == 0)
        if not sparse:
            m = p + "mlp."
            x = x + (silu(h @ W[m + "gate_proj.weight"].T) * (h @ W[m + "up_proj.weight"].T)) @ \
                W[m + "down_proj.weight"].T
            continue
        probs = softmax(h @ W[p + "mlp.gate.weight"].T)  # [T, E]
        order = np.argsort(-probs, axis=-1, kind="stable")  # equal scores: lower index first
        top = order[:, :k]
        ranked = np.take_along_axis(probs, order, -1)
        min_margin = min(min_margin, float((ranked[:, k - 1] - ranked[:, k]).min()))
        w = np.take_along_axis(probs, top, -1)
        if c.get("norm_topk_prob", False):
            w = w / w.sum(-1, keepdims=True)
        moe = np.zeros_like(x)
        for e in range(E):
            rows, slot = np.nonzero(top == e)
            if rows.size == 0:
                continue
            ep = f"{p}mlp.experts.{e}."
            he = h[rows]
            y = (silu(he @ W[ep + "gate_proj.weight"].T) * (he @ W[ep + "up_proj.weight"].T)) @ \
                W[ep + "down_proj.weight"].T
            moe[rows] += w[rows, slot, None] * y
        x = x + moe
    x = rms_norm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T, min_margin


def first_max(v):
    return int(np.flatnonzero(v == v.max())[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="directory with config.json and model.safetensors")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import train_moe

    torch.set_num_threads(1)
    c = json.load(open(os.path.join(a.model, "config.json")))
    if c.get("architectures") != ["Qwen3MoeForCausalLM"]:
        raise SystemExit(f"{a.model}/config.json: architectures {c.get('architectures')}, "
                         "expected ['Qwen3MoeForCausalLM']")
    W, dtypes = read_safetensors(os.path.join(a.model, "model.safetensors"))
    model = train_moe.Qwen3MoeForCausalLM(c)
    sd = model.state_dict()
    missing = sorted(set(sd) ^ set(W))
    if missing:
        raise SystemExit(f"{a.model}/model.safetensors: names differ from HF's: {missing[:8]}")
    model.load_state_dict({n: torch.from_numpy(W[n].astype(np.float32)) for n in sd})
    model.eval()
    ref = None
    metrics = os.path.join(a.model, "metrics.json")
    if os.path.exists(metrics) and dtypes == {"BF16"}:
        ref = json.load(open(metrics))["reference"]["greedy_bf16_weights"]

    ok = True
    for n, prompt in enumerate(train_moe.reference_prompts()[:a.prompts]):
        toks = list(prompt["tokens"])
        torch_greedy = train_moe.greedy(model, toks, a.tokens)
        ids, margin = list(toks), np.inf
        for _ in range(a.tokens):
            logits, m = forward(W, c, ids)
            margin = min(margin, m)
            ids.append(first_max(logits[-1]))
        np_greedy = ids[len(toks):]
        full = toks + np_greedy
        ref_logits, _ = forward(W, c, full)
        with torch.no_grad():
            t_logits = model(torch.tensor([full]))[0][0].double().numpy()
        rel = np.linalg.norm(t_logits - ref_logits, axis=-1) / np.linalg.norm(ref_logits, axis=-1)
        same = np_greedy == torch_greedy and (ref is None or ref[n][:a.tokens] == np_greedy)
        good = same and rel.max() < TOLERANCE
        ok &= good
        print(f"prompt {prompt['id']} ({len(toks)} tokens): greedy numpy == torch: "
              f"{np_greedy == torch_greedy}"
              + ("" if ref is None else f", == metrics.json: {ref[n][:a.tokens] == np_greedy}")
              + f"; logits rel L2 max {rel.max():.2e} over {len(full)} positions; "
              f"smallest router top-{c['num_experts_per_tok']} margin {margin:.2e}"
              + ("" if good else "  MISMATCH"))
    print("check_moe_numpy: " + ("all agree" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
