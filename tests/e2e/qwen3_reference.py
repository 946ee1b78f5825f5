#!/usr/bin/python3
"""An independent Qwen3 forward pass in numpy (float64), written from the architecture
description (Hugging Face transformers' modeling_qwen3: Qwen3RMSNorm, per-head q_norm / k_norm
before rotary embeddings, rotate_half RoPE, grouped-query causal attention, SwiGLU MLP), not from
specrun's graph. It reads config.json and model.safetensors itself.

usage: qwen3_reference.py MODEL_DIR LOGITS_DUMP TOKENS [--tolerance T]
  LOGITS_DUMP: a `specrun generate --dump-logits` file (format in src/app/cmd_generate.cpp),
  TOKENS: the prompt and the generated ids, comma-separated, as generate ran them.
Computes the logits of every position of TOKENS[:-1] (the dump's rows) and compares: the largest
absolute difference must be below the tolerance and every row's argmax must agree. Exit 0/1.
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view("<f4")
        else:
            raise SystemExit(f"{name}: dtype {info['dtype']} not handled by the reference")
        out[name] = a.reshape(info["shape"]).astype(np.float64)
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_tables(cfg, T):
    """cos, sin [T, 1, head_dim] of positions 0..T-1 (rotate_half layout) and the causal mask."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    theta = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    angles = np.outer(np.arange(T, dtype=np.float64), inv_freq)  # [T, hd/2]
    cos = np.cos(np.concatenate([angles, angles], axis=-1))[:, None, :]
    sin = np.sin(np.concatenate([angles, angles], axis=-1))[:, None, :]
    return cos, sin, np.triu(np.full((T, T), -np.inf), k=1)


def attention(cfg, w, p, x, tables, qk_norm=True):
    """x + the attention block of the layer whose tensors start with p (Qwen3: q/k norms)."""
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nq
    eps, T = cfg["rms_norm_eps"], x.shape[0]
    cos, sin, mask = tables
    h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
    q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nq, hd)
    k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
    v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
    if qk_norm:
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    group = nq // nkv
    out = np.empty((T, nq, hd))
    for head in range(nq):
        kh, vh = k[:, head // group, :], v[:, head // group, :]
        scores = q[:, head, :] @ kh.T / np.sqrt(hd) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out[:, head, :] = (scores / scores.sum(axis=-1, keepdims=True)) @ vh
    return x + out.reshape(T, nq * hd) @ w[p + "self_attn.o_proj.weight"].T


def forward(cfg, w, tokens):
    eps, tables = cfg["rms_norm_eps"], rope_tables(cfg, len(tokens))
    x = w["model.embed_tokens.weight"][tokens]  # [T, H]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        x = attention(cfg, w, p, x, tables)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def read_dump(path):
    with open(path, "rb") as f:
        magic, version, rows, vocab = struct.unpack("<4sIII", f.read(16))
        assert magic == b"SRLG" and version == 1, "not a --dump-logits file"
        return np.frombuffer(f.read(), dtype="<f4").reshape(rows, vocab)


def main():
    model_dir, dump_path, tokens_text = sys.argv[1:4]
    tolerance = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv \
        else 1e-3
    cfg = json.load(open(f"{model_dir}/config.json"))
    assert cfg["architectures"] == ["Qwen3ForCausalLM"], cfg["architectures"]
    tokens = [int(t) for t in tokens_text.split(",")]
    want = forward(cfg, read_safetensors(f"{model_dir}/model.safetensors"), tokens[:-1])
    got = read_dump(dump_path)
    assert got.shape == want.shape, f"dump {got.shape} vs reference {want.shape}"
    diff = np.abs(got - want)
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    flips = int(np.sum(np.argmax(got, axis=1) != np.argmax(want, axis=1)))
    print(f"qwen3 reference: {got.shape[0]} positions x {got.shape[1]} logits, max |specrun - "
          f"reference| = {diff.max():.3g} at position {worst[0]} token {worst[1]} (specrun "
          f"{got[worst]:.6f}, reference {want[worst]:.6f}); argmax differs in {flips} rows; "
          f"tolerance {tolerance}")
    return 0 if diff.max() < tolerance and flips == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
