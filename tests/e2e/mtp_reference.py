#!/usr/bin/python3
"""An independent float64 numpy forward of DeepSeek-V3's multi-token-prediction (MTP) module,
written from the semantics of docs/mtp-design.md (vLLM deepseek_mtp.py / SGLang
deepseek_nextn.py; the layer's decoder block is Hugging Face's DeepseekV3DecoderLayer, which
deepseek_reference.py implements), not from specrun's graph. Module m = num_hidden_layers (the
first of num_nextn_predict_layers), with p = "model.layers.{m}.":
  h_i   = the target's final norm output at position i (deepseek_reference.forward)
  e     = rmsnorm(E[t_{i+1}], p.enorm)    E = p.embed_tokens when the checkpoint has it, else the
                                          target's model.embed_tokens
  x     = p.eh_proj(cat(e, rmsnorm(h_i, p.hnorm)))      embedding first
  y     = decoder layer m (MLA + dense or noaux_tc MoE by layer m's kind) at position i
  logits = rmsnorm(y, p.shared_head.norm) @ W^T   W = p.shared_head.head when present, else
                                                   lm_head (the embedding when tied)
A chain step feeds the argmax of the previous row and, as h, the previous row's y (pre_norm) or
rmsnorm(y, p.shared_head.norm) (shared_head_norm), at the next position.

usage:
  mtp_reference.py MODEL_DIR MTP_DUMP TOKENS [--chain-hidden pre_norm|shared_head_norm]
                   [--tolerance T] [--min-margin M]
    MTP_DUMP: a `specrun generate --dump-mtp-logits` file over TOKENS (the prompt and the
    generated ids, comma-separated): rows 0..T-2 the pairs, then two chain steps. Every row's
    relative L2 error must be below the tolerance and every argmax must agree. Exit 0/1.
  mtp_reference.py --own-head SRC_DIR DST_DIR SEED
    Copies SRC_DIR with the module's own p.embed_tokens and p.shared_head.head added (random
    values, unlike the target's, so that using the target's instead is seen).
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepseek_reference import (compare, decoder_layer, forward, lm_head, margin_text,  # noqa: E402
                                near_tie, read_model, rope)
from qwen3_reference import rms_norm  # noqa: E402


def module(cfg, w, h, tokens, chain_hidden, worst_form, margins):
    """(the next h per row, logits per row) of module num_hidden_layers over rows (h, token) at
    positions 0..n-1."""
    m = cfg["num_hidden_layers"]
    p = f"model.layers.{m}."
    eps = cfg["rms_norm_eps"]
    embed = w.get(p + "embed_tokens.weight", w["model.embed_tokens.weight"])
    head = w.get(p + "shared_head.head.weight", lm_head(cfg, w))
    e = rms_norm(embed[tokens], w[p + "enorm.weight"], eps)
    g = rms_norm(h, w[p + "hnorm.weight"], eps)
    x = np.concatenate([e, g], axis=-1) @ w[p + "eh_proj.weight"].T
    cos, sin, scaling = rope(cfg, len(tokens))
    y = decoder_layer(cfg, w, m, x, cos, sin, scaling, worst_form, margins)
    normed = rms_norm(y, w[p + "shared_head.norm.weight"], eps)
    return (y if chain_hidden == "pre_norm" else normed), normed @ head.T


def own_head(src, dst, seed):
    shutil.copytree(src, dst)
    path = f"{dst}/model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    outer = json.load(open(f"{src}/config.json"))
    cfg, prefix = (outer["text_config"], "language_model.") if "text_config" in outer else (outer, "")
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    p = f"{prefix}model.layers.{cfg['num_hidden_layers']}."
    rng = np.random.default_rng(seed)
    blobs = [data]
    end = len(data)
    for name in ("embed_tokens.weight", "shared_head.head.weight"):
        a = (rng.standard_normal((V, H)) * 0.5).astype("<f4").tobytes()
        header[p + name] = {"dtype": "F32", "shape": [V, H], "data_offsets": [end, end + len(a)]}
        blobs.append(a)
        end += len(a)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return 0


def main():
    if sys.argv[1] == "--own-head":
        return own_head(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    model_dir, dump_path, tokens_text = sys.argv[1:4]

    def option(name, default):
        return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

    tolerance = float(option("--tolerance", "1e-5"))
    min_margin = float(option("--min-margin", "1e-4"))
    chain_hidden = option("--chain-hidden", "pre_norm")
    cfg, w, arch = read_model(model_dir)
    assert cfg.get("num_nextn_predict_layers", 0) >= 1, "the model has no MTP layer"
    tokens = [int(t) for t in tokens_text.split(",")]
    worst_form, margins, hidden = [0.0], [], []
    forward(cfg, w, tokens[:-1], worst_form, margins, hidden)
    h = hidden[0]  # [T-1, H]: positions 0..T-2
    pair_tokens = list(tokens[1:])
    out, logits = module(cfg, w, h, pair_tokens, chain_hidden, worst_form, margins)
    want = [logits]
    for _ in range(2):  # the chain: the argmax and the output of the previous row
        pair_tokens.append(int(np.argmax(want[-1][-1])))
        h = np.concatenate([h, out[-1:]], axis=0)
        out, logits = module(cfg, w, h, pair_tokens, chain_hidden, worst_form, margins)
        want.append(logits[-1:])
    want = np.concatenate(want, axis=0)
    got, rel, worst, flips = compare(dump_path, want)
    p = f"model.layers.{cfg['num_hidden_layers']}."
    print(f"{arch} MTP reference ({chain_hidden}; own embed_tokens "
          f"{p + 'embed_tokens.weight' in w}, own shared_head.head "
          f"{p + 'shared_head.head.weight' in w}): {got.shape[0]} rows x {got.shape[1]} logits, "
          f"worst relative L2 {rel[worst]:.3g} at row {worst} (tolerance {tolerance:g}; chain "
          f"rows {rel[-2]:.3g} {rel[-1]:.3g}); argmax differs in {flips} rows; "
          f"{margin_text(margins, min_margin)}")
    if near_tie(margins, min_margin):
        return 1
    return 0 if rel.max() < tolerance and flips == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
