#!/usr/bin/python3
"""Checks a result file with h5py, the way a researcher reads it, against docs/file-formats.md.

Used by tests/unit/test_result_file.cpp on files written from synthetic batches: every batch b
holds the values make_batch(b) below computes (the same formula as make_batch in the C++ test,
written independently here), so the check compares the file with expected values.

usage: check_result_file.py FILE --modes baseline:0,speculative:4 --ranks 2
                            [--exact] [--finished] [--at-least K]
  --exact      no rows beyond the committed ones (a cleanly written or reopened file)
  --finished   the root attribute `finished` is set, and accepted_per_position totals match
  --at-least K some mode holds at least K committed batches
Exit status 0 when every check passes; otherwise prints what differs and exits 1.
"""
import argparse
import re
import sys

import h5py
import numpy as np

PHASES = ["draft", "verify", "comm", "sample", "other", "total"]
SEQS_PER_BATCH = 3
HEADER = {  # make_header() in the C++ test
    "specrun_version": "0.1.0-test",
    "git_commit": "0123456789abcdef",
    "world_size": 2,
    "tp": 2,
    "dp": 1,
}

SEQ_DTYPES = {
    "batch": "int64", "prompt_index": "int64", "prompt_id": "str", "category": "str",
    "prompt_len": "int32", "generated": "int32", "verify_steps": "int32", "drafted": "int64",
    "accepted": "int64", "finish_reason": "int8", "wall_s": "float64",
    "output_tokens": "int32", "output_offsets": "int64",
}
STEP_DTYPES = {"batch": "int64", "step": "int32", "prompt_index": "int64", "active": "int32",
               "drafted": "int32", "accepted": "int32", "depth": "int32", "bonus": "int8",
               "emitted": "int32"}
