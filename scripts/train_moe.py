#!/usr/bin/python3
"""Trains code-moe, a small Qwen3-MoE code model, on the CPU, the way ../shared/models trained
its dense code pair, and writes it as Hugging Face writes a Qwen3MoeForCausalLM checkpoint.

    /usr/bin/python3 scripts/train_moe.py                    # 25 minutes, writes models/code-moe
    /usr/bin/python3 scripts/train_moe.py --steps N          # the same run, step for step

Data (as ../shared/models/README.md): the *.py files of Debian 12's python3.11 standard library
(/usr/lib/python3.11), without test/ and tests/ directories, dist-packages, symbolic links and
files over 300 KB (649 files); a file is held out iff zlib.crc32(relative path) % 10 == 0
(68 files, 379,424 tokens); each file is BOS + sp.encode(text) + EOS with the shared
sentencepiece tokenizer, the files concatenated; training samples random 512-token windows.

Model: Hugging Face's modeling_qwen3_moe.py semantics: pre-norm blocks, RMSNorm in float32
(weight * x * rsqrt(mean(x^2) + eps)), q_norm/k_norm per head before rotary embeddings
(rotate_half convention), grouped-query attention, every layer a sparse MoE block (no shared
expert): router logits = mlp.gate(x) (computed in float32 here), softmax in float32, top-k,
renormalised when norm_topk_prob, each expert down(silu(gate(x)) * up(x)), weighted sum; final
norm, untied lm_head. Loss: cross-entropy + router_aux_loss_coef * HF's load_balancing_loss_func
(Switch-Transformer auxiliary loss over the routers of all layers, concatenated).

Recipe (the dense pair's): AdamW (0.9, 0.95, eps 1e-8), weight decay 0.1 on matrices and none on
norm weights, gradient-norm clip 1.0, linear warmup then cosine decay to 10% of the peak, batch
8 x 512 tokens, bf16 autocast on the CPU with float32 master weights, init N(0, 0.02) with
o_proj/down_proj at 0.02/sqrt(2 * layers), norms 1. One thread (the machine is shared). The number
of steps is planned once, after 10 steps, from their speed and the --minutes budget, and written
to metrics.json; --steps N replays the same run (seeds are fixed, one thread is deterministic).

Writes OUT (default models/code-moe): config.json, model.safetensors (BF16, round to nearest
even), generation_config.json, tokenizer.model, tokenizer_config.json, metrics.json, README.md;
and F32OUT (default /work/code-moe-f32): the float32 weights. Then runs
scripts/check_moe_numpy.py on OUT (a float64 numpy forward of the saved checkpoint).
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
BOS, EOS = 1, 2
MAX_MINUTES = 30.0

# ---- data -------------------------------------------------------------------------------------


def stdlib_files(root):
    """Relative paths of the training corpus, sorted (the concatenation order)."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(d, root)
        parts = [] if rel == "." else rel.split(os.sep)
        if any(p in ("test", "tests", "dist-packages") for p in parts):
            continue
        for f in files:
            p = os.path.join(d, f)
            if f.endswith(".py") and not os.path.islink(p) and os.path.getsize(p) <= 300 * 1024:
                out.append(os.path.relpath(p, root))
    return sorted(out)


def is_held_out(rel):
    return zlib.crc32(rel.encode()) % 10 == 0


def load_corpus(root, sp):
    train, held, info = [], [], {"train_files": 0, "held_out_files": 0, "train_bytes": 0,
                                 "held_out_bytes": 0}
    for rel in stdlib_files(root):
        raw = open(os.path.join(root, rel), "rb").read()
        ids = [BOS] + sp.encode(raw.decode("utf-8")) + [EOS]
        key = "held_out" if is_held_out(rel) else "train"
        (held if key == "held_out" else train).extend(ids)
        info[key + "_files"] += 1
        info[key + "_bytes"] += len(raw)
    train, held = np.array(train, np.int64), np.array(held, np.int64)
    info["train_tokens"], info["held_out_tokens"] = int(train.size), int(held.size)
    return train, held, info


def windows(ids, seq):
    """All non-overlapping windows of seq inputs (+1 target): [n, seq + 1]."""
    n = (ids.size - 1) // seq
    return np.stack([ids[i * seq:i * seq + seq + 1] for i in range(n)])


# ---- model: Hugging Face Qwen3MoeForCausalLM (parameter names are HF's) -------------------------


def fast_f32():
    """True where a float32 product should go through oneDNN: this torch (Debian's) does float32
    GEMMs with the reference BLAS, ~17x slower; oneDNN computes the same products in float32.
    Only without autograd (evaluation); training runs under bf16 autocast (oneDNN already)."""
    return not torch.is_grad_enabled() and not torch.is_autocast_cpu_enabled()


