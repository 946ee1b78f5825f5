#!/usr/bin/python3
"""Checks a result file written by `specrun run`, reading it with h5py as a researcher would.

usage: check_run_result.py RESULT.h5 --prompts N --world W --tp T --draft-len K
                           [--report-json REPORT.json] [--unfinished]

1. Layout: every attribute and dataset that docs/file-formats.md lists is present with the
   documented dtype and shape (and a `description` on every row dataset).
2. Counts: N prompts per mode, each exactly once; the steps table has `verify_steps` rows per
   sequence; timings are [steps x world x 6] with one row per (batch, step), NaN exactly for the
   ranks outside the batch's tensor-parallel group; output lengths equal `generated`;
   accepted_per_position equals the count recomputed from the steps table.
3. Greedy: both modes' outputs are identical per prompt.
4. Provenance: one JSON record per rank, world_rank r in row r.
5. With --report-json: the numbers of `specrun report --json` equal values recomputed here
   from the raw datasets (tau, alpha, acceptance per position, tokens/s, phase quantiles,
   per-rank means, speedup, greedy-equality count, categories).
Exit status 0 when every check passes; otherwise lists what differs and exits 1.
"""
import argparse
import json
import sys

import h5py
import numpy as np

PHASES = ["draft", "verify", "comm", "sample", "other", "total"]
DEVICE_COLUMNS = ["draft", "verify", "sample", "other", "total"]
PASS_COLUMNS = [f"{p}_{k}" for p in ("draft", "verify")
                for k in ("replayed", "captured", "eager", "unrecorded")]
ROOT_ATTRS = {"schema": "str", "schema_version": "int32", "specrun_version": "str",
              "git_commit": "str", "git_dirty": "bool", "started": "str", "finished": "str",
              "world_size": "int32", "tp": "int32", "dp": "int32", "resumes": "int32"}
JOB_ATTRS = ["toml", "resolved", "config_hash", "prompts_path", "prompts_hash"]
SEQ = {"batch": "int64", "prompt_index": "int64", "prompt_id": "str", "category": "str",
       "prompt_len": "int32", "generated": "int32", "verify_steps": "int32", "drafted": "int64",
       "accepted": "int64", "finish_reason": "int8", "wall_s": "float64",
       "output_tokens": "int32", "output_offsets": "int64"}
STEP = {"batch": "int64", "step": "int32", "prompt_index": "int64", "active": "int32",
        "drafted": "int32", "accepted": "int32", "depth": "int32", "bonus": "int8",
        "emitted": "int32"}