BATCH_DTYPES = {"batch": "int64", "sequences_end": "int64", "steps_end": "int64",
                "timing_rows_end": "int64", "output_tokens_end": "int64",
                "accepted_per_position": "int64"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def make_batch(b, draft_len, ranks):
    n_steps = 2 + b % 3
    seqs, steps = [], []
    for j in range(SEQS_PER_BATCH):
        idx = b * SEQS_PER_BATCH + j
        eos = idx % 2
        mine = []
        for s in range(n_steps):
            accepted = (s + j) % (draft_len + 1)
            mine.append({"batch": b, "step": s, "prompt_index": idx, "active": SEQS_PER_BATCH,
                         "drafted": draft_len, "accepted": accepted, "depth": draft_len,
                         "bonus": int(draft_len > 0 and accepted == draft_len),
                         "emitted": 1 if eos and s == n_steps - 1 else accepted + 1})
        steps += mine
        gen = 1 + sum(m["emitted"] for m in mine)
        seqs.append({
            "batch": b, "prompt_index": idx, "prompt_id": f"p{idx}",
            "category": "code" if j % 2 == 0 else "chat", "prompt_len": 5 + j,
            "generated": gen, "verify_steps": n_steps, "drafted": draft_len * n_steps,
            "accepted": sum(m["accepted"] for m in mine), "finish_reason": eos,
            "wall_s": 0.5 + idx, "tokens": [(idx * 7 + t) % 1000 for t in range(gen)],
        })
    steps.sort(key=lambda m: m["step"])  # step order, sequences interleaved (stable)
    timings = np.array([[[b * 1000 + s * 100 + r * 10 + p for p in range(6)]
                         for r in range(ranks)] for s in range(n_steps)], dtype=np.float32)
    apos = [b + i for i in range(draft_len)]
    # Device rows for even batches only (NaN otherwise), as make_batch in test_result_file.cpp.
    device = np.array([[[b * 1000 + s * 100 + r * 10 + c + 0.5 if b % 2 == 0 else np.nan
                         for c in range(5)] for r in range(ranks)] for s in range(n_steps)],
                      dtype=np.float32)
    # Pass rows with them (counts; schema 6).
    passes = np.array([[[(b + s + r + c) % 7 if b % 2 == 0 else np.nan
                         for c in range(8)] for r in range(ranks)] for s in range(n_steps)],
                      dtype=np.float32)
    return seqs, steps, (timings, device, passes), apos


def dtype_ok(ds, want):
    if want == "str":
        return h5py.check_string_dtype(ds.dtype) is not None
    return ds.dtype == np.dtype(want)


def check_row_table(group, dtypes, where):
    for name, want in dtypes.items():
        if not check(name in group, f"{where}/{name} is missing"):
            continue
        ds = group[name]
        check(dtype_ok(ds, want), f"{where}/{name} has dtype {ds.dtype}, documented {want}")
        check(ds.maxshape[0] is None, f"{where}/{name} is not extendible along axis 0")
        check(ds.chunks is not None, f"{where}/{name} is not chunked")
        check("description" in ds.attrs, f"{where}/{name} has no description attribute")
        # Documented: result tables are not compressed (compressed chunks move when rewritten,
        # which a kill between flushes can turn into corrupted committed rows).
        check(ds.compression is None and not ds.shuffle,
              f"{where}/{name}: expected no filters, got {ds.compression}, {ds.shuffle}")


END_NAMES = ("sequences_end", "steps_end", "timing_rows_end", "output_tokens_end")


def commit_ends(g, n_b):
    return {k: int(g["batches/" + k][n_b - 1]) if n_b else 0 for k in END_NAMES}


def committed_batches(g):
    n_b = min([int(g.attrs["batches_committed"])] + [len(g["batches/" + k]) for k in BATCH_DTYPES])
    seq_rows = min(len(g["sequences/" + k]) for k in SEQ_DTYPES if k != "output_offsets")
    step_rows = min(len(g["steps/" + k]) for k in STEP_DTYPES)
    timing_rows = min(len(g["timings"]), len(g["timings_batch"]))
    off = g["sequences/output_offsets"]
    while n_b > 0:
        e = commit_ends(g, n_b)
        if (e["sequences_end"] <= seq_rows and e["sequences_end"] + 1 <= len(off)
                and e["output_tokens_end"] <= len(g["sequences/output_tokens"])
                and e["steps_end"] <= step_rows and e["timing_rows_end"] <= timing_rows
                and off[e["sequences_end"]] == e["output_tokens_end"]):
            break
        n_b -= 1
    return n_b


def check_mode(f, mode, draft_len, ranks, args):
    g = f[mode]
    check(int(g.attrs["draft_len"]) == draft_len, f"{mode}: draft_len {g.attrs['draft_len']}")
    check_row_table(g["sequences"], SEQ_DTYPES, f"/{mode}/sequences")
    check_row_table(g["steps"], STEP_DTYPES, f"/{mode}/steps")
    check_row_table(g["batches"], BATCH_DTYPES, f"/{mode}/batches")
    t = g["timings"]
    check(t.dtype == np.float32 and t.ndim == 3 and t.shape[1:] == (ranks, 6),
          f"/{mode}/timings: {t.dtype} {t.shape}")
    check([p.decode() if isinstance(p, bytes) else p for p in t.attrs["phases"]] == PHASES,
          f"/{mode}/timings phases: {t.attrs['phases']}")
    check(t.attrs["unit"] == "ms", f"/{mode}/timings unit {t.attrs['unit']}")
    dv = g["device_timings"]
    check(dv.dtype == np.float32 and dv.ndim == 3 and dv.shape[1:] == (ranks, 5),
          f"/{mode}/device_timings: {dv.dtype} {dv.shape}")
    check([c.decode() if isinstance(c, bytes) else c for c in dv.attrs["columns"]] ==
          ["draft", "verify", "sample", "other", "total"],
          f"/{mode}/device_timings columns: {dv.attrs['columns']}")
    pv = g["device_passes"]
    check(pv.dtype == np.float32 and pv.ndim == 3 and pv.shape[1:] == (ranks, 8),
          f"/{mode}/device_passes: {pv.dtype} {pv.shape}")
    check([c.decode() if isinstance(c, bytes) else c for c in pv.attrs["columns"]] ==
          [f"{p}_{k}" for p in ("draft", "verify") for k in ("replayed", "captured", "eager", "unrecorded")],
          f"/{mode}/device_passes columns: {pv.attrs['columns']}")
    check(g["batches/accepted_per_position"].shape[1:] == (draft_len,), "batches apos shape")
    check(g["accepted_per_position"].shape == (draft_len,), "accepted_per_position shape")

    # Committed rows, as docs/file-formats.md describes: the batches_committed attribute, capped
    # by the commit table, stepped back past a commit record whose rows are not all present.
    n_b = committed_batches(g)
    check(n_b <= int(g.attrs["batches_committed"]), f"{mode}: committed count above attribute")
    ids = g["batches/batch"][:n_b].tolist()
    ends = commit_ends(g, n_b)
    n_seq = ends["sequences_end"]
    # A kill during the flush may leave the attributes one batch ahead of the rows on disk.
    seq_attr = int(g.attrs["sequences_committed"])
    check(seq_attr == n_seq if args.exact else seq_attr >= n_seq,
          f"{mode}: sequences_committed {seq_attr}, committed rows {n_seq}")

    seqs, steps, timings, devices, passes, apos_rows = [], [], [], [], [], []
    for b in ids:
        s, st, (tm, dm, pm), ap = make_batch(b, draft_len, ranks)
        seqs += s
        steps += st
        timings.append(tm)
        devices.append(dm)
        passes.append(pm)
        apos_rows.append(ap)
    check(n_seq == len(seqs), f"{mode}: {n_seq} committed sequences, expected {len(seqs)}")
    sq = g["sequences"]
    off = sq["output_offsets"][: n_seq + 1]
    tok = sq["output_tokens"]
    check(off[0] == 0 and off[-1] == ends["output_tokens_end"], f"{mode}: offsets ends")
    for name in SEQ_DTYPES:
        if name in ("output_tokens", "output_offsets"):
            continue
        col = sq[name].asstr()[:n_seq] if name in ("prompt_id", "category") else sq[name][:n_seq]
        got, want = list(col), [s[name] for s in seqs[:n_seq]]
        check(got == want, f"{mode}/sequences/{name}: {got[:6]}... != {want[:6]}...")
    all_tokens = tok[: ends["output_tokens_end"]]
    for i, want in enumerate(seqs[:n_seq]):
        got_tokens = all_tokens[off[i]:off[i + 1]].tolist()
        if not check(got_tokens == want["tokens"], f"{mode} row {i}: tokens {got_tokens} != "
                                                   f"{want['tokens']}"):
            break
    n_steps = ends["steps_end"]
    check(n_steps == len(steps), f"{mode}: {n_steps} step rows, expected {len(steps)}")
    for name in STEP_DTYPES:
        got = g["steps"][name][:n_steps].tolist()
        check(got == [s[name] for s in steps], f"{mode} steps/{name} differs")
    n_rows = ends["timing_rows_end"]
    want_t = np.concatenate(timings) if timings else np.zeros((0, ranks, 6), np.float32)
    check(np.array_equal(t[:n_rows], want_t), f"{mode}: timings differ")
    want_d = np.concatenate(devices) if devices else np.zeros((0, ranks, 5), np.float32)
    check(np.array_equal(dv[:n_rows], want_d, equal_nan=True), f"{mode}: device_timings differ")
    want_p = np.concatenate(passes) if passes else np.zeros((0, ranks, 8), np.float32)
    check(np.array_equal(pv[:n_rows], want_p, equal_nan=True), f"{mode}: device_passes differ")
    check(g["timings_batch"][:n_rows].tolist() == [b for b, tm in zip(ids, timings)
                                                   for _ in range(len(tm))],
          f"{mode}: timings_batch differs")
    if apos_rows and draft_len:
        check(np.array_equal(g["batches/accepted_per_position"][:n_b], np.array(apos_rows)),
              f"{mode}: per-batch accepted_per_position differs")
    if args.finished:
        want_total = np.array(apos_rows, dtype=np.int64).sum(axis=0) if apos_rows and draft_len \
            else np.zeros(draft_len, np.int64)
        check(np.array_equal(g["accepted_per_position"][:], want_total),
              f"{mode}: accepted_per_position {g['accepted_per_position'][:]} != {want_total}")
    if args.exact:
        for name in SEQ_DTYPES:
            want_len = {"output_offsets": n_seq + 1,
                        "output_tokens": ends["output_tokens_end"]}.get(name, n_seq)
            check(len(sq[name]) == want_len, f"{mode}/sequences/{name}: {len(sq[name])} rows, "
                                             f"{want_len} committed")
        check(len(t) == n_rows and len(g["batches/batch"]) == n_b, f"{mode}: extra rows")
    return n_b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--modes", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--finished", action="store_true")
    ap.add_argument("--at-least", type=int, default=0)
    args = ap.parse_args()
    draft_lens = {m: int(d) for m, d in (x.split(":") for x in args.modes.split(","))}

    with h5py.File(args.file, "r") as f:  # a plain open: no SWMR flag, no h5clear
        a = f.attrs
        check(a["schema"] == "specrun.result", f"schema {a['schema']!r}")
        check(int(a["schema_version"]) == 7, "schema_version")
        for k, v in HEADER.items():
            check(a[k] == v, f"root attribute {k}: {a[k]!r} != {v!r}")
        check(a["git_dirty"].dtype == np.bool_ and bool(a["git_dirty"]), "git_dirty is bool True")
        iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        check(iso.match(a["started"]) is not None, f"started {a['started']!r}")
        if args.finished:
            check(iso.match(a["finished"]) is not None, f"finished {a['finished']!r}")
        check(f["job"].attrs["toml"].startswith("[job]"), "job toml")
        check(f["job"].attrs["config_hash"] == "cfg-hash-1", "config_hash")
        prov = f["provenance/ranks"].asstr()[:]
        check(list(prov) == ['{"rank": 0}', '{"rank": 1}'], f"provenance {prov}")
        check(f["provenance/mismatches"].asstr()[()].startswith("[{"), "mismatches")
        # Schema 7: the header's weight memory per rank; a dense run's modes hold no experts.
        w = f["provenance/target_weight_bytes"]
        check(w.dtype == np.int64 and list(w[:]) == [1000 + r for r in range(args.ranks)],
              f"provenance/target_weight_bytes {w.dtype} {w[:]}")
        for mode in ("baseline", "speculative"):
            check(mode not in f or "experts" not in f[mode], f"{mode} of dense batches has experts")
        most = 0
        for mode in ("baseline", "speculative"):
            if mode in f:
                check(mode in draft_lens, f"unexpected mode {mode}")
                most = max(most, check_mode(f, mode, draft_lens[mode], args.ranks, args))
        check(most >= args.at_least, f"{most} committed batches, expected at least {args.at_least}")

    if failures:
        print(f"check_result_file.py {args.file}: {len(failures)} problems", file=sys.stderr)
        for x in failures[:30]:
            print("  " + x, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
