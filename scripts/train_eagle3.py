#!/usr/bin/python3
"""Trains an EAGLE-3 draft head from a specrun dataset and writes it in the checkpoint layout
specrun (and SGLang) load: config.json (LlamaForCausalLMEagle3) and model.safetensors with fc,
midlayer.*, norm, lm_head over a draft vocabulary, d2t and t2d.

    specrun run gen.toml            # decode.modes = ["dataset"], dataset.hidden_layers = "eagle3,final"
    /usr/bin/python3 scripts/train_eagle3.py DATA.h5 TARGET_DIR OUT_DIR --minutes 18
    specrun run job.toml --set draft.kind=eagle3 --set draft.path=OUT_DIR

The dataset must hold four layers per position: the head's three capture layers (its features)
and the final norm's output (layer id = num_layers), from which the target's logits are
recomputed with the target's lm_head (soft targets). Generate it with
dataset.hidden_layers = "<low>,<mid>,<high>,final", e.g. "2,3,4,final" for code-target.

Objective as the EAGLE-3 authors' traineagle3 (cnets.py Model.forward): training-time test over
`--steps` (7) unrolled draft steps; step s feeds slot i the token x[i+1+s] and the head's own
output of step s-1 (step 0: fc of the target's features at i), at RoPE position i+s, attending
to the step-0 keys of slots <= i and to its own keys of earlier steps; loss weights 0.8^s; soft
targets softmax(target_logits[..., t2d]); positions whose target argmax is outside the draft
vocabulary are masked. Draft vocabulary: the `--draft-vocab` most frequent tokens of the
dataset's tokens (ties: lower id first), sorted, d2t[i] = used[i] - i. AdamW (0.9, 0.95), no
weight decay, gradient clip 0.5, linear warmup then cosine decay to 10% over the wall-time
budget, bf16 autocast on the CPU with float32 master weights.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from specrun_data import SpecrunData  # noqa: E402

# ---- safetensors (no dependency: the format is a JSON header and raw little-endian data) ----


def read_safetensors(path, names):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        out = {}
        for name in names:
            meta = header[name]
            a, b = meta["data_offsets"]
            f.seek(8 + n + a)
            raw = f.read(b - a)
            dt = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[meta["dtype"]]
            arr = np.frombuffer(raw, dtype=dt).reshape(meta["shape"])
            if meta["dtype"] == "BF16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            out[name] = arr.astype(np.float32)
        return out


def target_tensors(target_dir, names):
    index = os.path.join(target_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        files = json.load(open(index))["weight_map"]
        out = {}
        for name in names:
            out.update(read_safetensors(os.path.join(target_dir, files[name]), [name]))
        return out
    return read_safetensors(os.path.join(target_dir, "model.safetensors"), names)


def write_safetensors(path, tensors):
    """tensors: name -> numpy array (float32, int64 or bool)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    kinds = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.tobytes()
        header[name] = {"dtype": kinds[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# ---- the head ----------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * y).to(x.dtype)


def rope(x, pos, inv_freq):
    """x [..., T, heads, hd] at positions pos [T] (Hugging Face rotate_half)."""
    ang = pos[:, None].float() * inv_freq[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :].to(x.dtype)
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


class Eagle3Head(nn.Module):
    def __init__(self, cfg, embed):
        super().__init__()
        H, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.nh, self.nkv, self.hd = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
                                      cfg["head_dim"])
        eps = cfg["rms_norm_eps"]
        self.embed = nn.Embedding.from_pretrained(torch.from_numpy(embed), freeze=True)
        self.fc = nn.Linear(3 * H, H, bias=False)
        self.input_layernorm = RMSNorm(H, eps)
        self.hidden_norm = RMSNorm(H, eps)
        self.q_proj = nn.Linear(2 * H, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)
        self.norm = RMSNorm(H, eps)
        self.lm_head = nn.Linear(H, cfg["draft_vocab_size"], bias=False)
        self.register_buffer("inv_freq", 1.0 / cfg["rope_theta"] ** (
            torch.arange(0, self.hd, 2).float() / self.hd), persistent=False)

    def qkv(self, tokens, hin, pos):
        """tokens [B, T], hin [B, T, H] -> q [B,T,nh,hd], k, v [B,T,nkv,hd] (RoPE at pos)."""
        x = torch.cat([self.input_layernorm(self.embed(tokens)), self.hidden_norm(hin)], -1)
        B, T, _ = x.shape
        q = rope(self.q_proj(x).view(B, T, self.nh, self.hd), pos, self.inv_freq)
        k = rope(self.k_proj(x).view(B, T, self.nkv, self.hd), pos, self.inv_freq)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd)
        return q, k, v

    def rest(self, hin, attn):
        h = hin + self.o_proj(attn)
        n = self.post_attention_layernorm(h)
        h = h + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))
        return h, self.lm_head(self.norm(h))

    def ttt(self, tokens, feats, steps, pad_mask):
        """Unrolled training-time test. tokens [B, T] (x), feats [B, T, 3H] (f at each slot i),
        pad_mask [B, T] (real slots). Returns the logits of every step, [steps][B, T, Vd]; step s
        at slot i predicts the target's distribution at position i + 1 + s."""
        B, T, _ = feats.shape
        g = self.nh // self.nkv
        scale = 1.0 / math.sqrt(self.hd)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        keys0 = None
        own = []  # (k, v) of steps >= 1, per slot
        hin = self.fc(feats)
        outs = []
        for s in range(steps):
            # Slot i reads token x[i+1+s] (zero past the end: those slots are masked out).
            tok = torch.zeros_like(tokens)
            if 1 + s < T:
                tok[:, :T - 1 - s] = tokens[:, 1 + s:]
            pos = torch.arange(T) + s
            q, k, v = self.qkv(tok, hin, pos)
            k = k.repeat_interleave(g, dim=2)
            v = v.repeat_interleave(g, dim=2)
            if s == 0:
                keys0 = (k, v)
            else:
                own.append((k, v))
            k0, v0 = keys0
            # Scores over the step-0 keys of slots j <= i, and the slot's own earlier-step keys.
            sc0 = torch.einsum("bihd,bjhd->bhij", q, k0) * scale
            sc0 = sc0.masked_fill(~causal, float("-inf"))
            extra = [torch.einsum("bihd,bihd->bhi", q, kk)[..., None] * scale for kk, _ in own]
            sc = torch.cat([sc0] + extra, -1) if extra else sc0
            p = torch.softmax(sc.float(), -1).to(q.dtype)
            out = torch.einsum("bhij,bjhd->bihd", p[..., :T], v0)
            for e, (_, vv) in enumerate(own):
                out = out + p[..., T + e].permute(0, 2, 1)[..., None] * vv
            h, logits = self.rest(hin, out.reshape(B, T, self.nh * self.hd))
            outs.append(logits)
            hin = h
        return outs


