#!/usr/bin/python3
"""Trains code-dsv3, a small DeepSeek-V3-architecture code model with one multi-token-prediction
(MTP) module, on the CPU, as scripts/train_moe.py trains code-moe (same data, held-out split,
tokenizer and recipe), and writes it as a DeepseekV3ForCausalLM checkpoint with the MTP module
at model.layers.{num_hidden_layers}, as DeepSeek-V3's released weights hold theirs.

    /usr/bin/python3 scripts/train_deepseek.py               # 18 minutes, writes models/code-dsv3
    /usr/bin/python3 scripts/train_deepseek.py --steps N     # the same run, step for step

Data and recipe: scripts/train_moe.py's (scripts/train_common.py): the *.py files of Debian 12's
python3.11 standard library, held out iff zlib.crc32(relative path) % 10 == 0, the shared
sentencepiece tokenizer, random 512-token windows, batch 8, AdamW (0.9, 0.95), weight decay 0.1
on matrices, clip 1.0, warmup then cosine to 10%, bf16 autocast with float32 master weights,
init N(0, 0.02) (o_proj/down_proj 0.02/sqrt(2 * layers)), one thread, steps planned once after
10 steps from their speed and --minutes (--steps N replays).

Model: Hugging Face's modeling_deepseek_v3.py semantics (DeepseekV3ForCausalLM):
  - MLA: q = q_b_proj(q_a_layernorm(q_a_proj(x))) per head [qk_nope ; qk_rope];
    [c ; k_rot] = kv_a_proj_with_mqa(x), [k_nope ; v] = kv_b_proj(kv_a_layernorm(c)) per head,
    k_rot shared by the heads; RoPE on the rope parts only, rope_interleave (pairs (2i, 2i+1)
    de-interleaved to halves, then rotate_half, as HF's apply_rotary_pos_emb_interleave and
    tests/e2e/deepseek_reference.py); causal softmax, scale (qk_nope + qk_rope)^-0.5; o_proj.
    No rope_scaling (trained on 512-token windows).
  - layer 0 dense (first_k_dense_replace 1), SwiGLU of intermediate_size; layers >= 1 MoE:
    DeepSeek-V3's noaux_tc router: sigmoid(gate(x)) in float32, choice on scores +
    e_score_correction_bias (a float32 buffer), n_group groups of which the topk_group with the
    highest sums of their two best biased scores are eligible (the others never chosen), top-k;
    weights the unbiased scores normalised (norm_topk_prob) times routed_scaling_factor; plus
    the shared experts, unweighted.
  - Balance, as DeepSeek-V3 (report section 2.1.2): the bias is not trained by gradient; after
    each optimizer step, for each MoE layer, bias_i += gamma * sign(mean load - load_i) (load:
    tokens of the batch routed to expert i); and the complementary sequence-wise balance loss
    alpha * sum_i f_i P_i (per sequence; f_i = E / (k T) * tokens routed to i, P_i = mean over
    the sequence of score_i / sum of the scores), alpha = aux_loss_alpha.
  - one MTP module (num_nextn_predict_layers 1), layer m = num_hidden_layers (docs/mtp-design.md
    on branch w/mtp): for position i, x = eh_proj(cat(enorm(embed(t_{i+1})), hnorm(h_i))),
    EMBEDDING FIRST, h_i the main model's hidden state AFTER its final norm (model.norm); a full
    decoder layer (MLA + MoE) at RoPE position i; logits = lm_head(shared_head.norm(y)).
    embed_tokens and the output head are the main model's (shared, not written into layer m).
    Loss = CE(main) + mtp_weight (0.3, the V3 report's first phase) * CE(MTP predicting
    t_{i+2}) + the sequence-wise balance loss.

Writes OUT (default models/code-dsv3): config.json (DeepseekV3Config's fields plus DeepSeek-V3's
own config.json keys topk_method, scoring_func, moe_layer_freq, seq_aux, aux_loss_alpha),
model.safetensors (BF16, round to nearest even; e_score_correction_bias float32 as in
DeepSeek-V3's checkpoints), generation_config.json, tokenizer files, metrics.json, README.md;
and F32OUT (default /work/code-dsv3-f32): the float32 weights. The MTP module's greedy agreement
with the main model on held-out windows goes to metrics.json ("mtp").
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from train_common import (BOS, EOS, CausalLM, Expert, RMSNorm, add_common_args, add_readme_from,
                          check_budget_args, expert_stats, finish_metrics, greedy, init_weights,
                          linear, load_data, matmul_nt, metrics_head, param_groups,
                          read_earlier_runs, reference_prompts, rewrite_readme, rotate_half,
                          run_record, train_loop, train_windows, write_both)

PROG = "train_deepseek"

# ---- model: Hugging Face DeepseekV3ForCausalLM (parameter names are HF's) ------------------------


def interleave_to_halves(x):
    """(x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...) over the last dim."""
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(x.shape)


class MLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, self.nh = c["hidden_size"], c["num_attention_heads"]
        self.dn, self.dr, self.dv, self.R = (c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                                             c["v_head_dim"], c["kv_lora_rank"])
        eps = c["rms_norm_eps"]
        self.q_a_proj = nn.Linear(H, c["q_lora_rank"], bias=False)
        self.q_a_layernorm = RMSNorm(c["q_lora_rank"], eps)
        self.q_b_proj = nn.Linear(c["q_lora_rank"], self.nh * (self.dn + self.dr), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(H, self.R + self.dr, bias=False)
        self.kv_a_layernorm = RMSNorm(self.R, eps)
        self.kv_b_proj = nn.Linear(self.R, self.nh * (self.dn + self.dv), bias=False)
        self.o_proj = nn.Linear(self.nh * self.dv, H, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        nh, dn, dr, dv = self.nh, self.dn, self.dr, self.dv
        q = linear(self.q_a_layernorm(linear(x, self.q_a_proj.weight)), self.q_b_proj.weight)
        q = q.view(B, T, nh, dn + dr).transpose(1, 2)
        ckv = linear(x, self.kv_a_proj_with_mqa.weight)
        c, k_rot = ckv[..., :self.R], ckv[..., self.R:]
        kv = linear(self.kv_a_layernorm(c), self.kv_b_proj.weight)
        kv = kv.view(B, T, nh, dn + dv).transpose(1, 2)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        q_rot = interleave_to_halves(q[..., dn:])
        k_rot = interleave_to_halves(k_rot[:, None])
        q_rot = q_rot * cos + rotate_half(q_rot) * sin
        k_rot = k_rot * cos + rotate_half(k_rot) * sin
        q = torch.cat((q[..., :dn], q_rot), -1)
        k = torch.cat((k_nope, k_rot.expand(B, nh, T, dr)), -1)
        att = matmul_nt(q, k) * (dn + dr) ** -0.5 + mask
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        o = matmul_nt(att, v.transpose(2, 3)).transpose(1, 2).reshape(B, T, nh * dv)
        return linear(o, self.o_proj.weight)


class TopkRouter(nn.Module):
    """mlp.gate: weight [E, H] (trained) and e_score_correction_bias [E] (float32, not trained:
    updated by the balancing rule)."""

    def __init__(self, c):
        super().__init__()
        self.E, self.k = c["n_routed_experts"], c["num_experts_per_tok"]
        self.G, self.topk_group = c["n_group"], c["topk_group"]
        self.norm, self.scale = c["norm_topk_prob"], c["routed_scaling_factor"]
        self.weight = nn.Parameter(torch.empty(self.E, c["hidden_size"]))
        self.register_buffer("e_score_correction_bias", torch.zeros(self.E))

    def forward(self, x):
        """x [N, H] -> scores [N, E] (float32), weights [N, k], experts [N, k], and the margins
        of the choice at the k-th expert and at the topk_group-th group [N] each."""
        with torch.autocast("cpu", enabled=False):
            scores = torch.sigmoid(linear(x.float(), self.weight.float()))
        choice = scores.detach() + self.e_score_correction_bias[None, :]
        N = choice.shape[0]
        best2 = choice.view(N, self.G, self.E // self.G).topk(2, dim=-1).values.sum(-1)
        ranked_g, groups = best2.sort(-1, descending=True)
        eligible = torch.zeros_like(best2, dtype=torch.bool)
        eligible.scatter_(1, groups[:, :self.topk_group], True)
        eligible = eligible[:, :, None].expand(N, self.G, self.E // self.G).reshape(N, self.E)
        choice = choice.masked_fill(~eligible, float("-inf"))
        ranked, order = choice.sort(-1, descending=True)
        sel = order[:, :self.k]
        w = scores.gather(1, sel)
        if self.norm:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        margin = ranked[:, self.k - 1] - ranked[:, self.k]
        g_margin = (ranked_g[:, self.topk_group - 1] - ranked_g[:, self.topk_group]
                    if self.topk_group < self.G else torch.full_like(margin, float("inf")))
        return scores, w * self.scale, sel, margin, g_margin


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c["hidden_size"], c["moe_intermediate_size"]
        self.experts = nn.ModuleList([Expert(H, I) for _ in range(c["n_routed_experts"])])
        self.gate = TopkRouter(c)
        self.shared_experts = Expert(H, I * c["n_shared_experts"])
        self.routing = None  # the last forward's (scores [N, E], experts [N, k], margins)

    def forward(self, x):
        B, T, H = x.shape
        flat = x.reshape(-1, H)
        scores, w, sel, margin, g_margin = self.gate(flat)
        self.routing = (scores, sel, margin, g_margin, T)
        w = w.to(flat.dtype)
        out = torch.zeros_like(flat)
        for e in range(len(self.experts)):
            tok, slot = torch.where(sel == e)
            if tok.numel() == 0:
                continue
            out.index_add_(0, tok, (self.experts[e](flat[tok]) * w[tok, slot, None]).to(out.dtype))
        return (out + self.shared_experts(flat).to(out.dtype)).view(B, T, H)

    def seq_balance_loss(self):
        """DeepSeek-V3's complementary sequence-wise balance loss of the last forward (without
        alpha): mean over sequences of sum_i f_i P_i."""
        scores, sel, _, _, T = self.routing
        E, k = scores.shape[1], sel.shape[1]
        counts = F.one_hot(sel, E).sum(1).view(-1, T, E).float()  # [B, T, E]
        f = counts.sum(1) * E / (k * T)
        p = (scores / scores.sum(-1, keepdim=True)).view(-1, T, E).mean(1)
        return (f * p).sum(-1).mean()

    @torch.no_grad()
    def update_bias(self, gamma):
        """Aux-loss-free balancing: bias_i += gamma * sign(mean load - load_i)."""
        _, sel, _, _, _ = self.routing
        load = torch.bincount(sel.reshape(-1), minlength=self.gate.E).float()
        self.gate.e_score_correction_bias += gamma * torch.sign(load.mean() - load)


class DecoderLayer(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.self_attn = MLA(c)
        dense = layer < c["first_k_dense_replace"] or layer % c["moe_layer_freq"] != 0
        self.mlp = (Expert(c["hidden_size"], c["intermediate_size"]) if dense else MoE(c))
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class SharedHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class MtpLayer(DecoderLayer):
    """The MTP module (model.layers.{num_hidden_layers}): enorm, hnorm, eh_proj [H, 2H] over
    cat(enorm(embed(t_{i+1})), hnorm(h_i)), a decoder layer, shared_head.norm (the head itself
    is the main model's lm_head)."""

    def __init__(self, c, layer):
        super().__init__(c, layer)
        H, eps = c["hidden_size"], c["rms_norm_eps"]
        self.enorm = RMSNorm(H, eps)
        self.hnorm = RMSNorm(H, eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.shared_head = SharedHead(c)

    def forward(self, emb_next, h, cos, sin, mask):
        x = linear(torch.cat((self.enorm(emb_next), self.hnorm(h)), -1), self.eh_proj.weight)
        return self.shared_head.norm(super().forward(x, cos, sin, mask))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        L = c["num_hidden_layers"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        mtp = [MtpLayer(c, L + j) for j in range(c["num_nextn_predict_layers"])]
        self.layers = nn.ModuleList([DecoderLayer(c, l) for l in range(L)] + mtp)
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class DeepseekV3ForCausalLM(CausalLM):
    def __init__(self, c):
        super().__init__(c, Backbone(c), c["qk_rope_head_dim"])

    def moe_blocks(self):
        """The MoE blocks of the main layers, then the MTP module's."""
        return [l.mlp for l in self.model.layers if isinstance(l.mlp, MoE)]

    def forward(self, ids, mtp=False):
        """ids [B, T] -> main logits [B, T, V] and, with mtp, the MTP module's logits
        [B, T - 1, V] (position i predicts ids[i + 2] from h_i and ids[i + 1])."""
        B, T = ids.shape
        emb = self.model.embed_tokens(ids)
        cos, sin, mask = self.rope_tables(T, emb.dtype)
        L = self.c["num_hidden_layers"]
        x = emb
        for layer in self.model.layers[:L]:
            x = layer(x, cos, sin, mask)
        h = self.model.norm(x)
        logits = linear(h, self.lm_head.weight)
        if not mtp:
            return logits, None
        y = self.model.layers[L](emb[:, 1:], h[:, :-1], cos[:T - 1], sin[:T - 1],
                                 mask[:T - 1, :T - 1])
        return logits, linear(y, self.lm_head.weight)


# ---- checkpoint files ---------------------------------------------------------------------------


def hf_config(a, dtype):
    """config.json: every field of transformers' DeepseekV3Config (4.51, sorted keys), plus the
    keys of DeepSeek-V3's own config.json that specrun and other engines read (topk_method,
    scoring_func, moe_layer_freq, seq_aux, aux_loss_alpha)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": a.seq_aux_alpha,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "first_k_dense_replace": a.first_k_dense,
        "head_dim": a.qk_rope_head_dim,
        "hidden_act": "silu",
        "hidden_size": a.hidden,
        "initializer_range": 0.02,
        "intermediate_size": a.intermediate,
        "kv_lora_rank": a.kv_lora_rank,
        "max_position_embeddings": 1024,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": a.moe_intermediate,
        "moe_layer_freq": 1,
        "n_group": a.n_group,
        "n_routed_experts": a.experts,
        "n_shared_experts": a.shared_experts,
        "norm_topk_prob": True,
        "num_attention_heads": a.heads,
        "num_experts_per_tok": a.top_k,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": a.heads,
        "num_nextn_predict_layers": 1,
        "pretraining_tp": 1,
        "q_lora_rank": a.q_lora_rank,
        "qk_nope_head_dim": a.qk_nope_head_dim,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "rms_norm_eps": 1e-06,
        "rope_interleave": True,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "routed_scaling_factor": a.routed_scaling,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": a.topk_group,
        "topk_method": "noaux_tc",
        "torch_dtype": dtype,
        "transformers_version": "4.51.0",
        "use_cache": True,
        "v_head_dim": a.v_head_dim,
        "vocab_size": 2048,
    }


def bias_names(model):
    return {n for n in model.state_dict() if n.endswith("e_score_correction_bias")}


# ---- evaluation ---------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(model, wins, batch=8, collect=False):
    """Mean cross-entropy of the main model and of the MTP module over windows [n, seq+1]
    (float32 compute unless under autocast), the MTP module's greedy agreement with the main
    model (argmax MTP(h_i, t_{i+1}) == argmax main at i+1) and its accuracy (== t_{i+2}); with
    collect, the experts chosen per MoE block [blocks, n, seq(-1), k] and the smallest choice
    and group margins per block."""
    sums = {"ce": 0.0, "n": 0, "mtp_ce": 0.0, "mtp_n": 0, "agree": 0, "mtp_correct": 0}
    blocks = model.moe_blocks()
    sels = [[] for _ in blocks]
    margins = [[float("inf"), float("inf")] for _ in blocks]
    for i in range(0, wins.shape[0], batch):
        w = torch.from_numpy(wins[i:i + batch])
        logits, mtp = model(w[:, :-1], mtp=True)
        logits, mtp = logits.float(), mtp.float()
        V = logits.shape[-1]
        sums["ce"] += F.cross_entropy(logits.reshape(-1, V), w[:, 1:].reshape(-1),
                                      reduction="sum").item()
        sums["n"] += w[:, 1:].numel()
        sums["mtp_ce"] += F.cross_entropy(mtp.reshape(-1, V), w[:, 2:].reshape(-1),
                                          reduction="sum").item()
        sums["mtp_n"] += w[:, 2:].numel()
        draft = mtp.argmax(-1)
        sums["agree"] += int((draft == logits[:, 1:].argmax(-1)).sum())
        sums["mtp_correct"] += int((draft == w[:, 2:]).sum())
        if collect:
            for b, blk in enumerate(blocks):
                _, sel, margin, g_margin, T = blk.routing
                sels[b].append(sel.view(-1, T, sel.shape[1]).numpy().astype(np.int8))
                margins[b] = [min(margins[b][0], float(margin.min())),
                              min(margins[b][1], float(g_margin.min()))]
    out = {"loss": sums["ce"] / sums["n"], "mtp_loss": sums["mtp_ce"] / sums["mtp_n"],
           "mtp_agreement": sums["agree"] / sums["mtp_n"],
           "mtp_accuracy": sums["mtp_correct"] / sums["mtp_n"]}
    if collect:
        out["sel"] = [np.concatenate(s, 0) for s in sels]
        out["margins"] = margins
    return out


# ---- main ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap, "code-dsv3", 18.0)
    ap.add_argument("--layers", type=int, default=4, help="num_hidden_layers (the MTP module "
                    "is one more)")
    # The MLA and MoE shapes (config.json's q_lora_rank, ..., routed_scaling_factor).
    for name, value in (("q-lora-rank", 128), ("kv-lora-rank", 64), ("qk-nope-head-dim", 32),
                        ("qk-rope-head-dim", 16), ("v-head-dim", 32), ("first-k-dense", 1),
                        ("n-group", 4), ("topk-group", 2), ("shared-experts", 1),
                        ("routed-scaling", 2.5)):
        ap.add_argument("--" + name, type=type(value), default=value)
    ap.add_argument("--intermediate", type=int, default=768, help="the dense layer's")
    ap.add_argument("--bias-update", type=float, default=0.001,
                    help="gamma of the aux-loss-free balancing (DeepSeek-V3: 0.001)")
    ap.add_argument("--seq-aux-alpha", type=float, default=0.0001,
                    help="alpha of the sequence-wise balance loss (DeepSeek-V3: 0.0001)")
    ap.add_argument("--mtp-weight", type=float, default=0.3,
                    help="lambda of the MTP loss (DeepSeek-V3: 0.3, then 0.1)")
    ap.add_argument("--init", metavar="F32DIR",
                    help="continue from the float32 checkpoint of an earlier run (its --f32-out)")
    add_readme_from(ap)
    a = ap.parse_args()
    if a.readme_from:
        return rewrite_readme(a.readme_from, write_readme)
    check_budget_args(a, PROG)
    command = " ".join(["/usr/bin/python3 scripts/train_deepseek.py"] + sys.argv[1:])
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    t_start = time.time()
    train, held_w, quick_w, data_info = load_data(PROG, a)

    cfg = hf_config(a, "float32")
    model = DeepseekV3ForCausalLM(cfg)
    init_weights(model, cfg)
    earlier = read_earlier_runs(PROG, a, model) if a.init else []
    n_params = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in model.model.layers[a.layers].parameters())
    per_expert = 3 * a.hidden * a.moe_intermediate
    n_active = n_params - n_mtp - (a.layers - a.first_k_dense) * (a.experts - a.top_k) * per_expert
    print(f"{PROG}: {n_params:,} parameters ({n_mtp:,} in the MTP module; {n_active:,} of the "
          f"main model active per token), BF16 {2 * n_params / 1e6:.2f} MB", flush=True)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    blocks = model.moe_blocks()

    def step_loss(w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, mtp = model(w[:, :-1], mtp=True)
        V = logits.shape[-1]
        ce = F.cross_entropy(logits.float().reshape(-1, V), w[:, 1:].reshape(-1))
        mtp_ce = F.cross_entropy(mtp.float().reshape(-1, V), w[:, 2:].reshape(-1))
        bal = sum(b.seq_balance_loss() for b in blocks)
        return (ce + a.mtp_weight * mtp_ce + a.seq_aux_alpha * bal,
                {"ce": ce.item(), "mtp_ce": mtp_ce.item(), "bal": bal.item()})

    def after_step():
        for b in blocks:
            b.update_bias(a.bias_update)

    def quick_eval():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return evaluate(model, quick_w)["loss"]

    run = train_loop(PROG, model, opt, a, train, rng, step_loss, quick_eval, after_step)
    keep = bias_names(model)
    size, cast_ok, f32_state, bf16_state = write_both(PROG, a, model, hf_config, keep)

    # ---- evaluate (float32 compute) ----
    t_eval = time.time()
    train_w = train_windows(train, a)
    tr = evaluate(model, train_w)
    f32 = evaluate(model, held_w, collect=True)
    prompts = reference_prompts()
    greedy_f32 = [greedy(model, p["tokens"], 32) for p in prompts]
    model.load_state_dict(bf16_state)
    bf = evaluate(model, held_w, collect=True)
    greedy_bf16 = [greedy(model, p["tokens"], 32) for p in prompts]
    same_set = [float((np.sort(s32, -1) == np.sort(s16, -1)).all(-1).mean())
                for s32, s16 in zip(f32["sel"], bf["sel"])]
    stats = [expert_stats(s[None], a.experts)[0] for s in bf["sel"]]
    eval_seconds = time.time() - t_eval
    print(f"{PROG}: train loss {tr['loss']:.4f} (MTP {tr['mtp_loss']:.4f}), held-out "
          f"{f32['loss']:.4f} (MTP {f32['mtp_loss']:.4f}; agreement {f32['mtp_agreement']:.4f}) "
          f"f32 weights, {bf['loss']:.4f} (MTP {bf['mtp_loss']:.4f}; agreement "
          f"{bf['mtp_agreement']:.4f}) bf16 weights; evaluation {eval_seconds:.0f} s", flush=True)

    n_held = held_w.shape[0]
    this_run = run_record(a, command, data_info, run)
    metrics = metrics_head("code-dsv3", command, n_params,
                           {"mtp_params": n_mtp, "active_params_per_token": n_active}, size,
                           cast_ok, data_info, this_run, earlier)
    metrics.update({
        "train_loss": tr["loss"],
        "heldout_loss": f32["loss"],
        "heldout_loss_bf16_weights": bf["loss"],
        "loss_eval": f"float32 compute, {a.seq}-token windows; held-out: {n_held} "
                     f"non-overlapping windows ({n_held * a.seq} predicted tokens, "
                     f"{n_held * (a.seq - 1)} for the MTP module); train: {train_w.shape[0]} "
                     "random windows (seed 1234)",
        "mtp": {
            "what": "the MTP module at position i, given the main model's h_i (after model.norm) "
                    "and the text's t_{i+1}: agreement = P(its argmax == the main model's argmax "
                    "at i+1), accuracy = P(its argmax == t_{i+2}); loss = its cross-entropy on "
                    "t_{i+2}; float32 compute, all held-out windows",
            "train_loss": tr["mtp_loss"],
            "heldout_loss": f32["mtp_loss"],
            "heldout_loss_bf16_weights": bf["mtp_loss"],
            "agreement": f32["mtp_agreement"],
            "agreement_bf16_weights": bf["mtp_agreement"],
            "accuracy": f32["mtp_accuracy"],
            "accuracy_bf16_weights": bf["mtp_accuracy"]},
        "experts": {
            "measured_on": "held-out windows, BF16 weights (float32 compute); blocks: the MoE "
                           f"layers {a.first_k_dense}..{a.layers - 1}, then the MTP module's",
            "same_topk_set_f32_vs_bf16_weights": same_set,
            "smallest_margins_bf16": {
                "what": "per block: the smallest gap of the biased choice at the k-th expert, "
                        "and of the group scores at the topk_group-th group",
                "blocks": bf["margins"]},
            "e_score_correction_bias": [b.gate.e_score_correction_bias.tolist() for b in blocks],
            "blocks": stats},
    })
    finish_metrics(a, metrics, prompts, greedy_f32, greedy_bf16, eval_seconds, t_start,
                   write_readme)


def write_readme(a, m):
    t = m["training"]
    mt, ex = m["mtp"], m["experts"]
    usage = "\n".join(f"| {'MTP' if b == len(ex['blocks']) - 1 else a.first_k_dense + b} | "
                      f"{s['effective_experts']:.1f} | "
                      + " ".join(f"{100 * a.top_k * u:.1f}" for u in s["usage"]) + " |"
                      for b, s in enumerate(ex["blocks"]))
    planned = (f"{t['planned_steps']} steps planned from the speed of the first 10 and the "
               f"{a.minutes:g}-minute budget" if not a.steps else f"{a.steps} steps asked")
    replay = f"--steps {t['planned_steps']}"
    if t["stopped_by_budget"]:
        planned += (f"; the budget stopped it after {t['steps']} (the machine's other work slowed "
                    "it), before the cosine schedule's end")
        replay += f" --stop-after {t['steps']}"
    elif t["planned_steps"] != t["steps"]:
        replay += f" --stop-after {t['steps']}"
    text = f"""# code-dsv3: a small trained DeepSeek-V3-architecture code model with an MTP module

A real (tiny, weak) DeepSeek-V3-architecture model (MLA, the noaux_tc router with groups and a
shared expert, a dense first layer, one multi-token-prediction module) so that specrun's MTP
drafter is measured on a trained module, not a random one. Trained from scratch on the CPU by
`scripts/train_deepseek.py` on the data, split, tokenizer and recipe of `models/code-moe` and
`../shared/models` (see their READMEs). Test/demo data, not a useful language model.

## Model

Hugging Face `DeepseekV3ForCausalLM` (`model_type` deepseek_v3; `config.json` with
`DeepseekV3Config`'s fields plus DeepSeek-V3's own `topk_method`, `scoring_func`,
`moe_layer_freq`, `seq_aux`, `aux_loss_alpha`; `torch_dtype` bfloat16).

| | code-dsv3 |
|---|---|
| parameters | {m['params']:,} ({m['mtp_params']:,} in the MTP module; {m['active_params_per_token']:,} of the main model active per token) |
| num_hidden_layers | {a.layers} (layer 0 dense, `first_k_dense_replace` {a.first_k_dense}; MoE after) + 1 MTP module (`num_nextn_predict_layers` 1, layer {a.layers}) |
| hidden_size / vocab_size | {a.hidden} / 2048 (the shared sentencepiece tokenizer) |
| MLA | {a.heads} heads, q_lora_rank {a.q_lora_rank}, kv_lora_rank {a.kv_lora_rank}, qk_nope_head_dim {a.qk_nope_head_dim}, qk_rope_head_dim {a.qk_rope_head_dim}, v_head_dim {a.v_head_dim}; rope_interleave true, rope_theta 10000, no rope_scaling |
| dense MLP | intermediate_size {a.intermediate} |
| MoE | {a.experts} routed experts, top-{a.top_k}, n_group {a.n_group}, topk_group {a.topk_group}, {a.shared_experts} shared (`n_shared_experts`), moe_intermediate_size {a.moe_intermediate}, routed_scaling_factor {a.routed_scaling}, norm_topk_prob true, noaux_tc / sigmoid |
| rms_norm_eps | 1e-6 |
| tie_word_embeddings | false |
| model.safetensors | {m['bf16_safetensors_bytes']:,} bytes: BF16 (round to nearest even from float32; equals torch's cast: {m['bf16_equals_torch_cast']}), `e_score_correction_bias` F32 as in DeepSeek-V3's checkpoints |

The MTP module is `model.layers.{a.layers}.*`: `enorm`, `hnorm`, `eh_proj` [{a.hidden}, {2 * a.hidden}]
(input columns 0..{a.hidden - 1} the embedding, {a.hidden}..{2 * a.hidden - 1} the hidden state), a full decoder layer
(MLA + MoE), `shared_head.norm`. `embed_tokens` and the output head are the main model's
(`model.embed_tokens.weight`, `lm_head.weight`): no copy is written into layer {a.layers}. Its forward, as
trained: x = eh_proj(cat(enorm(embed(t_{{i+1}})), hnorm(h_i))) with h_i the main model's hidden
state after its final norm `model.norm`, the decoder layer at RoPE position i, logits =
lm_head(shared_head.norm(y)). The float32 weights are kept outside the repository
(`{a.f32_out}`, same layout, `torch_dtype` float32).

## Training

* Loss: cross-entropy + {a.mtp_weight} x the MTP module's cross-entropy on t_{{i+2}} (DeepSeek-V3
  report, lambda 0.3) + {a.seq_aux_alpha} x the sequence-wise balance loss (summed over MoE blocks);
  the router bias `e_score_correction_bias` is updated after every step by
  +{a.bias_update} x sign(mean load - load) (DeepSeek-V3's aux-loss-free balancing), not by gradient.
* Recipe: code-moe's (AdamW 0.9/0.95, weight decay 0.1 on matrices, clip 1.0, warmup
  {a.warmup} steps then cosine to 10% of the peak lr {a.lr:g}, batch {a.batch} x {a.seq}, bf16 autocast
  with float32 master weights, router in float32), {a.threads} CPU thread.
* Run: {t['steps']} steps, {t['tokens']:,} tokens ({t['epochs']:.2f} epochs) in {t['seconds'] / 60:.1f} minutes
  ({planned}).
  Command: `{m['command']}` (add `{replay}` to replay the same steps).

| loss (nats/token) | float32 weights | BF16 weights |
|---|---|---|
| train, main (256 random windows, seed 1234) | {m['train_loss']:.3f} | |
| held-out, main (all non-overlapping {a.seq}-token windows) | {m['heldout_loss']:.3f} | {m['heldout_loss_bf16_weights']:.3f} |
| train, MTP module (t_{{i+2}}) | {mt['train_loss']:.3f} | |
| held-out, MTP module (t_{{i+2}}) | {mt['heldout_loss']:.3f} | {mt['heldout_loss_bf16_weights']:.3f} |

(code-moe: held-out 4.020; the dense code-target: 2.853.)

## The MTP module on held-out text

All held-out windows, float32 compute, the text's t_{{i+1}} as the module's input token:

| | float32 weights | BF16 weights |
|---|---|---|
| greedy agreement with the main model (argmax MTP(h_i, t_{{i+1}}) == main argmax at i+1) | {mt['agreement']:.4f} | {mt['agreement_bf16_weights']:.4f} |
| accuracy (argmax == t_{{i+2}}) | {mt['accuracy']:.4f} | {mt['accuracy_bf16_weights']:.4f} |

The agreement is a proxy of the first drafted token's acceptance under greedy verification
(in decoding, t_{{i+1}} is the main model's own greedy token, not the text's). The module's loss
on t_{{i+2}} is below the main model's on t_{{i+1}}: it sees the same tokens (t_{{<=i+1}}) through one
more decoder layer, and at this size depth still pays.

## Experts

Held-out windows, BF16 weights. Effective experts = exp(entropy of the usage); usage in % of
tokens (a row sums to {100 * a.top_k}%), experts 0..{a.experts - 1}:

| block | effective experts (of {a.experts}) | usage % |
|---|---|---|
{usage}

Top-{a.top_k} sets equal with float32 and BF16 weights: {', '.join(f'{s:.4f}' for s in ex['same_topk_set_f32_vs_bf16_weights'])} (per block).
Smallest margins of the biased choice (k-th expert, topk_group-th group), BF16 weights, per block:
{'; '.join(f'{x:.2e} / {y:.2e}' for x, y in ex['smallest_margins_bf16']['blocks'])}. `metrics.json` has the final biases.

## Checks

* `metrics.json`'s `reference` holds 32 greedy tokens of {len(m['reference']['prompt_ids'])} held-out prompts (float32 and BF16
  weights, the torch model in memory).
* `tests/e2e/code_dsv3.sh` (ctest `code_dsv3`): the layout above; specrun's greedy tokens on 3
  of those prompts equal `reference.greedy_bf16_weights`, and its logits at every position agree
  with the float64 numpy reference `tests/e2e/deepseek_reference.py` (written from Hugging
  Face's modeling_deepseek_v3) to a relative L2 below 1e-5.
* The float32 copy, the same way for all {len(m['reference']['prompt_ids'])} prompts (32 tokens each):
  `specrun generate {a.f32_out} --tokens PROMPT --max-new-tokens 32 --dump-logits L.bin` then
  `tests/e2e/deepseek_reference.py {a.f32_out} L.bin PROMPT,GENERATED --tolerance 1e-5
  --min-margin 0`.

## Files

```
config.json              HF DeepseekV3ForCausalLM config (torch_dtype bfloat16)
model.safetensors        BF16 weights (e_score_correction_bias F32), HF / DeepSeek-V3 names
generation_config.json   bos 1, eos 2 (as ../shared/models/code-target)
tokenizer.model          copy of ../shared/models/tokenizer/tokenizer.model
tokenizer_config.json    as ../shared/models/code-target
metrics.json             losses, MTP agreement, training run, experts, greedy references
```
"""
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
