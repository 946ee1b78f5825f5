"""What scripts/train_moe.py and scripts/train_deepseek.py share: the corpus and its held-out
split, float32 products through oneDNN, RMSNorm, SwiGLU, the initialisation, the BF16
safetensors writer, the checkpoint directory, the schedule, the training loop that plans its
steps once from its speed and a --minutes budget, greedy decoding and the reference prompts.
"""
import json
import math
import os
import shutil
import struct
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



# ---- layers ----------------------------------------------------------------------------------


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


class Expert(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return linear(F.silu(linear(x, self.gate_proj.weight)) * linear(x, self.up_proj.weight),
                      self.down_proj.weight)



class CausalLM(nn.Module):
    """Hugging Face's *ForCausalLM shell: self.model (a backbone with embed_tokens, layers and
    norm, built by the caller first), an untied lm_head, and the rotary tables of a
    rope_dim-wide rotary part (HF's cat(freqs, freqs) layout)."""

    def __init__(self, c, backbone, rope_dim):
        super().__init__()
        self.c = c
        self.model = backbone
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.register_buffer("inv_freq", 1.0 / (c["rope_theta"] ** (
            torch.arange(0, rope_dim, 2, dtype=torch.int64).float() / rope_dim)), persistent=False)

    def rope_tables(self, T, dtype):
        """cos, sin [T, rope_dim] (computed in float32, then dtype) and the causal mask [T, T]."""
        with torch.autocast("cpu", enabled=False):
            freqs = torch.arange(T, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), -1)
            cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
        return cos, sin, torch.full((T, T), float("-inf")).triu(1)


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


def bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_widen(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype, keep_f32=()):
    """tensors: list of (name, float32 array), written in this (state-dict) order; the names in
    keep_f32 stay F32 whatever dtype is (DeepSeek-V3's e_score_correction_bias)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        dt = "F32" if name in keep_f32 else dtype
        raw = (bf16_bits(a) if dt == "BF16" else np.ascontiguousarray(a, np.float32)).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape),
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


def write_checkpoint(out, model, cfg, dtype, keep_f32=()):
    os.makedirs(out, exist_ok=True)
    sd = [(n, p.detach().float().numpy()) for n, p in model.state_dict().items()]
    write_safetensors(os.path.join(out, "model.safetensors"), sd,
                      "BF16" if dtype == "bfloat16" else "F32", keep_f32)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    src = os.path.join(SHARED, "models", "code-target")
    for name in ("generation_config.json", "tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(out, name))


# ---- evaluation ---------------------------------------------------------------------------------


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


# ---- training ----------------------------------------------------------------------------------


def lr_at(step, total, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    frac = (step - a.warmup) / max(1, total - a.warmup)
    return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def param_groups(model, wd):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]




def add_common_args(ap, name, minutes):
    """The arguments both trainers take (the run, and the model's width, heads and experts);
    OUT defaults to models/NAME, F32OUT to /work/NAME-f32."""
    ap.add_argument("--out", default=os.path.join(REPO, "models", name))
    ap.add_argument("--f32-out", default=f"/work/{name}-f32")
    ap.add_argument("--stdlib", default="/usr/lib/python3.11")
    ap.add_argument("--tokenizer", default=os.path.join(SHARED, "models", "tokenizer",
                                                        "tokenizer.model"))
    ap.add_argument("--minutes", type=float, default=minutes,
                    help=f"wall-time budget of the training loop (at most {MAX_MINUTES:g})")
    ap.add_argument("--steps", type=int, default=0,
                    help="optimizer steps (default: planned from --minutes after 10 steps)")
    ap.add_argument("--stop-after", type=int, default=0, metavar="N",
                    help="stop after N steps of the schedule (with --steps PLANNED: replays a run "
                         "that the budget stopped after N of its PLANNED steps)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--moe-intermediate", type=int, default=128)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-limit", type=int, default=0,
                    help="held-out windows in the final evaluation (default: all; for smoke runs)")


def check_budget_args(a, prog):
    if a.minutes > MAX_MINUTES:
        raise SystemExit(f"{prog}: --minutes {a.minutes:g} is over {MAX_MINUTES:g}: this machine "
                         f"is shared; use --minutes {MAX_MINUTES:g} or less")
    if not a.steps and a.warmup <= 10:
        raise SystemExit(f"{prog}: --warmup must be over 10 when the steps are planned (the first "
                         "10 steps time the run before the schedule is known)")


def train_loop(prog, model, opt, a, train, rng, step_loss, quick_eval, after_step=None):
    """The training loop: random windows of train, step_loss(w) -> (loss, {name: float}) under
    bf16 autocast, clip 1.0, AdamW; after_step() after each optimizer step. The number of steps
    is planned once, after 10 steps, from their speed and the --minutes budget (--steps N:
    exactly N; --stop-after M: only the first M of them). Every a.eval_every steps, quick_eval() (a held-out loss) goes to the history.
    Returns (steps, planned steps, stopped by the budget, seconds, history)."""
    budget = a.minutes * 60.0
    total = a.steps if a.steps else None
    history, log, n_log = [], {}, 0
    t0 = time.time()
    step, stopped_by_budget = 0, False
    while total is None or step < total:
        if time.time() - t0 >= budget:
            stopped_by_budget = True
            break
        if a.stop_after and step >= a.stop_after:
            break
        lr = lr_at(step, total or 10**9, a)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, train.size - a.seq - 1, size=a.batch)
        w = torch.from_numpy(np.stack([train[s:s + a.seq + 1] for s in starts]))
        model.train()
        loss, parts = step_loss(w)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if after_step is not None:
            after_step()
        step += 1
        for k, v in parts.items():
            log[k] = log.get(k, 0.0) + v
        n_log += 1
        if step == 1:
            t1 = time.time()
        if total is None and step == 11:
            # Plan the run once: the schedule must not depend on later timings.
            per_step = (time.time() - t1) / 10
            total = step + int(0.9 * (budget - (time.time() - t0)) / per_step)
            print(f"{prog}: {per_step:.2f} s/step: planned {total} steps", flush=True)
        if step % 10 == 0:
            print(f"step {step}/{total}: " + " ".join(f"{k} {v / n_log:.3f}" for k, v in
                                                       log.items())
                  + f" lr {lr:.2e} {time.time() - t0:.0f} s", flush=True)
            log, n_log = {}, 0
        if step % a.eval_every == 0:
            model.eval()
            q = quick_eval()
            history.append({"step": step, "held_out_quick": q, "seconds": time.time() - t0})
            print(f"step {step}: held-out (8 windows, bf16 autocast) {q:.3f}", flush=True)
    seconds = time.time() - t0
    print(f"{prog}: {step} steps, {step * a.batch * a.seq:,} tokens in {seconds:.0f} s"
          + (" (stopped by the budget)" if stopped_by_budget else ""), flush=True)
    return step, total, stopped_by_budget, seconds, history


def write_both(prog, a, model, hf_config, keep_f32=()):
    """Writes the float32 checkpoint to a.f32_out and the BF16 one to a.out; returns the BF16
    file's size, whether its values equal torch's bf16 cast, and the float32 and BF16-widened
    state dicts (to evaluate both)."""
    model.eval()
    write_checkpoint(a.f32_out, model, hf_config(a, "float32"), "float32", keep_f32)
    write_checkpoint(a.out, model, hf_config(a, "bfloat16"), "bfloat16", keep_f32)
    f32_state = {n: p.detach().clone() for n, p in model.state_dict().items()}
    bf16_state = {n: p if n in keep_f32 else torch.from_numpy(bf16_widen(bf16_bits(p.numpy())))
                  for n, p in f32_state.items()}
    cast_ok = all(n in keep_f32 or torch.equal(bf16_state[n],
                                                f32_state[n].to(torch.bfloat16).float())
                  for n in f32_state)
    size = os.path.getsize(os.path.join(a.out, "model.safetensors"))
    print(f"{prog}: wrote {a.out} (model.safetensors {size:,} bytes; equals torch's bf16 "
          f"cast: {cast_ok}) and {a.f32_out}", flush=True)
    return size, cast_ok, f32_state, bf16_state


def train_windows(train, a):
    """The 256 random training windows (seed 1234) the train loss is measured on."""
    w = np.stack([train[s:s + a.seq + 1] for s in
                  np.random.default_rng(1234).integers(0, train.size - a.seq - 1, 256)])
    return w[:a.eval_limit] if a.eval_limit else w


def read_earlier_runs(prog, a, model):
    """--init F32DIR: loads its float32 weights into model and returns its training runs."""
    from check_moe_numpy import read_safetensors
    path = os.path.join(a.init, "model.safetensors")
    weights, dtypes = read_safetensors(path)
    if dtypes != {"F32"}:
        raise SystemExit(f"{prog}: {path} holds {sorted(dtypes)}; --init takes the float32 "
                         "checkpoint (the --f32-out of the earlier run)")
    model.load_state_dict({n: torch.from_numpy(weights[n].astype(np.float32))
                           for n in model.state_dict()})
    earlier = []
    prev = os.path.join(a.init, "metrics.json")
    if os.path.exists(prev):
        m = json.load(open(prev))
        earlier = m.get("training_runs", [m["training"]])
    print(f"{prog}: continuing from {a.init} ({sum(r['tokens'] for r in earlier):,} "
          "tokens before)", flush=True)
    return earlier


def load_data(prog, a):
    """The corpus (train, held-out ids), its description, all held-out windows (the first
    a.eval_limit when set) and the 8 held-out windows of the quick evaluations."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    train, held, data_info = load_corpus(a.stdlib, sp)
    print(f"{prog}: {data_info}", flush=True)
    held_w = windows(held, a.seq)
    quick_w = held_w[np.random.default_rng(11).choice(held_w.shape[0], 8, replace=False)]
    if a.eval_limit:
        held_w = held_w[:a.eval_limit]
    return train, held_w, quick_w, dict(data_info, stdlib=a.stdlib,
                                        split="held out iff zlib.crc32(relative path) % 10 == 0")


def run_record(a, command, data_info, run):
    """metrics.json's "training" entry from train_loop's result."""
    step, total, stopped_by_budget, seconds, history = run
    tokens = step * a.batch * a.seq
    return {"steps": step, "tokens": tokens, "seconds": round(seconds, 1),
            "planned_steps": total, "stopped_by_budget": stopped_by_budget,
            "epochs": tokens / data_info["train_tokens"], "threads": a.threads,
            "command": command, "history": history, "args": dict(vars(a))}


def finish_metrics(a, metrics, prompts, greedy_f32, greedy_bf16, eval_seconds, t_start,
                   write_readme):
    """Adds the greedy references and the timings to metrics, writes metrics.json (OUT and
    F32OUT) and README.md."""
    metrics.update({
        "reference": {
            "what": "prompts: every 25th python prompt of ../shared/prompts/code_prompts.jsonl; "
                    "32 greedy tokens, no cache, no EOS stop, ties -> lowest id, float32 compute",
            "prompt_ids": [p["id"] for p in prompts],
            "greedy_f32_weights": greedy_f32,
            "greedy_bf16_weights": greedy_bf16},
        "evaluation_seconds": round(eval_seconds, 1),
        "total_seconds": round(time.time() - t_start, 1)})
    save_metrics(a, metrics)
    write_readme(a, metrics)


def save_metrics(a, metrics):
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
        f.write("\n")
    shutil.copyfile(os.path.join(a.out, "metrics.json"), os.path.join(a.f32_out, "metrics.json"))


def metrics_head(name, command, n_params, counts, size, cast_ok, data_info, this_run, earlier):
    """The first entries of metrics.json: the model, its sizes (counts: more parameter counts),
    the data and the training runs."""
    return dict({"model": name, "command": command, "params": n_params}, **counts,
                bf16_safetensors_bytes=size, bf16_equals_torch_cast=cast_ok, data=data_info,
                training=this_run, training_runs=earlier + [this_run])


def add_readme_from(ap):
    ap.add_argument("--readme-from", metavar="METRICS",
                    help="only rewrite README.md beside METRICS (a metrics.json of this script)")


def rewrite_readme(metrics_path, write_readme):
    """--readme-from: README.md again from a metrics.json, with that run's arguments."""
    import argparse
    m = json.load(open(metrics_path))
    args = argparse.Namespace(**m["training"]["args"])
    args.out = os.path.dirname(os.path.abspath(metrics_path))
    write_readme(args, m)
