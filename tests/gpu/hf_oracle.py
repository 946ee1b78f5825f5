#!/usr/bin/env python3
"""Independent oracle for specrun's model: its logits and greedy tokens against other code.

usage: hf_oracle.py --specrun BIN --model DIR [--model DIR ...] --out RESULT.json
                    [--backend cuda] [--prompts 8] [--new-tokens 32] [--device cuda] [--seed 3]

For every model folder (Hugging Face layout: config.json + model.safetensors, or sharded with
model.safetensors.index.json; LlamaForCausalLM, F32/BF16/F16 weights):

1. Prompts: --prompts random token sequences (seeded by --seed and the vocabulary size), the
   first id 1 (BOS), the others uniform in [3, vocab-1], lengths uniform in 8..60 (so that on
   the GPU the prompt pass takes specrun's GEMV path, not the cuBLAS prefill).
2. specrun: `BIN generate DIR --tokens ... --max-new-tokens N --backend B --dump-logits FILE`,
   one process per prompt (no mpirun). The first line of stdout holds the N generated ids. The
   dump (little-endian "SRLG", u32 version 1, u32 rows, u32 vocab, f32 logits[rows][vocab],
   rows = prompt + N - 1) holds the logits of every position, prompt first, then each
   generated token fed back. Self-check: every generated token is the argmax (lowest id on
   ties) of the dumped row before it.
3. Oracle A ("hf", primary): transformers LlamaForCausalLM, weights upcast to float32,
   attn_implementation="eager", TF32 off (checked with a test matmul against float64), on
   --device. specrun keeps BF16 weights but computes in float32, so both compute the same
   function. a) Teacher-forced: one forward pass over prompt + specrun's generated tokens;
   every row is compared with specrun's row: relative L2 error ||specrun - oracle|| / ||oracle||
   (max and median over all rows; any NaN/inf fails); tolerance 1e-3. How many prompts'
   tokens all equal the argmax of the oracle row before them is reported (tf_greedy_equal,
   information only). b) Greedy: HF generate(do_sample=
   False, max_new_tokens=N, min_new_tokens=N) with the generation config's eos_token_id
   cleared (no early stop and no EOS suppression, like specrun); sequences equal to specrun's
   are counted. (Should generate() raise, the teacher-forced argmax of a) stands in for it,
   labelled so, and the error is recorded.)
4. Oracle B ("ref"): a pure-torch Llama forward written here (own safetensors reader; BF16 bits
   shifted into float32) with HF LlamaForCausalLM semantics: RMSNorm
   (w * x * rsqrt(mean(x^2) + eps)), rotate_half RoPE with inv_freq = 1/theta^(arange(0,d,2)/d)
   (rope type "default" or "llama3"; rope_theta / rope_parameters; head_dim; tie_word_embeddings),
   GQA (query head h uses kv head h // (heads/kv_heads)), causal softmax with scale
   1/sqrt(head_dim), MLP down(silu(gate(x)) * up(x)), final norm, lm_head. float64 on the CPU
   when the model has < 50M parameters (then it always runs, as a second independent check),
   else float32 on --device (then only when oracle A did not pass). Its greedy check is
   teacher-forced: specrun's continuation is the oracle's greedy continuation exactly when each
   generated token is the argmax of the oracle's row before it (causality: a row depends only
   on the tokens up to it), and the first position where that fails is where the two greedy
   runs part.
   Other architectures are refused with the config field named.
5. A sequence that differs: at the first differing position p, with o = the oracle's logits
   row there (same prefix in both), a = specrun's token, b = the oracle's: if
   |o[a] - o[b]| < 1e-4 * max|o| it is a near-tie (reported, not a failure), else a failure.

A model passes when specrun ran for every prompt and its dump is self-consistent, at least one
oracle finished both checks, and no oracle that ran reports a failure (tolerance exceeded,
non-finite value, greedy mismatch that is not a near-tie). A stage that raises is recorded in
"errors" and the script goes on. The JSON also keeps each prompt's length and specrun's ids.
Exit status 0 when every model passes, 1 otherwise.
"""

import argparse
import json
import math
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

try:
    import torch
except Exception as exc:  # noqa: BLE001 - recorded, the script still writes its JSON
    torch = None
    TORCH_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
else:
    TORCH_IMPORT_ERROR = None

REL_L2_TOL = 1e-3
NEAR_TIE_REL = 1e-4
SMALL_MODEL_PARAMS = 50_000_000
SUPPORTED_ARCHS = ("LlamaForCausalLM",)


def log(*parts):
    print(*parts, flush=True)