# ---- data --------------------------------------------------------------------------------------


def load_dataset(path, max_len):
    """All sequences in memory: tokens and the bf16 rows (features and final norm output)."""
    data = SpecrunData(path)
    if len(data.layers) != 4 or data.layers[3] != int(data.layout["num_layers"]):
        sys.exit(f"{path}: layers {data.layers}: train_eagle3.py needs the head's three capture "
                 f"layers and the final norm's output (dataset.hidden_layers = \"2,3,4,final\" "
                 f"for example)")
    seqs = []
    for i in range(len(data)):
        s = data[i]
        if s["first_row"] != 0:
            sys.exit(f"{path}: dataset.positions must be \"all\" (sequence {i} starts at row "
                     f"{s['first_row']})")
        n = min(len(s["tokens"]), max_len)
        rows = torch.from_numpy(np.ascontiguousarray(s["hidden"][:n - 1])).to(torch.bfloat16)
        seqs.append((torch.from_numpy(s["tokens"][:n].copy()), rows))
    return data, seqs


def draft_vocab(seqs, size, vocab):
    counts = np.zeros(vocab, dtype=np.int64)
    for tok, _ in seqs:
        np.add.at(counts, tok.numpy(), 1)
    order = sorted(range(vocab), key=lambda t: (-counts[t], t))[:size]
    used = np.array(sorted(order), dtype=np.int64)
    d2t = used - np.arange(size)
    t2d = np.zeros(vocab, dtype=np.bool_)
    t2d[used] = True
    covered = counts[used].sum() / max(counts.sum(), 1)
    return used, d2t, t2d, covered


