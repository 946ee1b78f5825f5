#!/usr/bin/env python3
"""Peer benchmark: transformers' greedy and assisted (speculative) generation on the same
weights and prompts as specrun, batch 1, so specrun's GPU figures have a reference point.

usage: peer_bench.py --target DIR --draft DIR --prompts PROMPTS.jsonl --out PEER.json
                     [--new-tokens 128] [--draft-len 4] [--device cuda] [--max-prompts 8]

PROMPTS.jsonl is the file specrun's `prepare` reads; lines with "tokens" (a list of ids) are
used, in order, the first --max-prompts of them ("id" names them; lines without "tokens" are
listed as skipped). Both models load with AutoModelForCausalLM.from_pretrained(dtype=bfloat16,
attn_implementation="sdpa") onto --device (dtype= first, torch_dtype= on TypeError; the dtype is
checked after loading).

What runs, per prompt in turn (batch 1):
  (a) greedy: target.generate(do_sample=False, max_new_tokens=N, min_new_tokens=N);
  (b) assisted: the same call with assistant_model=draft, where the draft's generation config
      has num_assistant_tokens = --draft-len, num_assistant_tokens_schedule = "constant" and
      assistant_confidence_threshold = 0 (transformers' default 0.4 would end a draft early
      when the draft is unsure; 0 switches that off, so every round drafts --draft-len tokens,
      like specrun's fixed-length chains). The same three values are also passed to generate()
      where this transformers' GenerationConfig has them.
Both models' generation configs get eos_token_id = None (specrun never stops at EOS, and
min_new_tokens would otherwise suppress EOS rather than reproduce greedy). Each mode is warmed up
once on the first prompt (not timed); each timed call is bracketed by torch.cuda.synchronize().
Forward pre-hooks count target and draft forward calls: in (a) target calls should equal N (a
check of the counting); in (b) target calls = verification rounds (the first round includes the
prompt), so new tokens / target calls = tokens per round, comparable to specrun's tau.

The JSON holds per mode and prompt the new tokens and seconds, tokens/s overall (sum of tokens /
sum of seconds), the median per-prompt ms/token, (b)'s forward counts, the speed-up (b)/(a), how
many prompts (b) reproduced (a) exactly (bf16 verify windows may round differently, so this is
information, not a check), the generated ids of (a) for the first 2 prompts (to compare with
specrun's greedy output: "greedy"."ids" = a list by prompt position, as tests/gpu/peer.sh reads
it, and "greedy_ids_first2" with the prompt ids; every prompt's ids are in "per_prompt" too),
versions of python/torch/transformers, the GPU name and peak memory. The file is rewritten after
each mode, so a run cut short by a time limit still leaves the finished mode's figures.
Each part is in try/except; its error text goes into the JSON and the script goes on.
Exit status 0 when both modes ran on every prompt without an error, 1 otherwise.
"""

import argparse
import json
import platform
import statistics
import sys
import time
import traceback


def log(*parts):
    print(*parts, flush=True)


def err_text(exc):
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tb[-3:]).strip()
    return f"{type(exc).__name__}: {exc} | {tail[-1500:]}"


def read_prompts(path, limit):
    prompts, skipped = [], []
    with open(path) as f:
        for n, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            obj = json.loads(line)
            toks = obj.get("tokens")
            pid = obj.get("id", n)
            if not isinstance(toks, list) or not toks or not all(isinstance(t, int) for t in toks):
                skipped.append(str(pid))
                continue
            prompts.append({"id": pid, "tokens": toks})
            if len(prompts) >= limit:
                break
    return prompts, skipped


def load_model(auto_cls, torch, model_dir, device, attn):
    """from_pretrained with dtype= (transformers >= 4.56, v5), else torch_dtype= on TypeError;
    the dtype is checked (and cast) after loading."""
    notes = {}
    try:
        model = auto_cls.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation=attn)
        notes["dtype_kwarg"] = "dtype"
    except TypeError as exc:
        notes["dtype_refused"] = str(exc)
        model = auto_cls.from_pretrained(model_dir, torch_dtype=torch.bfloat16,
                                         attn_implementation=attn)
        notes["dtype_kwarg"] = "torch_dtype"
    if next(model.parameters()).dtype != torch.bfloat16:  # a transformers that ignored dtype=
        model = model.to(torch.bfloat16)
        notes["cast_after_load"] = True
    model = model.to(device).eval()
    notes["attn_implementation"] = str(getattr(model.config, "_attn_implementation", attn))
    notes["params"] = sum(p.numel() for p in model.parameters())
    notes["class"] = type(model).__name__
    return model, notes


def no_eos(model):
    gc = model.generation_config
    gc.eos_token_id = None
    if gc.pad_token_id is None:
        gc.pad_token_id = 0
    gc.do_sample = False