def err_text(exc):
    """One-paragraph error text for the JSON: type, message, and the innermost frames."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tb[-3:]).strip()
    return f"{type(exc).__name__}: {exc} | {tail[-1500:]}"


# ----------------------------------------------------------------------------------------------
# safetensors (own reader) and config


def safetensors_files(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return [single]
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return [os.path.join(model_dir, name) for name in sorted(set(weight_map.values()))]
    raise FileNotFoundError(f"{model_dir} has neither model.safetensors nor "
                            "model.safetensors.index.json")


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return 8 + n, header


def count_params(model_dir):
    total = 0
    for path in safetensors_files(model_dir):
        _, header = read_header(path)
        for info in header.values():
            total += int(np.prod(info["shape"], dtype=np.int64))
    return total


def weight_dtypes(model_dir):
    seen = set()
    for path in safetensors_files(model_dir):
        _, header = read_header(path)
        seen.update(info["dtype"] for info in header.values())
    return sorted(seen)


def load_tensors(model_dir, np_dtype):
    """name -> numpy array of np_dtype (float64 or float32), read with this file's own parser."""
    out = {}
    for path in safetensors_files(model_dir):
        start, header = read_header(path)
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        for name, info in header.items():
            b, e = info["data_offsets"]
            buf = raw[start + b:start + e]
            shape = tuple(info["shape"])
            dt = info["dtype"]
            if dt == "BF16":
                # BF16 = the upper 16 bits of a float32: widen exactly by shifting.
                bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
                arr = bits.view(np.float32)
            elif dt == "F32":
                arr = np.frombuffer(buf, dtype="<f4")
            elif dt == "F16":
                arr = np.frombuffer(buf, dtype="<f2")
            elif dt == "F64":
                arr = np.frombuffer(buf, dtype="<f8")
            else:
                raise ValueError(f"{path}: tensor {name} has dtype {dt}; this oracle reads "
                                 "F32, BF16, F16 and F64 only")
            out[name] = arr.reshape(shape).astype(np_dtype)
        del raw
    return out


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def check_arch(cfg):
    archs = cfg.get("architectures") or []
    if not any(a in SUPPORTED_ARCHS for a in archs):
        raise ValueError(f"config.json \"architectures\" is {archs}: this oracle implements "
                         f"{', '.join(SUPPORTED_ARCHS)} only")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"config.json \"hidden_act\" is {act!r}: only silu is implemented")


def rope_settings(cfg):
    """(theta, rope dict or None) from rope_parameters (transformers v5) or rope_scaling."""
    params = cfg.get("rope_parameters")
    scaling = cfg.get("rope_scaling")
    theta = cfg.get("rope_theta")
    rope = None
    if isinstance(params, dict):
        rope = params
        if params.get("rope_theta") is not None:
            theta = params["rope_theta"]
    if isinstance(scaling, dict):
        rope = scaling
    if theta is None:
        theta = 10000.0
    kind = None
    if rope is not None:
        kind = rope.get("rope_type", rope.get("type", "default"))
    if kind in (None, "default"):
        return float(theta), None
    if kind == "llama3":
        return float(theta), rope
    raise ValueError(f"config.json rope type {kind!r}: this oracle implements default and llama3")


def inv_freq(cfg, head_dim):
    theta, rope = rope_settings(cfg)
    f = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    if rope is not None:  # llama3, as HF _compute_llama3_parameters
        factor = float(rope["factor"])
        low = float(rope["low_freq_factor"])
        high = float(rope["high_freq_factor"])
        old = float(rope["original_max_position_embeddings"])
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / f
        scaled = np.where(wl > low_wl, f / factor, f)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        f = np.where(medium, smoothed, scaled)
    return f


# ----------------------------------------------------------------------------------------------
# Oracle B: pure-torch Llama forward