BATCH = {"batch": "int64", "sequences_end": "int64", "steps_end": "int64",
         "timing_rows_end": "int64", "output_tokens_end": "int64",
         "accepted_per_position": "int64"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def dtype_ok(obj, want):
    dt = obj.dtype
    if want == "str":
        return h5py.check_string_dtype(dt) is not None
    if want == "bool":
        return dt == np.bool_ or (h5py.check_enum_dtype(dt) is not None)
    return dt == np.dtype(want)


def attr_dtype_ok(holder, name, want):
    value = holder.attrs[name]
    if want == "str":
        return isinstance(value, str)
    if want == "bool":
        return isinstance(value, (bool, np.bool_))
    return np.asarray(value).dtype == np.dtype(want)


def close(a, b, rel=1e-6, abs_=1e-9):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def check_layout(f, world, draft_len):
    for name, want in ROOT_ATTRS.items():
        if check(name in f.attrs, f"root attribute {name} missing"):
            check(attr_dtype_ok(f, name, want), f"root attribute {name}: not {want}")
    check(f.attrs.get("schema") == "specrun.result", "schema is not specrun.result")
    check(int(f.attrs.get("schema_version", 0)) == 7, "schema_version is not 7")
    # Schema 7: each rank's target weights in memory (bytes); a dense target has no experts.
    if check("provenance/target_weight_bytes" in f, "provenance/target_weight_bytes missing"):
        w = f["provenance/target_weight_bytes"]
        check(w.dtype == np.int64 and w.shape == (world,) and (w[:] > 0).all(),
              f"provenance/target_weight_bytes {w.dtype} {w.shape} {w[:]}")
    for name in JOB_ATTRS:
        if check(name in f["job"].attrs, f"/job attribute {name} missing"):
            check(attr_dtype_ok(f["job"], name, "str"), f"/job attribute {name}: not a string")
    ranks = f["provenance/ranks"]
    check(dtype_ok(ranks, "str") and ranks.shape == (world,), f"provenance/ranks {ranks.shape}")
    mm = f["provenance/mismatches"]
    check(dtype_ok(mm, "str") and mm.shape == (), "provenance/mismatches: not a scalar string")
    for r, text in enumerate(ranks.asstr()[:]):
        rec = json.loads(text)
        check(rec.get("world_rank") == r, f"provenance row {r} has world_rank {rec.get('world_rank')}")
        check(isinstance(rec.get("environment"), dict), f"provenance row {r}: no environment")
        for key in ["git_commit", "hdf5_version", "mpi_library", "hostname", "compiler",
                    "cpu_isa", "cpu_isa_forced"]:
            check(key in rec, f"provenance row {r}: no {key}")
    json.loads(mm.asstr()[()])

    for mode, k in (("baseline", 0), ("speculative", draft_len)):
        g = f[mode]
        check("experts" not in g, f"{mode}: a dense run has expert tables")
        check(int(g.attrs["draft_len"]) == k, f"{mode} draft_len {g.attrs['draft_len']} != {k}")
        for a, want in (("draft_len", "int32"), ("batches_committed", "int64"),
                        ("sequences_committed", "int64")):
            check(attr_dtype_ok(g, a, want), f"{mode} attribute {a}: not {want}")
        for group, table in (("sequences", SEQ), ("steps", STEP), ("batches", BATCH)):
            for name, want in table.items():
                path = f"{mode}/{group}/{name}"
                if not check(path in f, f"{path} missing"):
                    continue
                ds = f[path]
                check(dtype_ok(ds, want), f"{path}: dtype {ds.dtype}, expected {want}")
                check("description" in ds.attrs, f"{path}: no description attribute")
                if name == "accepted_per_position":
                    check(ds.ndim == 2 and ds.shape[1] == k, f"{path}: shape {ds.shape}")
                else:
                    check(ds.ndim == 1, f"{path}: shape {ds.shape}")
        t = g["timings"]
        check(t.dtype == np.float32 and t.ndim == 3 and t.shape[1:] == (world, 6),
              f"{mode}/timings: {t.dtype} {t.shape}, expected float32 [steps, {world}, 6]")
        check(t.attrs.get("unit") == "ms", f"{mode}/timings unit {t.attrs.get('unit')}")
        check([str(p) for p in t.attrs.get("phases", [])] == PHASES,
              f"{mode}/timings phases {t.attrs.get('phases')}")
        tb = g["timings_batch"]
        check(tb.dtype == np.int64 and tb.shape == t.shape[:1], f"{mode}/timings_batch {tb.shape}")
        app = g["accepted_per_position"]
        check(app.dtype == np.int64 and app.shape == (k,), f"{mode}/accepted_per_position {app.shape}")
        # Version 3: the CPU rows beside the timings, the host snapshot of each batch.
        c = g["cpu_timings"]
        check(c.dtype == np.float32 and c.ndim == 3 and c.shape == t.shape[:1] + (world, 7),
              f"{mode}/cpu_timings: {c.dtype} {c.shape}, expected float32 [steps, {world}, 7]")
        check([str(x) for x in c.attrs.get("columns", [])] == PHASES + ["run_queue_wait"],
              f"{mode}/cpu_timings columns {c.attrs.get('columns')}")
        h = g["batches/host"]
        check(h.dtype == np.float32 and h.ndim == 3 and h.shape[1:] == (world, 16),
              f"{mode}/batches/host: {h.dtype} {h.shape}, expected float32 [batches, {world}, 16]")
        fields = [str(x) for x in h.attrs.get("fields", [])]
        check(len(fields) == 16 and fields[9] == "gpu_sm_mhz" and fields[15] == "gpu_xid",
              f"{mode}/batches/host fields {fields}")
        hb = g["batches/host_busy"]
        check(dtype_ok(hb, "str") and hb.shape == h.shape[:1], f"{mode}/batches/host_busy {hb.shape}")
        # Version 5: the device rows; version 6: the pass rows (both NaN on the CPU backend).
        for name, columns, unit in (("device_timings", DEVICE_COLUMNS, "ms"),
                                    ("device_passes", PASS_COLUMNS, "passes")):
            ds, n = g[name], len(columns)
            check(ds.dtype == np.float32 and ds.ndim == 3 and ds.shape == t.shape[:1] + (world, n),
                  f"{mode}/{name}: {ds.dtype} {ds.shape}, expected float32 [steps, {world}, {n}]")
            check([str(x) for x in ds.attrs.get("columns", [])] == columns,
                  f"{mode}/{name} columns {ds.attrs.get('columns')}")
            check(ds.attrs.get("unit") == unit, f"{mode}/{name} unit {ds.attrs.get('unit')}")
        dv, pv = g["device_timings"], g["device_passes"]
        # A rank has CPU rows exactly where it has timings (NaN: another dp group's batch), and
        # a host snapshot for each batch its group decoded.
        nb, _, _, nt = committed(g)
        if nt:
            cpu, took_part = c[:nt, :, :6], np.isfinite(t[:nt, :, 0])
            check(np.array_equal(np.isfinite(cpu).all(axis=2), took_part) and
                  np.all(cpu[took_part] >= 0), f"{mode}/cpu_timings: not finite and >= 0 where "
                  "the rank has timings, or not NaN elsewhere")
        if nb:
            load = h[:nb, :, 0]
            check(np.all(np.isfinite(load).any(axis=1)) and np.all(load[np.isfinite(load)] >= 0),
                  f"{mode}/batches/host load1: {load}")
            # The GPU fields are the CUDA backend's: NaN in a CPU run.
            cuda = json.loads(f["job"].attrs["resolved"]).get("parallel", {}).get("backend") == "cuda"
            if not cuda:
                check(np.all(np.isnan(h[:nb, :, 9:])), f"{mode}/batches/host GPU fields in a CPU run")
        if nt:
            check_device_rows(mode, dv[:nt], np.isfinite(t[:nt, :, 0]), cuda_run(f))
            check_pass_rows(mode, pv[:nt], np.isfinite(t[:nt, :, 0]), cuda_run(f))


def cuda_run(f):
    return json.loads(f["job"].attrs["resolved"]).get("parallel", {}).get("backend") == "cuda"


def check_device_rows(mode, dv, took_part, cuda):
    """Device rows: NaN in a CPU run; on CUDA finite and >= 0 exactly where the rank has timings,
    the four phases adding up to the total, and the verify phase > 0 in every step (the target's
    forward runs on the device)."""
    if not cuda:
        check(np.all(np.isnan(dv)), f"{mode}/device_timings: values in a CPU run")
        return
    finite = np.isfinite(dv).all(axis=2)
    check(np.array_equal(finite, took_part) and np.all(dv[took_part] >= 0),
          f"{mode}/device_timings: not finite and >= 0 exactly where the rank has timings")
    rows = dv[took_part]
    parts = rows[:, :4].astype(np.float64).sum(axis=1)
    check(np.allclose(parts, rows[:, 4], rtol=1e-4, atol=1e-3),
          f"{mode}/device_timings: phases do not add up to the total, worst "
          f"{np.max(np.abs(parts - rows[:, 4])) if len(rows) else 0} ms")
    check(np.all(rows[:, 1] > 0), f"{mode}/device_timings: a step without device verify time")


def check_pass_rows(mode, pv, took_part, cuda):
    """Pass rows: NaN in a CPU run; on CUDA whole counts >= 0 exactly where the rank has timings,
    and at least one verify pass in every step."""
    if not cuda:
        check(np.all(np.isnan(pv)), f"{mode}/device_passes: values in a CPU run")
        return
    finite = np.isfinite(pv).all(axis=2)
    rows = pv[took_part]
    check(np.array_equal(finite, took_part) and np.all(rows >= 0) and np.all(rows == np.round(rows)),
          f"{mode}/device_passes: not whole counts >= 0 exactly where the rank has timings")
    check(np.all(rows[:, 4:8].sum(axis=1) >= 1), f"{mode}/device_passes: a step without a verify pass")


def committed(g):
    """The documented recipe: rows of committed batches only."""
    nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()])
    if nb == 0:
        return nb, 0, 0, 0
    return (nb, int(g["batches/sequences_end"][nb - 1]), int(g["batches/steps_end"][nb - 1]),
            int(g["batches/timing_rows_end"][nb - 1]))


