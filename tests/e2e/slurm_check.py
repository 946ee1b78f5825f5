#!/usr/bin/python3
"""Result-file checks for the Slurm and signal end-to-end tests, read with h5py the way
docs/file-formats.md tells researchers to (only rows of committed batches count).

usage:
  slurm_check.py complete FILE --prompts N --batch-size B [--modes baseline,speculative]
      `finished` set; every mode holds every batch exactly once with all N prompts.
  slurm_check.py partial FILE --prompts N --batch-size B [--modes ...]
      `finished` empty (a stopped job); at least one batch committed and at least one missing;
      every committed batch is whole: exactly the prompts of its range, each once.
  slurm_check.py equal A B [--modes ...]
      per prompt: output tokens and the counts (generated, verify_steps, drafted, accepted,
      finish_reason) equal in both files (greedy decoding is deterministic).
  slurm_check.py env FILE --world W NAME=VALUE|NAME=<unset>|NAME=<rank>...
      every rank's stored environment has these values (<rank>: the rank's own number);
      W provenance records.
  slurm_check.py attr FILE NAME VALUE
      root attribute NAME equals VALUE (compared as text).
Exit status 0 when every check passes; otherwise prints what differs and exits 1.
"""
import argparse
import json
import sys

import h5py
import numpy as np

COUNTS = ["generated", "verify_steps", "drafted", "accepted", "finish_reason"]


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def committed(f, mode):
    """The committed rows of one mode: {prompt_index: (batch, tokens, counts)} and batches."""
    g = f[mode]
    nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()])
    n = int(g["batches/sequences_end"][nb - 1]) if nb else 0
    off = g["sequences/output_offsets"][: n + 1]
    tok = g["sequences/output_tokens"][: off[-1] if n else 0]
    idx = g["sequences/prompt_index"][:n]
    batch = g["sequences/batch"][:n]
    counts = {c: g["sequences/" + c][:n] for c in COUNTS}
    rows = {}
    for i in range(n):
        p = int(idx[i])
        if p in rows:
            raise AssertionError(f"{mode}: prompt {p} appears twice in the committed rows")
        rows[p] = (int(batch[i]), tok[off[i]:off[i + 1]].tolist(),
                   tuple(int(counts[c][i]) for c in COUNTS))
    return rows, [int(b) for b in g["batches/batch"][:nb]]


def check_batches(rows, batches, mode, prompts, batch_size, want_all):
    errors = []
    if len(set(batches)) != len(batches):
        errors.append(f"{mode}: a batch is committed twice: {sorted(batches)}")
    n_batches = (prompts + batch_size - 1) // batch_size
    for b in batches:
        want = set(range(b * batch_size, min(prompts, (b + 1) * batch_size)))
        have = {p for p, r in rows.items() if r[0] == b}
        if have != want:
            errors.append(f"{mode}: batch {b} holds prompts {sorted(have)}, expected {sorted(want)}")
    stray = {p for p, r in rows.items() if r[0] not in batches}
    if stray:
        errors.append(f"{mode}: rows of uncommitted batches among the committed rows: {sorted(stray)}")
    if want_all and sorted(batches) != list(range(n_batches)):
        missing = sorted(set(range(n_batches)) - set(batches))
        errors.append(f"{mode}: {len(batches)} of {n_batches} batches committed; missing {missing}")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["complete", "partial", "equal", "env", "attr"])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--modes", default="baseline,speculative")
    ap.add_argument("--world", type=int)
    a = ap.parse_intermixed_args()
    modes = a.modes.split(",")
    errors = []

    if a.what in ("complete", "partial"):
        with h5py.File(a.files[0], "r") as f:
            finished = text(f.attrs.get("finished", ""))
            total_committed, total_batches = 0, 0
            for mode in modes:
                if mode not in f:
                    if a.what == "complete":
                        errors.append(f"mode {mode} missing")
                    total_batches += (a.prompts + a.batch_size - 1) // a.batch_size
                    continue
                rows, batches = committed(f, mode)
                errors += check_batches(rows, batches, mode, a.prompts, a.batch_size,
                                        a.what == "complete")
                total_committed += len(batches)
                total_batches += (a.prompts + a.batch_size - 1) // a.batch_size
                print(f"{a.files[0]}: {mode}: {len(batches)} batches, {len(rows)} prompts committed")
            if a.what == "complete" and not finished:
                errors.append("root attribute `finished` is empty: the job did not complete")
            if a.what == "partial":
                if finished:
                    errors.append(f"`finished` = {finished!r} on a file of a stopped job")
                if total_committed == 0:
                    errors.append("no batch committed before the stop")
                if total_committed >= total_batches:
                    errors.append(f"all {total_batches} batches committed: the stop came too late "
                                  "to test anything")
    elif a.what == "equal":
        fa, fb = h5py.File(a.files[0], "r"), h5py.File(a.files[1], "r")
        for mode in modes:
            ra, _ = committed(fa, mode)
            rb, _ = committed(fb, mode)
            if sorted(ra) != sorted(rb):
                errors.append(f"{mode}: prompt sets differ: {len(ra)} vs {len(rb)} prompts")
                continue
            bad = [p for p in sorted(ra) if ra[p][1:] != rb[p][1:]]
            for p in bad[:5]:
                errors.append(f"{mode}: prompt {p} differs: tokens/counts {ra[p][1:]} vs {rb[p][1:]}")
            print(f"{mode}: {len(ra)} prompts compared, {len(bad)} differ")
    elif a.what == "env":
        with h5py.File(a.files[0], "r") as f:
            recs = [json.loads(text(r)) for r in f["provenance/ranks"][:]]
        if a.world is not None and len(recs) != a.world:
            errors.append(f"{len(recs)} provenance records, expected {a.world}")
        for spec in a.files[1:]:
            name, value = spec.split("=", 1)
            for r in recs:
                have = r["environment"].get(name)
                want = (None if value == "<unset>" else
                        str(r["world_rank"]) if value == "<rank>" else value)
                if have != want:
                    errors.append(f"rank {r['world_rank']}: {name}={have!r}, expected {want!r}")
        print(f"env: {len(recs)} ranks checked for {' '.join(a.files[1:])}")
    elif a.what == "attr":
        with h5py.File(a.files[0], "r") as f:
            have = text(f.attrs.get(a.files[1], "<absent>"))
        if have != a.files[2]:
            errors.append(f"attribute {a.files[1]} = {have!r}, expected {a.files[2]!r}")

    for e in errors:
        print("FAIL:", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