class RefLlama:
    def __init__(self, model_dir, dtype, device):
        cfg = load_config(model_dir)
        check_arch(cfg)
        self.cfg = cfg
        self.dtype, self.device = dtype, device
        self.H = int(cfg["hidden_size"])
        self.L = int(cfg["num_hidden_layers"])
        self.nh = int(cfg["num_attention_heads"])
        self.nkv = int(cfg.get("num_key_value_heads") or self.nh)
        self.hd = int(cfg.get("head_dim") or self.H // self.nh)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.vocab = int(cfg["vocab_size"])
        if self.nh % self.nkv:
            raise ValueError(f"num_attention_heads {self.nh} not a multiple of kv heads {self.nkv}")
        np_dtype = np.float64 if dtype == torch.float64 else np.float32
        raw = load_tensors(model_dir, np_dtype)
        self.w = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in raw.items()}
        del raw
        if "lm_head.weight" not in self.w:
            if not cfg.get("tie_word_embeddings", False):
                raise ValueError("no lm_head.weight and tie_word_embeddings is false")
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        elif cfg.get("tie_word_embeddings", False):
            # HF ties the head to the embedding when the flag is set, whatever the file holds.
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.inv_freq = torch.tensor(inv_freq(cfg, self.hd), dtype=torch.float64)

    def _lin(self, x, name):
        y = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def _rms(self, x, name):
        return self.w[name] * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps))

    @staticmethod
    def _rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, ids):
        """logits [T, vocab] for token ids (list of int), positions 0..T-1."""
        T = len(ids)
        dev, dt = self.device, self.dtype
        pos = torch.arange(T, dtype=torch.float64)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos().to(dev, dt)[:, None, :]  # [T, 1, hd]
        sin = emb.sin().to(dev, dt)[:, None, :]
        mask = torch.full((T, T), float("-inf"), dtype=dt, device=dev).triu(1)
        rep = self.nh // self.nkv
        scale = 1.0 / math.sqrt(self.hd)
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids, device=dev)]
        for layer in range(self.L):
            p = f"model.layers.{layer}."
            h = self._rms(x, p + "input_layernorm.weight")
            q = self._lin(h, p + "self_attn.q_proj").view(T, self.nh, self.hd)
            k = self._lin(h, p + "self_attn.k_proj").view(T, self.nkv, self.hd)
            v = self._lin(h, p + "self_attn.v_proj").view(T, self.nkv, self.hd)
            q = q * cos + self._rotate_half(q) * sin
            k = k * cos + self._rotate_half(k) * sin
            k = k.repeat_interleave(rep, dim=1)  # head h -> kv head h // rep
            v = v.repeat_interleave(rep, dim=1)
            scores = torch.einsum("thd,shd->hts", q, k) * scale + mask
            attn = torch.softmax(scores, dim=-1)
            o = torch.einsum("hts,shd->thd", attn, v).reshape(T, self.nh * self.hd)
            x = x + self._lin(o, p + "self_attn.o_proj")
            h = self._rms(x, p + "post_attention_layernorm.weight")
            gate = self._lin(h, p + "mlp.gate_proj")
            up = self._lin(h, p + "mlp.up_proj")
            x = x + self._lin(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj")
        x = self._rms(x, "model.norm.weight")
        return x @ self.w["lm_head.weight"].T


# ----------------------------------------------------------------------------------------------
# specrun


def make_prompts(n, vocab, seed, max_pos, new_tokens):
    rng = np.random.default_rng([seed, vocab])
    longest = max(2, min(60, max_pos - new_tokens))
    prompts = []
    for _ in range(n):
        length = int(rng.integers(min(8, longest), longest + 1))
        body = rng.integers(3, vocab, size=length - 1)  # ids in [3, vocab-1]
        prompts.append([1] + [int(t) for t in body])
    return prompts


def read_dump(path):
    with open(path, "rb") as f:
        head = f.read(16)
        if len(head) != 16 or head[:4] != b"SRLG":
            raise ValueError(f"{path}: not a --dump-logits file (magic {head[:4]!r})")
        version, rows, vocab = struct.unpack("<III", head[4:])
        if version != 1:
            raise ValueError(f"{path}: dump version {version}, expected 1")
        data = np.fromfile(f, dtype="<f4")
    if data.size != rows * vocab:
        raise ValueError(f"{path}: {data.size} floats, header says {rows} x {vocab}")
    return data.reshape(rows, vocab)


def run_specrun(binary, model_dir, prompt, new_tokens, backend, dump_path, timeout):
    cmd = [binary, "generate", model_dir, "--tokens", ",".join(map(str, prompt)),
           "--max-new-tokens", str(new_tokens), "--backend", backend, "--dump-logits", dump_path]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    seconds = time.time() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"specrun exit {proc.returncode}: {proc.stderr.strip()[-1500:]} "
                           f"(stdout: {proc.stdout.strip()[-300:]})")
    ids = None
    for line in proc.stdout.splitlines():  # the first line of ids; tolerate stray lines before
        parts = line.split()
        if parts and all(p.isdigit() for p in parts):
            ids = [int(p) for p in parts]
            break
    if ids is None or len(ids) != new_tokens:
        raise RuntimeError(f"specrun printed no line of {new_tokens} ids: {proc.stdout[:500]!r}")
    logits = read_dump(dump_path)
    return ids, logits, seconds


def first_argmax(row):
    return int(np.argmax(row))  # numpy: first (lowest) index on ties