def load_mode(g):
    nb, n, ns, nt = committed(g)
    d = {"batches": nb}
    for name in SEQ:
        if name in ("output_tokens", "output_offsets"):
            continue
        ds = g["sequences/" + name]
        d[name] = ds.asstr()[:n] if h5py.check_string_dtype(ds.dtype) else ds[:n]
    off = g["sequences/output_offsets"][: n + 1]
    tok = g["sequences/output_tokens"][: off[-1] if n else 0]
    d["outputs"] = [tok[off[i]:off[i + 1]] for i in range(n)]
    d["steps"] = {name: g["steps/" + name][:ns] for name in STEP}
    d["timings"] = g["timings"][:nt].astype(np.float64)
    if "device_timings" in g:
        d["device_timings"] = g["device_timings"][:nt].astype(np.float64)
    if "device_passes" in g:
        d["device_passes"] = g["device_passes"][:nt].astype(np.float64)
    d["timings_batch"] = g["timings_batch"][:nt]
    d["app"] = g["batches/accepted_per_position"][:nb].sum(axis=0) if nb else None
    return d


def check_counts(mode, d, n_prompts, world, tp, k):
    dp = world // tp
    idx = sorted(int(i) for i in d["prompt_index"])
    check(idx == list(range(n_prompts)), f"{mode}: prompt indices {idx}, expected 0..{n_prompts - 1}")
    st = d["steps"]
    for i, p in enumerate(d["prompt_index"]):
        rows = st["prompt_index"] == p
        check(int(rows.sum()) == int(d["verify_steps"][i]),
              f"{mode} prompt {p}: {rows.sum()} step rows, verify_steps {d['verify_steps'][i]}")
        check(len(d["outputs"][i]) == int(d["generated"][i]), f"{mode} prompt {p}: output length")
        # Tokens: the prefill's one plus what every step emitted (accepted + 1, unless EOS or
        # max_new_tokens cut it).
        check(int(d["generated"][i]) == 1 + int(st["emitted"][rows].sum()),
              f"{mode} prompt {p}: generated is not 1 + the steps' emitted tokens")
        check(bool((st["emitted"][rows] <= st["accepted"][rows] + 1).all()),
              f"{mode} prompt {p}: a step emitted more than accepted + 1")
        check(bool(((0 <= st["accepted"][rows]) & (st["accepted"][rows] <= st["depth"][rows]) &
                    (st["depth"][rows] <= st["drafted"][rows])).all()),
              f"{mode} prompt {p}: a step without 0 <= accepted <= depth <= drafted")
        chains = st["depth"][rows] == st["drafted"][rows]
        full = chains & (st["drafted"][rows] > 0) & (st["accepted"][rows] == st["drafted"][rows])
        check(bool((st["bonus"][rows][chains] == full[chains]).all()),
              f"{mode} prompt {p}: a chain step's bonus flag is not 'all accepted'")
        check(int(st["drafted"][rows].sum()) == int(d["drafted"][i]), f"{mode} prompt {p}: drafted")
        check(int(st["accepted"][rows].sum()) == int(d["accepted"][i]), f"{mode} prompt {p}: accepted")
    # One timing row per (batch, step), in commit order.
    pairs = sorted(set(zip(st["batch"].tolist(), st["step"].tolist())))
    t = d["timings"]
    check(t.shape == (len(pairs), world, 6),
          f"{mode}: timings shape {t.shape}, expected ({len(pairs)}, {world}, 6)")
    for row, b in enumerate(d["timings_batch"]):
        g = int(b) % dp
        in_group = np.zeros(world, bool)
        in_group[g * tp:(g + 1) * tp] = True
        nan = np.isnan(t[row]).all(axis=1)
        check((nan == ~in_group).all(), f"{mode} timing row {row} (batch {b}): NaN ranks {nan}")
    check(not np.isnan(t[:, :, 5]).all(axis=1).any(), f"{mode}: a timing row without any rank")
    if k:
        recomputed = [int((st["accepted"] >= i).sum()) for i in range(1, k + 1)]
        check(list(map(int, d["app"])) == recomputed,
              f"{mode}: accepted_per_position {d['app']} != recomputed {recomputed}")


