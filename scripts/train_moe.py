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
scripts/check_moe_numpy.py on OUT (a float64 numpy forward of the saved checkpoint). The pieces
it shares with scripts/train_deepseek.py are in scripts/train_common.py.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from train_common import (BOS, EOS, REPO, CausalLM, Expert, RMSNorm, add_common_args,
                          add_readme_from, check_budget_args, expert_stats, finish_metrics, greedy,
                          init_weights, linear, load_data, matmul_nt, metrics_head, param_groups,
                          read_earlier_runs, reference_prompts, rewrite_readme, rotate_half,
                          run_record, train_loop, train_windows, write_both)

# ---- model: Hugging Face Qwen3MoeForCausalLM (parameter names are HF's) -------------------------


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


class Qwen3MoeForCausalLM(CausalLM):
    def __init__(self, c):
        super().__init__(c, Backbone(c), c["head_dim"])

    def forward(self, ids):
        """ids [B, T] -> logits [B, T, V], router logits per layer [B*T, E], experts [B*T, k]."""
        B, T = ids.shape
        x = self.model.embed_tokens(ids)
        cos, sin, mask = self.rope_tables(T, x.dtype)
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


# ---- main ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap, "code-moe", 25.0)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--aux-coef", type=float, default=0.001)
    ap.add_argument("--no-check", action="store_true", help="skip scripts/check_moe_numpy.py")
    ap.add_argument("--init", metavar="F32DIR",
                    help="continue from the float32 checkpoint of an earlier run (its --f32-out): "
                         "its weights, a fresh optimizer and schedule (as the dense code-target's "
                         "continuation run, which used --seed 1); metrics.json lists every run")
    add_readme_from(ap)
    a = ap.parse_args()
    if a.readme_from:
        return rewrite_readme(a.readme_from, write_readme)
    check_budget_args(a, "train_moe")
    command = " ".join(["/usr/bin/python3 scripts/train_moe.py"] + sys.argv[1:])
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    t_start = time.time()
    train, held_w, quick_w, data_info = load_data("train_moe", a)

    cfg = hf_config(a, "float32")
    model = Qwen3MoeForCausalLM(cfg)
    init_weights(model, cfg)
    earlier = read_earlier_runs("train_moe", a, model) if a.init else []
    n_params = sum(p.numel() for p in model.parameters())
    per_expert = 3 * a.hidden * a.moe_intermediate
    n_active = n_params - a.layers * (a.experts - a.top_k) * per_expert
    print(f"train_moe: {n_params:,} parameters ({n_active:,} active per token), "
          f"BF16 {2 * n_params / 1e6:.2f} MB", flush=True)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    def step_loss(w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, routers, _ = model(w[:, :-1])
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        aux = load_balancing_loss(routers, a.experts, a.top_k)
        return ce + a.aux_coef * aux, {"ce": ce.item(), "aux": aux.item()}

    def quick_eval():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return evaluate(model, quick_w)[0]

    run = train_loop("train_moe", model, opt, a, train, rng, step_loss, quick_eval)
    size, cast_ok, f32_state, bf16_state = write_both("train_moe", a, model, hf_config)

    # ---- evaluate (float32 compute) ----
    t_eval = time.time()
    train_w = train_windows(train, a)
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
    this_run = run_record(a, command, data_info, run)
    metrics = metrics_head("code-moe", command, n_params, {"active_params_per_token": n_active},
                           size, cast_ok, data_info, this_run, earlier)
    metrics.update({
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
    })
    finish_metrics(a, metrics, prompts, greedy_f32, greedy_bf16, eval_seconds, t_start,
                   write_readme)
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