# ----------------------------------------------------------------------------------------------
# comparisons


def rel_l2_rows(spec, oracle):
    """Per-row ||spec - oracle|| / ||oracle|| in float64; inf where a value is not finite."""
    a = spec.astype(np.float64)
    b = oracle.astype(np.float64)
    finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    num = np.linalg.norm(np.where(np.isfinite(a - b), a - b, 0.0), axis=1)
    den = np.linalg.norm(np.where(np.isfinite(b), b, 0.0), axis=1)
    rel = np.where(den > 0, num / np.maximum(den, 1e-300), num)
    return np.where(finite, rel, np.inf), int((~finite).sum())


def classify_mismatch(prompt_index, position, row, spec_tok, oracle_tok):
    row = row.astype(np.float64)
    top2 = np.sort(row)[-2:]
    scale = float(np.max(np.abs(row)))
    gap = abs(float(row[spec_tok]) - float(row[oracle_tok]))
    return {"prompt": prompt_index, "position": position, "specrun_token": int(spec_tok),
            "oracle_token": int(oracle_tok), "gap": gap, "top2_gap": float(top2[1] - top2[0]),
            "max_abs_logit": scale, "near_tie": bool(gap < NEAR_TIE_REL * scale)}


class OracleResult:
    def __init__(self, name, device, dtype):
        self.d = {"oracle": name, "device": str(device), "dtype": str(dtype), "ran": False,
                  "logits_checked": False, "greedy_checked": False, "greedy_kind": None,
                  "rows_compared": 0, "rel_l2_max": None, "rel_l2_median": None,
                  "rel_l2_max_at": None, "nonfinite_rows": 0, "greedy_total": 0,
                  "greedy_equal": 0, "near_ties": [], "mismatches": [], "failures": [],
                  "errors": [], "seconds": 0.0, "pass": False}
        self.rels = []

    def add_rows(self, prompt_index, spec_rows, oracle_rows):
        rel, nonfinite = rel_l2_rows(spec_rows, oracle_rows)
        self.d["nonfinite_rows"] += nonfinite
        if nonfinite:
            self.d["failures"].append(f"prompt {prompt_index}: {nonfinite} rows with NaN/inf")
        worst = int(np.argmax(rel))
        if self.d["rel_l2_max"] is None or rel[worst] > self.d["rel_l2_max"]:
            self.d["rel_l2_max"] = float(rel[worst])
            self.d["rel_l2_max_at"] = {"prompt": prompt_index, "row": worst}
        self.rels.extend(rel.tolist())
        self.d["rows_compared"] += len(rel)

    def add_greedy(self, prompt_index, plen, spec_ids, oracle_ids, oracle_rows, label):
        """oracle_rows: the oracle's teacher-forced rows on specrun's sequence."""
        self.d["greedy_total"] += 1
        if list(spec_ids) == list(oracle_ids):
            self.d["greedy_equal"] += 1
            return
        j = next((i for i, (a, b) in enumerate(zip(spec_ids, oracle_ids)) if a != b), None)
        if j is None:
            self.d["failures"].append(f"prompt {prompt_index} ({label}): lengths differ, "
                                      f"specrun {len(spec_ids)} vs oracle {len(oracle_ids)}")
            return
        m = classify_mismatch(prompt_index, j, oracle_rows[plen - 1 + j], spec_ids[j],
                              oracle_ids[j])
        m["check"] = label
        if m["near_tie"]:
            self.d["near_ties"].append(m)
        else:
            self.d["mismatches"].append(m)
            self.d["failures"].append(
                f"prompt {prompt_index} ({label}): greedy differs at new token {j} "
                f"(specrun {m['specrun_token']}, oracle {m['oracle_token']}, gap {m['gap']:.3g} "
                f">= {NEAR_TIE_REL:g} * {m['max_abs_logit']:.3g})")

    def finish(self, n_prompts):
        if self.rels:
            self.d["rel_l2_median"] = float(np.median(self.rels))
        if self.d["rel_l2_max"] is not None and self.d["rel_l2_max"] > REL_L2_TOL:
            self.d["failures"].append(f"rel L2 max {self.d['rel_l2_max']:.3g} > {REL_L2_TOL:g} "
                                      f"at {self.d['rel_l2_max_at']}")
        self.d["logits_checked"] = self.d["rows_compared"] > 0 and len(self.rels) > 0
        self.d["greedy_checked"] = self.d["greedy_total"] == n_prompts and n_prompts > 0
        self.d["pass"] = (self.d["ran"] and self.d["logits_checked"] and self.d["greedy_checked"]
                          and not self.d["failures"])
        return self.d