def quantiles(v):
    v = np.asarray(v, np.float64)
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
            "p90": float(np.percentile(v, 90))} if len(v) else {"mean": 0, "p50": 0, "p90": 0}


def expected_mode(d):
    n = len(d["generated"])
    gen = d["generated"].astype(np.int64)
    out = {"prompts": n, "generated": int(gen.sum()), "batches": d["batches"],
           "verify_steps": int(d["verify_steps"].sum()),
           "drafted": int(d["drafted"].sum()), "accepted": int(d["accepted"].sum())}
    out["tau"] = (gen.sum() - n) / d["verify_steps"].sum()
    out["alpha"] = d["accepted"].sum() / d["drafted"].sum() if d["drafted"].sum() else 0.0
    walls = {}
    for b, w in zip(d["batch"], d["wall_s"]):
        walls[int(b)] = max(walls.get(int(b), 0.0), float(w))
    out["seconds"] = sum(walls.values())
    out["tokens_per_s"] = gen.sum() / out["seconds"]
    st = d["steps"]
    kmax = int(st["depth"].max()) if len(st["depth"]) else 0
    unc, cond = [], []
    for i in range(1, kmax + 1):
        offered = st["depth"] >= i
        reached = offered & (st["accepted"] >= i)
        prior = offered & (st["accepted"] >= i - 1)
        unc.append(reached.sum() / offered.sum() if offered.sum() else 0.0)
        cond.append(reached.sum() / prior.sum() if prior.sum() else 0.0)
    out["acceptance_unconditional"] = unc
    out["acceptance_conditional"] = cond
    if out["drafted"]:
        out["accepted_histogram"] = np.bincount(st["accepted"], minlength=kmax + 1).tolist()
        out["nodes_histogram"] = {str(n): int((st["drafted"] == n).sum())
                                  for n in sorted(set(st["drafted"].tolist()))}
        out["bonus_steps"] = int(st["bonus"].sum())
    t = d["timings"]
    out["phases_ms"] = {p: quantiles(np.nanmean(t[:, :, i], axis=1)) for i, p in enumerate(PHASES)}
    dv = d.get("device_timings")
    out["device_phases_ms"] = {}
    if dv is not None and np.isfinite(dv).any():
        out["device_phases_ms"] = {c: quantiles(np.nanmean(dv[:, :, i], axis=1))
                                   for i, c in enumerate(DEVICE_COLUMNS)}
    pv = d.get("device_passes")
    out["device_passes"] = {}
    if pv is not None and np.isfinite(pv).any():
        for phase, c in (("draft", 0), ("verify", 4)):
            n = np.nansum(pv[:, :, c:c + 4], axis=(0, 1))
            if n.sum() > 0:
                out["device_passes"][phase] = {"passes": n.sum(), "replayed": n[0], "captured": n[1],
                                               "eager": n[2], "unrecorded": n[3],
                                               "graph_share": (n[0] + n[1]) / n.sum()}
    out["phases_rank_mean"] = {
        p: [float(np.nanmean(t[:, r, i])) for r in range(t.shape[1])] for i, p in enumerate(PHASES)}
    cats = {}
    for c in sorted(set(d["category"])):
        m = d["category"] == c
        cats[c or "(none)"] = {"prompts": int(m.sum()),
                               "tau": (gen[m].sum() - m.sum()) / d["verify_steps"][m].sum()}
    out["categories"] = cats
    return out