def make_batch(seqs, idx):
    T = max(len(seqs[i][0]) for i in idx)
    B = len(idx)
    H4 = seqs[idx[0]][1].shape[1:]
    tokens = torch.zeros(B, T, dtype=torch.int64)
    rows = torch.zeros(B, T, *H4, dtype=torch.bfloat16)
    length = torch.zeros(B, dtype=torch.int64)
    for b, i in enumerate(idx):
        tok, r = seqs[i]
        tokens[b, :len(tok)] = tok
        rows[b, :r.shape[0]] = r
        length[b] = len(tok)
    return tokens, rows, length


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="dataset top-level file (or shard)")
    ap.add_argument("target", help="the target's checkpoint directory (embedding, lm_head, config)")
    ap.add_argument("out", help="directory for config.json and model.safetensors")
    ap.add_argument("--minutes", type=float, default=18.0, help="wall-time budget of training")
    ap.add_argument("--steps", type=int, default=7, help="unrolled draft steps (TTT)")
    ap.add_argument("--draft-vocab", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4, help="sequences per optimizer step")
    ap.add_argument("--max-len", type=int, default=512, help="tokens per sequence used")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--intermediate", type=int, default=0,
                    help="MLP width (default: the target's)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    t_start = time.time()

    tcfg = json.load(open(os.path.join(args.target, "config.json")))
    H, V = tcfg["hidden_size"], tcfg["vocab_size"]
    data, seqs = load_dataset(args.data, args.max_len)
    layers = data.layers[:3]
    used, d2t, t2d, covered = draft_vocab(seqs, args.draft_vocab, V)
    tw = target_tensors(args.target, ["model.embed_tokens.weight", "lm_head.weight"]
                        if not tcfg.get("tie_word_embeddings") else ["model.embed_tokens.weight"])
    embed = tw["model.embed_tokens.weight"]
    lm_head = torch.from_numpy(tw.get("lm_head.weight", embed)).to(torch.bfloat16)
    n_rows = sum(r.shape[0] for _, r in seqs)
    print(f"train_eagle3: {len(seqs)} sequences, {n_rows} positions from {args.data}; capture "
          f"layers {layers}; draft vocabulary {args.draft_vocab} covers {covered:.4f} of the "
          f"tokens; loaded in {time.time() - t_start:.1f} s", flush=True)

    head_dim = tcfg.get("head_dim") or H // tcfg["num_attention_heads"]
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": H, "intermediate_size": args.intermediate or tcfg["intermediate_size"],
        "num_attention_heads": tcfg["num_attention_heads"],
        "num_key_value_heads": tcfg["num_key_value_heads"], "head_dim": head_dim,
        "num_hidden_layers": 1, "vocab_size": V, "draft_vocab_size": args.draft_vocab,
        "rms_norm_eps": tcfg["rms_norm_eps"], "rope_theta": tcfg.get("rope_theta", 10000.0),
        "rope_scaling": None, "max_position_embeddings": tcfg["max_position_embeddings"],
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": tcfg.get("bos_token_id", 1), "eos_token_id": tcfg.get("eos_token_id", 2),
        "torch_dtype": "float32",
        # SGLang's convention: ids of layer outputs, the inputs of layers id + 1.
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [l - 1 for l in layers],
                         "use_aux_hidden_state": True},
    }
    head = Eagle3Head(cfg, embed)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    used_t = torch.from_numpy(used)
    in_draft = torch.from_numpy(t2d)
    budget = args.minutes * 60.0
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    step, seen, log_loss, log_acc, log_n = 0, 0, 0.0, 0.0, 0
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = rng.choice(len(seqs), size=min(args.batch, len(seqs)), replace=False)
        tokens, rows, length = make_batch(seqs, idx)
        B, T = tokens.shape
        feats = rows[:, :, :3, :].reshape(B, T, 3 * H)
        with torch.no_grad():
            # The target's distribution after each position j (rows are positions 0..len-2).
            tlogits = rows[:, :, 3, :].float() @ lm_head.float().T  # [B, T, V]
            targ_in = in_draft[tlogits.argmax(-1)]
            tprobs = torch.softmax(tlogits[..., used_t], -1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs = head.ttt(tokens, feats.float(), args.steps, None)
        loss, acc_num, acc_den = 0.0, 0.0, 0.0
        slots = torch.arange(T)
        for s, logits in enumerate(outs):
            # Slot i predicts position i + 1 + s, which needs logits row i + 1 + s <= len - 2.
            j = slots + 1 + s
            valid = (j[None, :] <= (length[:, None] - 2))
            jj = j.clamp(max=T - 1)
            p = tprobs[:, jj]
            ok = valid & targ_in[:, jj]
            lq = torch.log_softmax(logits.float(), -1)
            per = -(p * lq).sum(-1)
            m = ok.float()
            loss = loss + (0.8 ** s) * (per * m).sum() / m.sum().clamp(min=1)
            if s == 0:
                acc_num += ((lq.argmax(-1) == p.argmax(-1)).float() * m).sum().item()
                acc_den += m.sum().item()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        step += 1
        seen += int((length - 1).sum())
        log_loss += loss.item()
        log_acc += acc_num / max(acc_den, 1)
        log_n += 1
        if step % 20 == 0:
            print(f"step {step}: loss {log_loss / log_n:.3f}, step-0 top-1 {log_acc / log_n:.3f}, "
                  f"lr {lr:.2e}, {seen} positions, {time.time() - t0:.0f} s", flush=True)
            log_loss, log_acc, log_n = 0.0, 0.0, 0
    # Write the head.
    os.makedirs(args.out, exist_ok=True)
    sd = head.state_dict()
    names = {"fc.weight": "fc.weight", "norm.weight": "norm.weight",
             "lm_head.weight": "lm_head.weight"}
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        names[f"{n}.weight"] = f"midlayer.{n}.weight"
    for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
        names[f"{n}.weight"] = f"midlayer.self_attn.{n}.weight"
    for n in ("gate_proj", "up_proj", "down_proj"):
        names[f"{n}.weight"] = f"midlayer.mlp.{n}.weight"
    tensors = {dst: sd[src].float().numpy() for src, dst in names.items()}
    tensors["d2t"] = d2t.astype(np.int64)
    tensors["t2d"] = t2d
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"train_eagle3: {step} steps, {seen} positions in {time.time() - t0:.0f} s; wrote "
          f"{args.out}", flush=True)


if __name__ == "__main__":
    main()