def teacher_forced_greedy(prompt, spec_ids, oracle_rows):
    """The oracle's greedy continuation as far as it agrees with specrun's, then its argmax."""
    plen = len(prompt)
    out = []
    for j, tok in enumerate(spec_ids):
        best = first_argmax(oracle_rows[plen - 1 + j])
        out.append(best)
        if best != tok:
            break
    return out + list(spec_ids[len(out):])  # equal length; differs at the first split only


# ----------------------------------------------------------------------------------------------
# Oracle A: transformers


def strict_fp32(device):
    """Keeps float32 matmuls in full float32 (no TF32) and measures it: relative error of a
    float32 matmul against float64. PyTorch's default is already no TF32 for matmuls, so a
    setting is written only when TF32 is on, and through one API only (torch >= 2.9 raises on
    a mix of its legacy allow_tf32 flags and the new fp32_precision ones)."""
    info = {}
    try:
        matmul = torch.backends.cuda.matmul
        try:  # not hasattr: torch 1.x's cuBLAS module raises AssertionError for unknown names
            current = getattr(matmul, "fp32_precision")
            new_api = True
        except Exception:  # noqa: BLE001
            new_api = False
        if new_api:
            info["fp32_precision_before"] = str(current)
            if current == "tf32":
                matmul.fp32_precision = "ieee"
                info["set"] = "torch.backends.cuda.matmul.fp32_precision = 'ieee'"
        else:
            info["allow_tf32_before"] = bool(matmul.allow_tf32)
            if matmul.allow_tf32:
                matmul.allow_tf32 = False
                info["set"] = "torch.backends.cuda.matmul.allow_tf32 = False"
            if torch.get_float32_matmul_precision() != "highest":
                torch.set_float32_matmul_precision("highest")
                info["set_precision"] = "torch.set_float32_matmul_precision('highest')"
    except Exception as exc:  # noqa: BLE001
        info["error"] = err_text(exc)
    try:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(512, 512, generator=g, dtype=torch.float64)
        b = torch.randn(512, 512, generator=g, dtype=torch.float64)
        exact = a @ b
        got = (a.float().to(device) @ b.float().to(device)).double().cpu()
        rel = float((got - exact).norm() / exact.norm())
        info["matmul_rel_err"] = rel
        info["tf32_suspected"] = rel > 1e-5  # float32: ~1e-7; TF32: ~1e-4
    except Exception as exc:  # noqa: BLE001
        info["matmul_check_error"] = err_text(exc)
    return info


def from_pretrained_any(cls, model_dir, dtype, **kwargs):
    """cls.from_pretrained with dtype= (transformers >= 4.56, v5) or torch_dtype= (older); an
    option this transformers refuses with TypeError is dropped in a later attempt."""
    attempts = [("dtype", True), ("dtype", False), ("torch_dtype", True), ("torch_dtype", False)]
    errors = []
    for dtype_kw, loading_info in attempts:
        kw = dict(kwargs, **{dtype_kw: dtype})
        if loading_info:
            kw["output_loading_info"] = True
        try:
            res = cls.from_pretrained(model_dir, **kw)
        except TypeError as exc:
            errors.append(f"{dtype_kw}=, output_loading_info={loading_info}: {exc}")
            continue
        if loading_info and isinstance(res, tuple):
            model, info = res
        else:
            model, info = res, None
        return model, info, {"dtype_kwarg": dtype_kw, "refused": errors}
    raise TypeError("from_pretrained refused every form: " + " || ".join(errors))


def load_hf_model(model_dir, device, attn="eager", dtype_name="float32"):
    from transformers import LlamaForCausalLM  # noqa: E402 - optional dependency
    dtype = getattr(torch, dtype_name)
    model, info, notes = from_pretrained_any(LlamaForCausalLM, model_dir, dtype,
                                             attn_implementation=attn)
    warnings = []
    try:
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            vals = info.get(key) if isinstance(info, dict) else getattr(info, key, None)
            vals = [str(v) for v in (vals or [])]
            if vals:
                notes[key] = vals[:20]
                warnings.append(f"transformers load: {key} {vals[:5]}")
    except Exception as exc:  # noqa: BLE001 - informational only
        notes["loading_info_error"] = str(exc)
    if next(model.parameters()).dtype != dtype:  # a transformers that ignored dtype=
        model = model.to(dtype)
        notes["cast_after_load"] = True
    model = model.to(device).eval()
    notes["attn_implementation"] = str(getattr(model.config, "_attn_implementation", attn))
    return model, notes, warnings