def check_report(rep, data, unfinished):
    check(rep["job_finished"] == (not unfinished), f"report job_finished {rep['job_finished']}")
    check(isinstance(rep.get("target_weight_bytes"), list) and all(
        w > 0 for w in rep["target_weight_bytes"]), f"report target_weight_bytes {rep.get('target_weight_bytes')}")
    check(rep.get("experts_verify_over_decode", 0) is None, "a dense run's report has expert ratios")
    for mode in data:
        check(rep["modes"][mode]["experts"] == {"target": None, "draft": None},
              f"a dense run's report has {mode} experts")
    for mode, d in data.items():
        exp, got = expected_mode(d), rep["modes"][mode]
        for key in ("prompts", "generated", "batches", "verify_steps", "drafted", "accepted"):
            check(got[key] == exp[key], f"report {mode} {key}: {got[key]} != {exp[key]}")
        for key in ("accepted_histogram", "nodes_histogram", "bonus_steps"):
            if key in exp:
                check(got[key] == exp[key], f"report {mode} {key}: {got[key]} != {exp[key]}")
        for key in ("tau", "alpha", "seconds", "tokens_per_s"):
            check(close(got[key], exp[key]), f"report {mode} {key}: {got[key]} != {exp[key]}")
        for key in ("acceptance_unconditional", "acceptance_conditional"):
            check(len(got[key]) == len(exp[key]) and
                  all(close(a, b) for a, b in zip(got[key], exp[key])),
                  f"report {mode} {key}: {got[key]} != {exp[key]}")
        for p in PHASES:
            for q in ("mean", "p50", "p90"):
                a, b = got["phases_ms"][p][q], exp["phases_ms"][p][q]
                check(close(a, b, rel=1e-5, abs_=1e-6), f"report {mode} {p} {q}: {a} != {b}")
            ranks = [r["mean"] for r in got["phases_ms_per_rank"][p]["ranks"]]
            check(all(close(a, b, rel=1e-5, abs_=1e-6) for a, b in zip(ranks, exp["phases_rank_mean"][p])),
                  f"report {mode} {p} per-rank means {ranks} != {exp['phases_rank_mean'][p]}")
        dgot, dexp = got.get("device_phases_ms"), exp["device_phases_ms"]
        check(dgot is not None and sorted(dgot) == sorted(dexp),
              f"report {mode} device_phases_ms columns {dgot} != {sorted(dexp)}")
        for c in dexp:
            for q in ("mean", "p50", "p90"):
                a, b = (dgot or {}).get(c, {}).get(q), dexp[c][q]
                check(a is not None and close(a, b, rel=1e-5, abs_=1e-6),
                      f"report {mode} device {c} {q}: {a} != {b}")
        pgot, pexp = got.get("device_passes"), exp["device_passes"]
        check(pgot is not None and sorted(pgot) == sorted(pexp),
              f"report {mode} device_passes phases {pgot} != {sorted(pexp)}")
        for phase, want in pexp.items():
            for key, b in want.items():
                a = (pgot or {}).get(phase, {}).get(key)
                check(a is not None and close(a, b), f"report {mode} device passes {phase} {key}: {a} != {b}")
        for c, v in exp["categories"].items():
            g = got["categories"].get(c)
            check(g is not None and g["prompts"] == v["prompts"] and close(g["tau"], v["tau"]),
                  f"report {mode} category {c}: {g} != {v}")
    if "baseline" in data and "speculative" in data:
        b, s = data["baseline"], data["speculative"]
        bi = {int(p): i for i, p in enumerate(b["prompt_index"])}
        pairs = [(bi[int(p)], j) for j, p in enumerate(s["prompt_index"]) if int(p) in bi]
        same = sum(np.array_equal(b["outputs"][i], s["outputs"][j]) for i, j in pairs)
        check(rep["greedy_identical"] == same, f"report greedy_identical {rep['greedy_identical']} != {same}")
        check(rep["paired_prompts"] == len(pairs), "report paired_prompts")
        bt = sum(float(b["wall_s"][i]) for i, _ in pairs) / sum(int(b["generated"][i]) for i, _ in pairs)
        stt = sum(float(s["wall_s"][j]) for _, j in pairs) / sum(int(s["generated"][j]) for _, j in pairs)
        sp = rep["speedup"]
        check(close(sp["value"], bt / stt), f"report speedup {sp['value']} != {bt / stt}")
        check(sp["low"] <= sp["value"] <= sp["high"], f"speedup interval {sp} excludes its value")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--prompts", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--draft-len", type=int, required=True)
    ap.add_argument("--report-json")
    ap.add_argument("--unfinished", action="store_true")
    args = ap.parse_args()
    with h5py.File(args.file, "r") as f:
        check_layout(f, args.world, args.draft_len)
        check(bool(f.attrs["finished"]) != args.unfinished, f"finished = {f.attrs['finished']!r}")
        check(int(f.attrs["world_size"]) == args.world and int(f.attrs["tp"]) == args.tp,
              "world_size/tp attributes")
        data = {m: load_mode(f[m]) for m in ("baseline", "speculative")}
    for mode, d in data.items():
        check_counts(mode, d, args.prompts, args.world, args.tp,
                     args.draft_len if mode == "speculative" else 0)
    b, s = data["baseline"], data["speculative"]
    bo = {int(p): o for p, o in zip(b["prompt_index"], b["outputs"])}
    for p, o in zip(s["prompt_index"], s["outputs"]):
        check(np.array_equal(bo.get(int(p)), o), f"greedy outputs differ for prompt {p}")
    if args.report_json:
        with open(args.report_json) as fh:
            check_report(json.load(fh), data, args.unfinished)
    if failures:
        print(f"{len(failures)} check(s) failed:")
        for what in failures[:40]:
            print("  " + what)
        sys.exit(1)
    print(f"{args.file}: layout, counts, greedy equality, provenance"
          + (" and report numbers" if args.report_json else "") + " ok")


if __name__ == "__main__":
    main()