class Timer:
    def __init__(self, torch, device):
        self.torch, self.cuda = torch, str(device).startswith("cuda")

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL with {\"id\", \"tokens\"} lines")
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--draft-len", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-prompts", type=int, default=8)
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (default sdpa)")
    args = ap.parse_args()
    if args.new_tokens < 1 or args.draft_len < 1 or args.max_prompts < 1:
        ap.error("--new-tokens, --draft-len and --max-prompts must be >= 1")

    res = {"tool": "tests/gpu/peer_bench.py", "args": vars(args),
           "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "versions": {"python":
           platform.python_version()}, "errors": [], "greedy": None, "assisted": None}

    def save():  # also after each mode, so a run cut short by a time limit leaves its results
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    def finish(code):
        res["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        res["ok"] = code == 0
        save()
        log(f"peer_bench: {'OK' if code == 0 else 'FAILED'} -> {args.out}")
        for e in res["errors"]:
            log(f"error: {e[:400]}")
        return code

    try:
        prompts, skipped = read_prompts(args.prompts, args.max_prompts)
        res["prompts"] = [{"id": p["id"], "len": len(p["tokens"])} for p in prompts]
        if skipped:
            res["skipped_prompts"] = skipped[:50]
        if not prompts:
            raise ValueError(f"{args.prompts} has no line with a \"tokens\" list")
        log(f"peer_bench: {len(prompts)} prompts from {args.prompts}")
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"prompts: {err_text(exc)}")
        return finish(1)

    try:
        import torch
        res["versions"]["torch"] = torch.__version__
        res["versions"]["torch_cuda"] = getattr(torch.version, "cuda", None)
        import transformers
        from transformers import AutoModelForCausalLM, GenerationConfig
        res["versions"]["transformers"] = transformers.__version__
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"import: {type(exc).__name__}: {exc}")
        return finish(1)
    log(f"peer_bench: {res['versions']}")

    device = args.device
    try:
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise RuntimeError(f"--device {device} but torch.cuda.is_available() is false")
            res["gpu"] = torch.cuda.get_device_name(torch.device(device))
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"device: {err_text(exc)}")
        return finish(1)
    timer = Timer(torch, device)

    target = draft = None
    try:
        target, res["target_load"] = load_model(AutoModelForCausalLM, torch, args.target, device,
                                                args.attn)
        no_eos(target)
        log(f"target: {res['target_load']}")
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"load target: {err_text(exc)}")
        return finish(1)
    try:
        draft, res["draft_load"] = load_model(AutoModelForCausalLM, torch, args.draft, device,
                                              args.attn)
        no_eos(draft)
        dgc = draft.generation_config
        dgc.num_assistant_tokens = args.draft_len
        dgc.num_assistant_tokens_schedule = "constant"
        dgc.assistant_confidence_threshold = 0.0
        log(f"draft: {res['draft_load']}")
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"load draft: {err_text(exc)}")
        draft = None

    # Assistant settings also passed to generate() when this GenerationConfig knows them (an
    # unknown name would be taken for a model kwarg and refused).
    assist_kwargs = {}
    try:
        known = GenerationConfig()
        for name, value in (("num_assistant_tokens", args.draft_len),
                            ("num_assistant_tokens_schedule", "constant"),
                            ("assistant_confidence_threshold", 0.0)):
            if hasattr(known, name):
                assist_kwargs[name] = value
        res["assist_kwargs"] = assist_kwargs
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"GenerationConfig probe: {err_text(exc)}")

    counts = {"target": 0, "draft": 0}
    hooks = []
    try:
        hooks.append(target.register_forward_pre_hook(
            lambda *_: counts.__setitem__("target", counts["target"] + 1)))
        if draft is not None:
            hooks.append(draft.register_forward_pre_hook(
                lambda *_: counts.__setitem__("draft", counts["draft"] + 1)))
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"forward hooks: {err_text(exc)}")

    N = args.new_tokens
    max_pos = getattr(target.config, "max_position_embeddings", None)

    def generate(prompt, n, assisted):
        ids = torch.tensor([prompt], dtype=torch.long, device=device)
        kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                      num_beams=1, max_new_tokens=n, min_new_tokens=n)
        if assisted:
            kwargs["assistant_model"] = draft
            kwargs.update(assist_kwargs)
        with torch.no_grad():
            out = target.generate(**kwargs)
        seq = out.sequences if hasattr(out, "sequences") else out
        return [int(t) for t in seq[0, len(prompt):].tolist()]

    def run_mode(name, assisted):
        mode = {"per_prompt": [], "errors": []}
        res[name] = mode
        first = prompts[0]["tokens"]
        try:  # warm-up, not timed
            t0 = time.time()
            generate(first, min(N, 16), assisted)
            timer.sync()
            mode["warmup_s"] = round(time.time() - t0, 3)
        except Exception as exc:  # noqa: BLE001
            mode["errors"].append(f"warm-up: {err_text(exc)}")
            log(f"{name}: warm-up failed: {exc}")
        for p in prompts:
            toks = p["tokens"]
            if max_pos is not None and len(toks) + N > max_pos:
                mode["errors"].append(f"prompt {p['id']}: {len(toks)} + {N} tokens exceed "
                                      f"max_position_embeddings {max_pos}; skipped")
                continue
            try:
                counts["target"] = counts["draft"] = 0
                timer.sync()
                t0 = time.perf_counter()
                ids = generate(toks, N, assisted)
                timer.sync()
                secs = time.perf_counter() - t0
                row = {"id": p["id"], "prompt_len": len(toks), "new_tokens": len(ids),
                       "seconds": round(secs, 6),
                       "ms_per_token": round(1000 * secs / max(1, len(ids)), 4), "ids": ids}
                row["target_forwards"] = counts["target"]
                if assisted:
                    row["draft_forwards"] = counts["draft"]
                    if counts["target"]:
                        row["tokens_per_target_forward"] = round(len(ids) / counts["target"], 4)
                if len(ids) != N:
                    mode["errors"].append(f"prompt {p['id']}: {len(ids)} new tokens, not {N}")
                mode["per_prompt"].append(row)
                log(f"{name}: prompt {p['id']} (len {len(toks)}): {len(ids)} tokens in "
                    f"{secs:.3f} s ({row['ms_per_token']:.2f} ms/token)"
                    + (f", {counts['target']} target forwards" if assisted else ""))
            except Exception as exc:  # noqa: BLE001
                mode["errors"].append(f"prompt {p['id']}: {err_text(exc)}")
                log(f"{name}: prompt {p['id']} failed: {exc}")
        rows = mode["per_prompt"]
        if not assisted:  # the first 2 prompts' ids, by prompt position ([] if one failed)
            by_id = {r["id"]: r["ids"] for r in rows}
            mode["ids"] = [by_id.get(p["id"], []) for p in prompts[:2]]
        if rows:
            tokens = sum(r["new_tokens"] for r in rows)
            secs = sum(r["seconds"] for r in rows)
            mode["prompts_done"] = len(rows)
            mode["tokens"] = tokens
            mode["seconds"] = round(secs, 6)
            mode["tokens_per_s"] = round(tokens / secs, 3) if secs > 0 else None
            mode["median_ms_per_token"] = round(statistics.median(r["ms_per_token"]
                                                                  for r in rows), 4)
            fwd = sum(r.get("target_forwards", 0) for r in rows)
            mode["target_forwards"] = fwd
            if assisted:
                mode["draft_forwards"] = sum(r.get("draft_forwards", 0) for r in rows)
                mode["tokens_per_target_forward"] = round(tokens / fwd, 4) if fwd else None
        return mode

    res["ok"] = False  # provisional, until finish()
    try:
        run_mode("greedy", assisted=False)
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"greedy: {err_text(exc)}")
    save()
    if draft is not None:
        try:
            run_mode("assisted", assisted=True)
        except Exception as exc:  # noqa: BLE001
            res["errors"].append(f"assisted: {err_text(exc)}")
        save()
    for h in hooks:
        h.remove()

    # summary
    try:
        g, a = res.get("greedy") or {}, res.get("assisted") or {}
        g_rows = {r["id"]: r for r in g.get("per_prompt", [])}
        res["greedy_ids_first2"] = [{"id": p["id"], "prompt_len": len(p["tokens"]),
                                     "ids": ids} for p, ids in zip(prompts, g.get("ids", []))]
        same = [r["id"] for r in a.get("per_prompt", [])
                if r["id"] in g_rows and g_rows[r["id"]]["ids"] == r["ids"]]
        res["assisted_equals_greedy"] = f"{len(same)}/{len(a.get('per_prompt', []))}"
        if g.get("tokens_per_s") and a.get("tokens_per_s"):
            res["speedup_assisted_vs_greedy"] = round(a["tokens_per_s"] / g["tokens_per_s"], 4)
        if draft is not None:
            dgc = draft.generation_config
            res["draft_generation_config"] = {
                k: getattr(dgc, k, "absent") for k in
                ("num_assistant_tokens", "num_assistant_tokens_schedule",
                 "assistant_confidence_threshold", "eos_token_id")}
        if device.startswith("cuda"):
            res["max_memory_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"summary: {err_text(exc)}")

    log("")
    log(f"{'mode':<9} {'prompts':>7} {'tokens':>7} {'tokens/s':>9} {'med ms/tok':>10} "
        f"{'tok/round':>9}")
    for name in ("greedy", "assisted"):
        m = res.get(name) or {}
        tps = m.get("tokens_per_s")
        med = m.get("median_ms_per_token")
        tpr = m.get("tokens_per_target_forward")
        log(f"{name:<9} {m.get('prompts_done', 0):>7} {m.get('tokens', 0):>7} "
            f"{'-' if tps is None else format(tps, '.1f'):>9} "
            f"{'-' if med is None else format(med, '.3f'):>10} "
            f"{'-' if tpr is None else format(tpr, '.3f'):>9}")
    log(f"assisted == greedy: {res.get('assisted_equals_greedy')}, speed-up "
        f"{res.get('speedup_assisted_vs_greedy')}, GPU {res.get('gpu')}")

    ok = True
    for name in ("greedy", "assisted"):
        m = res.get(name)
        if not m or m.get("errors") or m.get("prompts_done", 0) != len(prompts):
            ok = False
    if res["errors"]:
        ok = False
    return finish(0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