def hf_no_eos(model):
    """No EOS stopping and no EOS suppression: clear eos in the model's generation config (a
    pad id is set so that nothing falls back to the eos id for padding)."""
    gc = model.generation_config
    gc.eos_token_id = None
    if gc.pad_token_id is None:
        gc.pad_token_id = 0
    gc.do_sample = False


def hf_generate(model, prompt, new_tokens, device):
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, num_beams=1,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    seq = out.sequences if hasattr(out, "sequences") else out
    return [int(t) for t in seq[0, len(prompt):].tolist()]


def hf_rows(model, seq, device):
    ids = torch.tensor([seq], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    return out.logits[0].double().cpu().numpy()


# ----------------------------------------------------------------------------------------------


def check_model(args, model_dir, tmpdir, versions):
    res = {"model": model_dir, "errors": [], "failures": [], "pass": False, "oracles": {},
           "oracle_used": None}
    log(f"== {model_dir}")
    try:
        cfg = load_config(model_dir)
        check_arch(cfg)
        rope_settings(cfg)
        params = count_params(model_dir)
        vocab = int(cfg["vocab_size"])
        max_pos = int(cfg.get("max_position_embeddings", 2048))
        res["config"] = {"architectures": cfg.get("architectures"), "params": params,
                         "weight_dtypes": weight_dtypes(model_dir), "vocab": vocab,
                         "hidden": cfg.get("hidden_size"), "layers": cfg.get("num_hidden_layers")}
        log(f"   {params / 1e6:.2f}M parameters, weights {res['config']['weight_dtypes']}")
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"config: {err_text(exc)}")
        return res

    prompts = make_prompts(args.prompts, vocab, args.seed, max_pos, args.new_tokens)
    N = args.new_tokens
    res["prompts"] = [{"len": len(p)} for p in prompts]

    # specrun
    spec = []
    t0 = time.time()
    for i, prompt in enumerate(prompts):
        dump = os.path.join(tmpdir, f"dump_{abs(hash(model_dir))}_{i}.bin")
        try:
            ids, rows, secs = run_specrun(args.specrun, model_dir, prompt, N, args.backend, dump,
                                          args.timeout)
            if rows.shape != (len(prompt) + N - 1, vocab):
                raise ValueError(f"dump shape {rows.shape}, expected "
                                 f"{(len(prompt) + N - 1, vocab)}")
            bad = [j for j in range(N) if first_argmax(rows[len(prompt) - 1 + j]) != ids[j]]
            if bad:
                res["failures"].append(f"prompt {i}: specrun's token {bad[0]} is not the argmax "
                                       f"of its own dumped row ({len(bad)} such tokens)")
            spec.append((ids, rows))
            res["prompts"][i]["specrun_ids"] = ids
            log(f"   specrun prompt {i}: len {len(prompt)}, {secs:.2f} s, ids {ids[:8]}...")
        except Exception as exc:  # noqa: BLE001
            res["errors"].append(f"specrun prompt {i}: {err_text(exc)}")
            spec.append(None)
            log(f"   specrun prompt {i}: ERROR {exc}")
        finally:
            if os.path.exists(dump):
                os.remove(dump)
    res["specrun_seconds"] = round(time.time() - t0, 3)
    res["specrun_ok"] = sum(s is not None for s in spec)
    if res["specrun_ok"] == 0:
        res["errors"].append("specrun produced nothing to compare")
        return res

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        res["errors"].append(f"--device {device}: torch.cuda.is_available() is false; "
                             "the oracles run on the CPU")
        device = "cpu"

    # Oracle A: transformers
    hf = OracleResult("hf", device, "float32")
    if versions.get("transformers_error"):
        hf.d["errors"].append(f"transformers not importable: {versions['transformers_error']}")
    else:
        t0 = time.time()
        model = None
        try:
            hf.d["tf32"] = strict_fp32(device)
            model, notes, load_warnings = load_hf_model(model_dir, device)
            hf.d["load"] = notes
            hf.d["errors"].extend(load_warnings)  # missing weights would show in the numbers
            hf.d["ran"] = True
            log(f"   hf: loaded ({notes})")
        except Exception as exc:  # noqa: BLE001
            hf.d["errors"].append(f"load: {err_text(exc)}")
            log(f"   hf: load failed: {exc}")
        if model is not None:
            hf.d["greedy_kind"] = "transformers generate (eos cleared); plus teacher-forced argmax"
            tf_equal = 0
            try:
                hf_no_eos(model)
            except Exception as exc:  # noqa: BLE001
                hf.d["errors"].append(f"generation config: {err_text(exc)}")
            for i, prompt in enumerate(prompts):
                if spec[i] is None:
                    continue
                ids, rows = spec[i]
                plen = len(prompt)
                orows = None
                try:
                    orows = hf_rows(model, prompt + ids, device)[:plen + N - 1]
                    hf.add_rows(i, rows, orows)
                    tf = teacher_forced_greedy(prompt, ids, orows)
                    tf_equal += int(tf == ids)
                except Exception as exc:  # noqa: BLE001
                    hf.d["errors"].append(f"forward prompt {i}: {err_text(exc)}")
                try:
                    gen = hf_generate(model, prompt, N, device)
                    if len(gen) != N:
                        hf.d["failures"].append(f"prompt {i}: generate returned {len(gen)} "
                                                f"tokens, not {N} (stopped early?)")
                    if orows is not None:
                        hf.add_greedy(i, plen, ids, gen, orows, "generate")
                except Exception as exc:  # noqa: BLE001
                    hf.d["errors"].append(f"generate prompt {i}: {err_text(exc)}")
                    if orows is not None:  # still a greedy check: the teacher-forced argmax
                        hf.add_greedy(i, plen, ids, teacher_forced_greedy(prompt, ids, orows),
                                      orows, "teacher-forced (generate failed)")
            hf.d["tf_greedy_equal"] = tf_equal
            del model
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        hf.d["seconds"] = round(time.time() - t0, 3)
    res["oracles"]["hf"] = hf.finish(res["specrun_ok"])

    # Oracle B: own forward
    small = params < SMALL_MODEL_PARAMS
    ref_device = "cpu" if small else device
    ref = OracleResult("ref", ref_device, "float64" if small else "float32")
    if not small and res["oracles"]["hf"]["pass"]:
        ref.d["skipped"] = (f"{params / 1e6:.0f}M parameters (>= 50M) and oracle A passed")
    else:
        t0 = time.time()
        try:
            if ref_device.startswith("cuda"):
                strict_fp32(ref_device)
            ref_model = RefLlama(model_dir, torch.float64 if small else torch.float32, ref_device)
            ref.d["ran"] = True
            ref.d["greedy_kind"] = "teacher-forced argmax (equivalent to greedy, see docstring)"
            for i, prompt in enumerate(prompts):
                if spec[i] is None:
                    continue
                ids, rows = spec[i]
                plen = len(prompt)
                try:
                    with torch.no_grad():
                        orows = ref_model.forward(prompt + ids)[:plen + N - 1]
                    orows = orows.double().cpu().numpy()
                    ref.add_rows(i, rows, orows)
                    ref.add_greedy(i, plen, ids, teacher_forced_greedy(prompt, ids, orows), orows,
                                   "teacher-forced")
                except Exception as exc:  # noqa: BLE001
                    ref.d["errors"].append(f"forward prompt {i}: {err_text(exc)}")
            del ref_model
        except Exception as exc:  # noqa: BLE001
            ref.d["errors"].append(f"load: {err_text(exc)}")
            log(f"   ref: load failed: {exc}")
        ref.d["seconds"] = round(time.time() - t0, 3)
    res["oracles"]["ref"] = ref.finish(res["specrun_ok"])

    # verdict
    ran = [o for o in res["oracles"].values() if o["ran"]]
    complete = [o for o in ran if o["logits_checked"] and o["greedy_checked"]]
    for o in ran:
        res["failures"].extend(f"{o['oracle']}: {f}" for f in o["failures"])
        res["errors"].extend(f"{o['oracle']}: {e}" for e in o["errors"])
    for o in res["oracles"].values():
        if not o["ran"]:
            res["errors"].extend(f"{o['oracle']} (did not run): {e}" for e in o["errors"])
    primary = next((o for o in complete if o["oracle"] == "hf"), complete[0] if complete else None)
    if primary is None:
        res["errors"].append("no oracle completed both checks")
    else:
        res["oracle_used"] = primary["oracle"]
        for key in ("rows_compared", "rel_l2_max", "rel_l2_median", "greedy_equal",
                    "greedy_total"):
            res[key] = primary[key]
        res["near_ties"] = len(primary["near_ties"])
    res["specrun_complete"] = res["specrun_ok"] == len(prompts)
    if not res["specrun_complete"]:
        res["failures"].append(f"specrun ran for {res['specrun_ok']} of {len(prompts)} prompts")
    res["pass"] = bool(primary is not None and res["specrun_complete"] and not res["failures"])
    log(f"   -> {'PASS' if res['pass'] else 'FAIL'} (oracle {res['oracle_used']}; "
        f"{len(res['failures'])} failures, {len(res['errors'])} errors)")
    for f in res["failures"][:10]:
        log(f"      failure: {f}")
    for e in res["errors"][:10]:
        log(f"      error: {e[:300]}")
    return res