def linear(x, w):
    """x [..., in] @ w[out, in]^T."""
    if x.dtype != torch.float32 or not fast_f32():
        return F.linear(x, w)
    y = torch._C._nn.mkldnn_linear(x.reshape(-1, x.shape[-1]).contiguous().to_mkldnn(),
                                   w.contiguous(), None).to_dense()
    return y.view(*x.shape[:-1], w.shape[0])


def matmul_nt(a, b):
    """a [B, H, T, D] @ b[B, H, S, D]^T -> [B, H, T, S]."""
    if a.dtype != torch.float32 or not fast_f32():
        return torch.matmul(a, b.transpose(-1, -2))
    out = a.new_empty(a.shape[:-1] + b.shape[-2:-1])
    for i in range(a.shape[0]):
        for h in range(a.shape[1]):
            out[i, h] = linear(a[i, h], b[i, h])
    return out


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.variance_epsilon = eps

    def forward(self, x):
        dt = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dt)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, self.nh, self.nkv, self.hd = (c["hidden_size"], c["num_attention_heads"],
                                         c["num_key_value_heads"], c["head_dim"])
        self.q_proj = nn.Linear(H, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_norm(linear(x, self.q_proj.weight).view(B, T, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(linear(x, self.k_proj.weight).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = linear(x, self.v_proj.weight).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv  # query head h reads kv head h // rep
        k = k[:, :, None].expand(B, self.nkv, rep, T, self.hd).reshape(B, self.nh, T, self.hd)
        v = v[:, :, None].expand(B, self.nkv, rep, T, self.hd).reshape(B, self.nh, T, self.hd)
        att = matmul_nt(q, k) * self.hd ** -0.5 + mask
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        o = matmul_nt(att, v.transpose(2, 3)).transpose(1, 2).reshape(B, T, self.nh * self.hd)
        return linear(o, self.o_proj.weight)


class Expert(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return linear(F.silu(linear(x, self.gate_proj.weight)) * linear(x, self.up_proj.weight),
                      self.down_proj.weight)


class SparseMoeBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.E, self.k, self.norm_topk = (c["num_experts"], c["num_experts_per_tok"],
                                          c["norm_topk_prob"])
        self.gate = nn.Linear(c["hidden_size"], self.E, bias=False)
        self.experts = nn.ModuleList(
            [Expert(c["hidden_size"], c["moe_intermediate_size"]) for _ in range(self.E)])

    def route(self, x):
        """x [N, H] -> router logits [N, E] (float32), weights [N, k], experts [N, k]."""
        with torch.autocast("cpu", enabled=False):
            logits = linear(x.float(), self.gate.weight.float())
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        w, sel = torch.topk(probs, self.k, dim=-1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        return logits, w, sel

    def forward(self, x):
        B, T, H = x.shape
        x = x.reshape(-1, H)
        logits, w, sel = self.route(x)
        w = w.to(x.dtype)
        out = torch.zeros_like(x)
        for e in range(self.E):
            tok, slot = torch.where(sel == e)
            if tok.numel() == 0:
                continue
            y = self.experts[e](x[tok]) * w[tok, slot, None]
            out.index_add_(0, tok, y.to(out.dtype))
        return out.view(B, T, H), logits, sel


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = SparseMoeBlock(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        m, logits, sel = self.mlp(self.post_attention_layernorm(x))
        return x + m, logits, sel


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3MoeForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        hd = c["head_dim"]
        self.register_buffer("inv_freq", 1.0 / (c["rope_theta"] ** (
            torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)), persistent=False)

    def forward(self, ids):
        """ids [B, T] -> logits [B, T, V], router logits per layer [B*T, E], experts [B*T, k]."""
        B, T = ids.shape
        x = self.model.embed_tokens(ids)
        with torch.autocast("cpu", enabled=False):
            freqs = torch.arange(T, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), -1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        mask = torch.full((T, T), float("-inf")).triu(1)
        routers, sels = [], []
        for layer in self.model.layers:
            x, logits, sel = layer(x, cos, sin, mask)
            routers.append(logits)
            sels.append(sel)
        return linear(self.model.norm(x), self.lm_head.weight), routers, sels


def load_balancing_loss(router_logits, E, k):
    """HF's load_balancing_loss_func without an attention mask: E * sum over (slot, expert) of
    the fraction of tokens sent there times the mean router probability of that expert, over
    the tokens of all layers together (equal to k when the load is perfectly balanced)."""
    logits = torch.cat(router_logits, 0)
    probs = F.softmax(logits, dim=-1)
    _, sel = torch.topk(probs, k, dim=-1)
    mask = F.one_hot(sel, E).float()  # [N, k, E]
    return torch.sum(mask.mean(0) * probs.mean(0)[None, :]) * E


def init_weights(model, c):
    std, out_std = c["initializer_range"], c["initializer_range"] / math.sqrt(
        2 * c["num_hidden_layers"])
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            nn.init.ones_(p)
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            nn.init.normal_(p, 0.0, out_std)
        else:
            nn.init.normal_(p, 0.0, std)


# ---- checkpoint files ---------------------------------------------------------------------------


def hf_config(a, dtype):
    """config.json as transformers (4.51, the Qwen3-MoE release) writes Qwen3MoeConfig:
    every field of the class, sorted keys, indent 2."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS,
        "decoder_sparse_step": 1,
        "eos_token_id": EOS,
        "head_dim": a.head_dim,
        "hidden_act": "silu",
        "hidden_size": a.hidden,
        "initializer_range": 0.02,
        # Unused: every layer is sparse (mlp_only_layers empty, decoder_sparse_step 1); the
        # width a dense layer would have, the dense code-target's.
        "intermediate_size": 768,
        "max_position_embeddings": 1024,
        "max_window_layers": a.layers,
        "mlp_only_layers": [],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": a.moe_intermediate,
        "norm_topk_prob": True,
        "num_attention_heads": a.heads,
        "num_experts": a.experts,
        "num_experts_per_tok": a.top_k,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "router_aux_loss_coef": a.aux_coef,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 2048,
    }


def bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_widen(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float32 array), written in this (state-dict) order."""
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        raw = (bf16_bits(a) if dtype == "BF16" else np.ascontiguousarray(a, np.float32)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_checkpoint(out, model, cfg, dtype):
    os.makedirs(out, exist_ok=True)
    sd = [(n, p.detach().float().numpy()) for n, p in model.state_dict().items()]
    write_safetensors(os.path.join(out, "model.safetensors"), sd,
                      "BF16" if dtype == "bfloat16" else "F32")
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    src = os.path.join(SHARED, "models", "code-target")
    for name in ("generation_config.json", "tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(out, name))


# ---- evaluation ---------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(model, wins, batch=8, collect=False):
    """float32 mean cross-entropy over windows [n, seq+1]; with collect, the experts chosen
    [layers, n, seq, k] (int8) and the top-k margins p_k - p_(k+1) [layers, n, seq]."""
    total, count = 0.0, 0
    L, k = model.c["num_hidden_layers"], model.c["num_experts_per_tok"]
    n, seq = wins.shape[0], wins.shape[1] - 1
    sel_all = np.zeros((L, n, seq, k), np.int8) if collect else None
    margin = np.zeros((L, n, seq), np.float32) if collect else None
    for i in range(0, n, batch):
        w = torch.from_numpy(wins[i:i + batch])
        logits, routers, sels = model(w[:, :-1])
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                             reduction="sum")
        total += ce.item()
        count += w[:, 1:].numel()
        if collect:
            b = w.shape[0]
            for l in range(L):
                sel_all[l, i:i + b] = sels[l].view(b, seq, k).numpy()
                p = torch.sort(F.softmax(routers[l], -1), -1, descending=True).values
                margin[l, i:i + b] = (p[:, k - 1] - p[:, k]).view(b, seq).numpy()
    return total / count, sel_all, margin


def expert_stats(sel, E, max_w=8, seed=7):
    """Per layer, from the experts chosen on held-out windows sel [L, n, T, k]."""
    L, n, T, k = sel.shape
    rng = np.random.default_rng(seed)
    layers = []
    for l in range(L):
        oh = np.zeros((n, T, E), bool)
        np.put_along_axis(oh, sel[l].astype(np.int64), True, axis=-1)
        usage = oh.sum((0, 1)) / (n * T * k)
        flat = oh.reshape(n * T, E)
        shuf = flat[rng.permutation(n * T)].reshape(n, T, E)

        def locality(o):
            inter = (o[:, 1:] & o[:, :-1]).sum(-1)
            union = []
            for w in range(1, max_w + 1):
                u = o[:, :T - w + 1].copy()
                for j in range(1, w):
                    u |= o[:, j:T - w + 1 + j]
                union.append(float(u.sum(-1).mean()))
            return {"shared_fraction": float(inter.mean() / k),
                    "p_share_any": float((inter >= 1).mean()),
                    "p_same_set": float((inter == k).mean()),
                    "unique_experts_w": union}

        nz = usage[usage > 0]
        layers.append({"usage": [float(u) for u in usage],
                       "effective_experts": float(np.exp(-(nz * np.log(nz)).sum())),
                       "max_usage": float(usage.max()), "min_usage": float(usage.min()),
                       "consecutive": locality(oh), "shuffled": locality(shuf)})
    return layers


@torch.no_grad()
def greedy(model, prompt, n):
    """n greedy tokens, full recompute each step (no cache), ties -> lowest id."""
    ids = list(prompt)
    for _ in range(n):
        last = model(torch.tensor([ids]))[0][0, -1].float()
        ids.append(int(torch.nonzero(last == last.max())[0, 0]))
    return ids[len(prompt):]


def reference_prompts():
    rows = [json.loads(l) for l in open(os.path.join(SHARED, "prompts", "code_prompts.jsonl"))]
    python = [r for r in rows if r["category"] == "python"]
    return [python[i] for i in range(0, len(python), 25)]  # as ../shared/models/reference.json


# ---- main ---------------------------------------------------------------------------------------


def lr_at(step, total, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    frac = (step - a.warmup) / max(1, total - a.warmup)
    return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def param_groups(model, wd):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "models", "code-moe"))
    ap.add_argument("--f32-out", default="/work/code-moe-f32")
    ap.add_argument("--stdlib", default="/usr/lib/python3.11")
    ap.add_argument("--tokenizer", default=os.path.join(SHARED, "models", "tokenizer",
                                                        "tokenizer.model"))
    ap.add_argument("--minutes", type=float, default=25.0,
                    help=f"wall-time budget of the training loop (at most {MAX_MINUTES:g})")
    ap.add_argument("--steps", type=int, default=0,
                    help="optimizer steps (default: planned from --minutes after 10 steps)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--moe-intermediate", type=int, default=128)
    ap.add_argument("--aux-coef", type=float, default=0.001)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-limit", type=int, default=0,
                    help="held-out windows in the final evaluation (default: all; for smoke runs)")
    ap.add_argument("--no-check", action="store_true", help="skip scripts/check_moe_numpy.py")
    ap.add_argument("--init", metavar="F32DIR",
                    help="continue from the float32 checkpoint of an earlier run (its --f32-out): "
                         "its weights, a fresh optimizer and schedule (as the dense code-target's "
                         "continuation run, which used --seed 1); metrics.json lists every run")
    ap.add_argument("--readme-from", metavar="METRICS",
                    help="only rewrite README.md beside METRICS (a metrics.json of this script)")
    a = ap.parse_args()
    if a.readme_from:
        m = json.load(open(a.readme_from))
        args = argparse.Namespace(**m["training"]["args"])
        args.out = os.path.dirname(os.path.abspath(a.readme_from))
        write_readme(args, m)
        return
    if a.minutes > MAX_MINUTES:
        sys.exit(f"train_moe: --minutes {a.minutes:g} is over {MAX_MINUTES:g}: this machine is "
                 f"shared; use --minutes {MAX_MINUTES:g} or less")
    if not a.steps and a.warmup <= 10:
        sys.exit("train_moe: --warmup must be over 10 when the steps are planned (the first 10 "
                 "steps time the run before the schedule is known)")
    command = " ".join(["/usr/bin/python3 scripts/train_moe.py"] + sys.argv[1:])
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    t_start = time.time()

    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    train, held, data_info = load_corpus(a.stdlib, sp)
    print(f"train_moe: {data_info}", flush=True)
    held_w = windows(held, a.seq)
    quick_w = held_w[np.random.default_rng(11).choice(held_w.shape[0], 8, replace=False)]
    if a.eval_limit:
        held_w = held_w[:a.eval_limit]

    cfg = hf_config(a, "float32")
    model = Qwen3MoeForCausalLM(cfg)
    init_weights(model, cfg)
    earlier = []
    if a.init:
        from check_moe_numpy import read_safetensors
        path = os.path.join(a.init, "model.safetensors")
        weights, dtypes = read_safetensors(path)
        if dtypes != {"F32"}:
            sys.exit(f"train_moe: {path} holds {sorted(dtypes)}; --init takes the float32 "
                     "checkpoint (the --f32-out of the earlier run)")
        model.load_state_dict({n: torch.from_numpy(weights[n].astype(np.float32))
                               for n in model.state_dict()})
        prev = os.path.join(a.init, "metrics.json")
        if os.path.exists(prev):
            m = json.load(open(prev))
            earlier = m.get("training_runs", [m["training"]])
        print(f"train_moe: continuing from {a.init} ({sum(r['tokens'] for r in earlier):,} "
              "tokens before)", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    per_expert = 3 * a.hidden * a.moe_intermediate
    n_active = n_params - a.layers * (a.experts - a.top_k) * per_expert
    print(f"train_moe: {n_params:,} parameters ({n_active:,} active per token), "
          f"BF16 {2 * n_params / 1e6:.2f} MB", flush=True)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    budget = a.minutes * 60.0
    total = a.steps if a.steps else None
    history, log = [], {"ce": 0.0, "aux": 0.0, "n": 0}
    t0 = time.time()
    step, stopped_by_budget = 0, False
    while total is None or step < total:
        if time.time() - t0 >= budget:
            stopped_by_budget = True
            break
        lr = lr_at(step, total or 10**9, a)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, train.size - a.seq - 1, size=a.batch)
        w = torch.from_numpy(np.stack([train[s:s + a.seq + 1] for s in starts]))
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, routers, _ = model(w[:, :-1])
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        aux = load_balancing_loss(routers, a.experts, a.top_k)
        loss = ce + a.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        log["ce"] += ce.item()
        log["aux"] += aux.item()
        log["n"] += 1
        if step == 1:
            t1 = time.time()
        if total is None and step == 11:
            # Plan the run once: the schedule must not depend on later timings.
            per_step = (time.time() - t1) / 10
            total = step + int(0.9 * (budget - (time.time() - t0)) / per_step)
            print(f"train_moe: {per_step:.2f} s/step: planned {total} steps", flush=True)
        if step % 10 == 0:
            print(f"step {step}/{total}: ce {log['ce'] / log['n']:.3f} aux "
                  f"{log['aux'] / log['n']:.3f} lr {lr:.2e} {time.time() - t0:.0f} s", flush=True)
            log = {"ce": 0.0, "aux": 0.0, "n": 0}
        if step % a.eval_every == 0:
            model.eval()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                q, _, _ = evaluate(model, quick_w)
            history.append({"step": step, "held_out_quick": q, "seconds": time.time() - t0})
            print(f"step {step}: held-out (8 windows, bf16 autocast) {q:.3f}", flush=True)
    train_seconds = time.time() - t0
    tokens = step * a.batch * a.seq
    print(f"train_moe: {step} steps, {tokens:,} tokens in {train_seconds:.0f} s"
          + (" (stopped by the budget)" if stopped_by_budget else ""), flush=True)

    # ---- write the checkpoints ----
    model.eval()
    write_checkpoint(a.f32_out, model, hf_config(a, "float32"), "float32")
    write_checkpoint(a.out, model, hf_config(a, "bfloat16"), "bfloat16")
    f32_state = {n: p.detach().clone() for n, p in model.state_dict().items()}
    bf16_state = {n: torch.from_numpy(bf16_widen(bf16_bits(p.numpy()))) for n, p in
                  f32_state.items()}
    cast_ok = all(torch.equal(bf16_state[n], f32_state[n].to(torch.bfloat16).float())
                  for n in f32_state)
    size = os.path.getsize(os.path.join(a.out, "model.safetensors"))
    print(f"train_moe: wrote {a.out} (model.safetensors {size:,} bytes; equals torch's bf16 "
          f"cast: {cast_ok}) and {a.f32_out}", flush=True)

    # ---- evaluate (float32 compute) ----
    t_eval = time.time()
    train_w = np.stack([train[s:s + a.seq + 1] for s in
                        np.random.default_rng(1234).integers(0, train.size - a.seq - 1, 256)])
    if a.eval_limit:
        train_w = train_w[:a.eval_limit]
    train_loss, _, _ = evaluate(model, train_w)
    held_f32, sel_f32, margin_f32 = evaluate(model, held_w, collect=True)
    prompts = reference_prompts()
    greedy_f32 = [greedy(model, p["tokens"], 32) for p in prompts]
    model.load_state_dict(bf16_state)
    held_bf16, sel_bf16, margin_bf16 = evaluate(model, held_w, collect=True)
    greedy_bf16 = [greedy(model, p["tokens"], 32) for p in prompts]
    same_set = [float((np.sort(sel_f32[l], -1) == np.sort(sel_bf16[l], -1)).all(-1).mean())
                for l in range(a.layers)]
    stats = expert_stats(sel_bf16, a.experts)
    eval_seconds = time.time() - t_eval
    print(f"train_moe: train loss {train_loss:.4f}, held-out {held_f32:.4f} (f32 weights), "
          f"{held_bf16:.4f} (bf16 weights); evaluation {eval_seconds:.0f} s", flush=True)

    n_held = held_w.shape[0]
    this_run = {"steps": step, "tokens": tokens, "seconds": round(train_seconds, 1),
                "planned_steps": total, "stopped_by_budget": stopped_by_budget,
                "epochs": tokens / data_info["train_tokens"], "threads": a.threads,
                "command": command, "history": history, "args": dict(vars(a))}
    metrics = {
        "model": "code-moe",
        "command": command,
        "params": n_params,
        "active_params_per_token": n_active,
        "bf16_safetensors_bytes": size,
        "bf16_equals_torch_cast": cast_ok,
        "data": dict(data_info, stdlib=a.stdlib,
                     split="held out iff zlib.crc32(relative path) % 10 == 0"),
        "training": this_run,
        "training_runs": earlier + [this_run],

        "train_loss": train_loss,
        "heldout_loss": held_f32,
        "heldout_loss_bf16_weights": held_bf16,
        "loss_eval": f"float32 compute, {a.seq}-token windows; held-out: {n_held} "
                     f"non-overlapping windows ({n_held * a.seq} predicted tokens); train: "
                     f"{train_w.shape[0]} random windows (seed 1234)",
        "experts": {
            "measured_on": "held-out windows, BF16 weights (float32 compute)",
            "same_topk_set_f32_vs_bf16_weights": same_set,
            "router_margin_bf16": {
                "what": "p_k - p_(k+1) of the softmax, all held-out positions",
                "min": float(margin_bf16.min()),
                "fraction_below_1e-4": float((margin_bf16 < 1e-4).mean()),
                "fraction_below_1e-3": float((margin_bf16 < 1e-3).mean())},
            "layers": stats},
        "reference": {
            "what": "prompts: every 25th python prompt of ../shared/prompts/code_prompts.jsonl; "
                    "32 greedy tokens, no cache, no EOS stop, ties -> lowest id, float32 compute",
            "prompt_ids": [p["id"] for p in prompts],
            "greedy_f32_weights": greedy_f32,
            "greedy_bf16_weights": greedy_bf16},
        "evaluation_seconds": round(eval_seconds, 1),
        "total_seconds": round(time.time() - t_start, 1),
    }
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
        f.write("\n")
    shutil.copyfile(os.path.join(a.out, "metrics.json"), os.path.join(a.f32_out, "metrics.json"))
    write_readme(a, metrics)
    if not a.no_check:
        rc = subprocess.call([sys.executable, os.path.join(REPO, "scripts", "check_moe_numpy.py"),
                              a.out, "--prompts", "4"])
        sys.exit(rc)


def write_readme(a, m):
    ex = m["experts"]
    runs_list = m.get("training_runs", [m["training"]])
    runs = []
    for i, t in enumerate(runs_list):
        planned = (f"planned {t['planned_steps']} steps from the speed of the first 10 and the "
                   f"{t['args']['minutes']:g}-minute budget" if not t["args"]["steps"] else
                   f"{t['args']['steps']} steps asked")
        runs.append(f"* {'Run' if len(runs_list) == 1 else f'Run {i + 1}'}: {t['steps']} steps, "
                    f"{t['tokens']:,} tokens ({t['epochs']:.2f} epochs) in "
                    f"{t['seconds'] / 60:.1f} minutes, peak lr {t['args']['lr']:g}, "
                    f"{t['args']['warmup']} warmup steps, seed {t['args']['seed']} ({planned}"
                    f"{', stopped by the budget' if t['stopped_by_budget'] else ''}).\n"
                    f"  Command: `{t.get('command', m['command'])}` (add `--steps {t['steps']}` "
                    "to replay the same steps)")
    total_tokens = sum(t["tokens"] for t in runs_list)
    sec_per_step = sum(t["seconds"] for t in runs_list) / max(1, sum(t["steps"] for t in runs_list))
    dead = [sum(1 for u in s["usage"] if a.top_k * u < 0.005) for s in ex["layers"]]
    if len(runs_list) > 1:
        runs.append(f"* In all: {sum(t['steps'] for t in runs_list)} steps, "
                    f"{sum(t['tokens'] for t in runs_list):,} tokens")
    runs = "\n".join(runs)
    L = len(ex["layers"])
    rows = []
    for l, s in enumerate(ex["layers"]):
        c, r = s["consecutive"], s["shuffled"]
        rows.append(f"| {l} | {s['effective_experts']:.1f} | {100 * s['min_usage']:.1f}% / "
                    f"{100 * s['max_usage']:.1f}% | {c['shared_fraction']:.3f} "
                    f"({r['shared_fraction']:.3f}) | {c['p_share_any']:.3f} "
                    f"({r['p_share_any']:.3f})"
                    f" | {c['p_same_set']:.3f} | {c['unique_experts_w'][1]:.2f} "
                    f"({r['unique_experts_w'][1]:.2f}) | {c['unique_experts_w'][5]:.2f} "
                    f"({r['unique_experts_w'][5]:.2f}) |")
    usage = "\n".join(f"| {l} | " + " ".join(f"{100 * a.top_k * u:.1f}" for u in s["usage"])
                      + " |" for l, s in enumerate(ex["layers"]))
    mean_w = [sum(s["consecutive"]["unique_experts_w"][w] for s in ex["layers"]) / L
              for w in range(len(ex["layers"][0]["consecutive"]["unique_experts_w"]))]
    mean_shuf = [sum(s["shuffled"]["unique_experts_w"][w] for s in ex["layers"]) / L
                 for w in range(len(mean_w))]
    text = f"""# code-moe: a small trained Qwen3-MoE code model

A real (tiny, weak) mixture-of-experts language model for specrun's expert accounting: its
router is trained, so expert locality between consecutive tokens and speculative acceptance are
a trained model's, not a random one's. Trained from scratch on the CPU by
`scripts/train_moe.py` on the same data, split and tokenizer as `../shared/models`' dense
code-target / code-draft pair (see that README). Test/demo data, not a useful language model.

## Model

Hugging Face `Qwen3MoeForCausalLM` (`config.json` with every field `Qwen3MoeConfig` writes,
in transformers 4.51's layout; `torch_dtype` bfloat16).

| | code-moe |
|---|---|
| parameters | {m['params']:,} ({m['active_params_per_token']:,} active per token) |
| num_hidden_layers | {a.layers}, every one sparse (`decoder_sparse_step` 1, `mlp_only_layers` []) |
| hidden_size | {a.hidden} |
| num_attention_heads / num_key_value_heads / head_dim | {a.heads} / {a.kv_heads} / {a.head_dim} (GQA, q_norm/k_norm per head) |
| num_experts / num_experts_per_tok | {a.experts} / {a.top_k}, `norm_topk_prob` true, no shared expert |
| moe_intermediate_size | {a.moe_intermediate} (each expert SwiGLU {a.hidden} -> {a.moe_intermediate} -> {a.hidden}) |
| intermediate_size | 768 (unused: no dense layer) |
| vocab_size | 2048 (the shared sentencepiece tokenizer) |
| max_position_embeddings | 1024 (trained on {a.seq}-token windows) |
| rms_norm_eps / rope_theta | 1e-6 / 10000.0 (rotate_half, no scaling) |
| tie_word_embeddings | false |
| router_aux_loss_coef | {a.aux_coef} |
| model.safetensors | {m['bf16_safetensors_bytes']:,} bytes, BF16 (round to nearest even from float32; equals torch's cast: {m['bf16_equals_torch_cast']}) |

Semantics (HF `modeling_qwen3_moe.py`): pre-norm blocks; RMSNorm in float32; q and k are
RMS-normed per head (`q_norm`, `k_norm`, weight [head_dim]) before the rotary embedding; query
head h reads kv head h // 2; causal softmax attention with scale 1/sqrt(head_dim); the MLP of
every layer is `mlp.gate` (Linear {a.hidden} -> {a.experts}, no bias) -> softmax in float32 ->
top-{a.top_k} -> weights divided by their sum -> sum over the chosen experts of
weight * `down_proj(silu(gate_proj(x)) * up_proj(x))`; final norm; separate `lm_head`.
Tensor names are HF's: `model.embed_tokens.weight`, `model.layers.{{i}}.self_attn.{{q,k,v,o}}_proj.weight`,
`model.layers.{{i}}.self_attn.{{q,k}}_norm.weight`, `model.layers.{{i}}.mlp.gate.weight` [{a.experts}, {a.hidden}],
`model.layers.{{i}}.mlp.experts.{{e}}.{{gate,up}}_proj.weight` [{a.moe_intermediate}, {a.hidden}],
`model.layers.{{i}}.mlp.experts.{{e}}.down_proj.weight` [{a.hidden}, {a.moe_intermediate}],
`model.layers.{{i}}.{{input,post_attention}}_layernorm.weight`, `model.norm.weight`, `lm_head.weight`,
in that (state-dict) order. The float32 weights are kept outside the repository
(`{a.f32_out}`, same layout, `torch_dtype` float32).

## Training

* Data: Debian 12's python3.11 standard library ({m['data']['train_files'] + m['data']['held_out_files']} files; {m['data']['train_files']}
  training files, {m['data']['train_tokens']:,} tokens; {m['data']['held_out_files']} held-out files, {m['data']['held_out_tokens']:,} tokens), held out iff
  `zlib.crc32(relative_path) % 10 == 0`: exactly the dense pair's split.
* Recipe: the dense pair's (AdamW 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices, clip 1.0,
  linear warmup then cosine to 10% of the peak lr, batch {a.batch} x {a.seq}, bf16 autocast on
  the CPU with float32 master weights, init N(0, 0.02), o_proj/down_proj 0.02/sqrt({2 * a.layers})),
  plus HF's load-balancing loss (`load_balancing_loss_func`) x {a.aux_coef}. Router logits
  in float32. {a.threads} CPU thread(s).
{runs}

| loss (nats/token) | float32 weights | BF16 weights |
|---|---|---|
| train ({m['loss_eval'].split('train: ')[1]}) | {m['train_loss']:.3f} | |
| held-out (all {m['loss_eval'].split('held-out: ')[1].split(' non')[0]} non-overlapping {a.seq}-token windows) | {m['heldout_loss']:.3f} | {m['heldout_loss_bf16_weights']:.3f} |

(The dense code-target, 5.8M parameters all active, 4.5M tokens: 2.648 train, 2.853 held-out.)

## Experts on held-out text

All held-out windows, BF16 weights, float32 compute. Effective experts = exp(entropy of the
usage). Consecutive = positions t and t+1 of the same window; in parentheses the same figure
for tokens in a random order (no locality, same usage). Unique experts in w consecutive tokens
is what a verify pass of w tokens reads per layer (a decode step reads {a.top_k}).

| layer | effective experts (of {a.experts}) | min / max share of pairs | shared fraction of top-{a.top_k} | P(share >= 1) | P(same set) | unique in 2 tokens | unique in 6 tokens |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Mean over layers, unique experts in w consecutive tokens, w = 1..{len(mean_w)}:
{', '.join(f'{u:.2f}' for u in mean_w)} (random order: {', '.join(f'{u:.2f}' for u in mean_shuf)}).

So a verify pass of 2 tokens reads {mean_w[1]:.2f} experts per layer, {mean_w[1] / a.top_k:.2f}x a
decode step's {a.top_k}, and one of 6 tokens {mean_w[5]:.2f} ({mean_w[5] / a.top_k:.2f}x); without the locality between
consecutive tokens (random order) it would be {mean_shuf[1]:.2f} and {mean_shuf[5]:.2f}.

Top-{a.top_k} sets equal with float32 and BF16 weights: {', '.join(f'{s:.4f}' for s in ex['same_topk_set_f32_vs_bf16_weights'])} of positions (per layer).
Router margins p_k - p_(k+1) (BF16 weights): min {ex['router_margin_bf16']['min']:.2e}, below 1e-4 at
{ex['router_margin_bf16']['fraction_below_1e-4']:.4f} of (position, layer) pairs, below 1e-3 at {ex['router_margin_bf16']['fraction_below_1e-3']:.4f}.

Fraction of tokens routed to each expert (%; a row sums to {100 * a.top_k}%: each token picks {a.top_k}),
layer by layer, experts 0..{a.experts - 1}; `metrics.json` has them as fractions of (token, expert)
pairs (`experts.layers[l].usage`, a row sums to 1):

| layer | usage % |
|---|---|
{usage}

## Limits

* Weak: held-out {m['heldout_loss']:.3f} nats/token against the dense code-target's 2.853. The budget
  bought {total_tokens:,} tokens on one thread of a shared 2-core machine ({sec_per_step:.1f} s per step
  on average), against the dense target's 4,485,120; `--init {a.f32_out}` continues the run
  with a fresh schedule, as the dense target's second run did. Greedy continuations of the
  reference prompts repeat themselves (`metrics.json`, `reference`).
* Experts with under 0.5% of the tokens, per layer: {', '.join(str(d) for d in dead)} (of {a.experts}): the
  load-balancing loss at {a.aux_coef} (HF's default, computed as HF does over all layers together,
  which does not see one layer's imbalance if another layer balances it) keeps most experts in
  use, not all.
* Float32 evaluation runs its matrix products through oneDNN (`torch._C._nn.mkldnn_linear`):
  Debian's torch 1.13 does float32 GEMMs with the reference BLAS, ~17x slower. The values
  agree with `F.linear` to ~1e-6 and the numpy check below holds to 1e-6.

## Checks

`/usr/bin/python3 scripts/check_moe_numpy.py models/code-moe` reads `model.safetensors` and
`config.json` on their own, widens the BF16 weights to float64 and runs an independent numpy
forward (written from HF's semantics); on 4 held-out prompts its 32 greedy tokens equal the torch
model's (BF16 weights, float32 compute) and `metrics.json`'s `reference.greedy_bf16_weights`.

## Files

```
config.json              HF Qwen3MoeForCausalLM config (torch_dtype bfloat16)
model.safetensors        BF16 weights, HF tensor names
generation_config.json   bos 1, eos 2 (as ../shared/models/code-target)
tokenizer.model          copy of ../shared/models/tokenizer/tokenizer.model
tokenizer_config.json    as ../shared/models/code-target
metrics.json             losses, training run, expert statistics, greedy references
```
"""
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