def versions_info():
    v = {"python": platform.python_version(), "numpy": np.__version__}
    if torch is not None:
        v["torch"] = torch.__version__
        v["torch_cuda"] = getattr(torch.version, "cuda", None)
        try:
            if torch.cuda.is_available():
                v["gpu"] = torch.cuda.get_device_name(0)
        except Exception as exc:  # noqa: BLE001
            v["gpu_error"] = str(exc)
    try:
        import transformers  # noqa: E402
        v["transformers"] = transformers.__version__
    except Exception as exc:  # noqa: BLE001
        v["transformers_error"] = f"{type(exc).__name__}: {exc}"
    return v


def json_safe(x):
    """inf/nan as strings, so the file stays strict JSON (jq and friends refuse Infinity)."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def fmt(x, spec=".2e"):
    return "-" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specrun", required=True, help="specrun binary")
    ap.add_argument("--model", required=True, action="append", help="model folder (repeatable)")
    ap.add_argument("--out", required=True, help="result JSON")
    ap.add_argument("--backend", default="cuda", help="specrun --backend (default cuda)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--device", default="cuda", help="torch device for the oracles")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per specrun call")
    args = ap.parse_args()
    if args.prompts < 1 or args.new_tokens < 1:
        ap.error("--prompts and --new-tokens must be >= 1")

    result = {"tool": "tests/gpu/hf_oracle.py", "args": vars(args),
              "tolerances": {"rel_l2": REL_L2_TOL, "near_tie": NEAR_TIE_REL},
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "models": [], "errors": []}
    versions = versions_info()
    result["versions"] = versions
    log(f"hf_oracle: {versions}")

    def save():  # after every model too, so a run cut short by a time limit leaves its results
        with open(args.out, "w") as f:
            json.dump(json_safe(result), f, indent=1)
    if torch is None:
        result["errors"].append(f"torch not importable: {TORCH_IMPORT_ERROR}")
    elif not os.path.exists(args.specrun):
        result["errors"].append(f"--specrun {args.specrun} does not exist")
    else:
        args.specrun = os.path.abspath(args.specrun)
        torch.manual_seed(args.seed)
        with tempfile.TemporaryDirectory(prefix="hf_oracle_") as tmpdir:
            for model_dir in args.model:
                try:
                    result["models"].append(check_model(args, model_dir, tmpdir, versions))
                except Exception as exc:  # noqa: BLE001 - keep going with the next model
                    result["models"].append({"model": model_dir, "pass": False,
                                             "errors": [f"unexpected: {err_text(exc)}"]})
                result["pass"] = False  # provisional, until every model is done
                save()
    result["pass"] = bool(result["models"]) and not result["errors"] and all(
        m.get("pass") for m in result["models"])
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    save()

    log("")
    log(f"{'model':<34} {'oracle':<6} {'prom':>4} {'rows':>5} {'relL2 max':>9} {'median':>9} "
        f"{'greedy':>7} {'ties':>4} {'fail':>4} {'err':>3}  result")
    for m in result["models"]:
        name = m["model"] if len(m["model"]) <= 34 else "..." + m["model"][-31:]
        greedy = "-" if m.get("greedy_total") is None else f"{m['greedy_equal']}/{m['greedy_total']}"
        log(f"{name:<34} {str(m.get('oracle_used')):<6} {m.get('specrun_ok', 0):>4} "
            f"{m.get('rows_compared', 0):>5} {fmt(m.get('rel_l2_max')):>9} "
            f"{fmt(m.get('rel_l2_median')):>9} {greedy:>7} {m.get('near_ties', 0):>4} "
            f"{len(m.get('failures', [])):>4} {len(m.get('errors', [])):>3}  "
            f"{'PASS' if m.get('pass') else 'FAIL'}")
        for name_o, o in (m.get("oracles") or {}).items():
            if o.get("ran"):
                log(f"    {name_o}: {o['dtype']} on {o['device']}, rel L2 max "
                    f"{fmt(o['rel_l2_max'])}, greedy {o['greedy_equal']}/{o['greedy_total']}, "
                    f"{len(o['near_ties'])} near-ties, {'pass' if o['pass'] else 'FAIL'}")
            else:
                log(f"    {name_o}: not run ({o.get('skipped') or (o['errors'] or ['?'])[0][:120]})")
    for e in result["errors"]:
        log(f"error: {e}")
    log(f"hf_oracle: {'PASS' if result['pass'] else 'FAIL'} -> {args.out}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
