#!/usr/bin/python3
"""Compares the committed rows of two result files per (mode, prompt), with h5py.

usage: same_results.py REFERENCE.h5 OTHER.h5 [--complete] [--min-batches K]
For every prompt that OTHER holds (committed rows only, per docs/file-formats.md), OTHER must
have exactly the reference's output tokens, generated, verify_steps, drafted, accepted,
finish_reason, and the same per-step (step, drafted, accepted) rows. --complete: OTHER holds
every prompt of the reference in every mode, each once, and is marked finished. --min-batches:
OTHER has at least K committed batches over both modes. Prints a one-line summary; exit 1 on
any difference.
"""
import argparse
import sys

import h5py
import numpy as np

FIELDS = ["generated", "verify_steps", "drafted", "accepted", "finish_reason"]


def load(path):
    out = {}
    with h5py.File(path, "r") as f:
        finished = f.attrs["finished"]
        resumes = int(f.attrs["resumes"])
        for mode in ("baseline", "speculative"):
            if mode not in f:
                out[mode] = ({}, 0)
                continue
            g = f[mode]
            nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()])
            n = int(g["batches/sequences_end"][nb - 1]) if nb else 0
            ns = int(g["batches/steps_end"][nb - 1]) if nb else 0
            off = g["sequences/output_offsets"][: n + 1]
            tok = g["sequences/output_tokens"][: off[-1] if n else 0]
            cols = {k: g["sequences/" + k][:n] for k in FIELDS + ["prompt_index"]}
            st = {k: g["steps/" + k][:ns] for k in ("prompt_index", "step", "drafted", "accepted")}
            rows = {}
            for i, p in enumerate(cols["prompt_index"]):
                p = int(p)
                if p in rows:
                    sys.exit(f"{path}: {mode} prompt {p} appears twice")
                m = st["prompt_index"] == p
                steps = list(zip(st["step"][m].tolist(), st["drafted"][m].tolist(),
                                 st["accepted"][m].tolist()))
                rows[p] = (tok[off[i]:off[i + 1]].tolist(), [int(cols[k][i]) for k in FIELDS], steps)
            out[mode] = (rows, nb)
    return out, finished, resumes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("other")
    ap.add_argument("--complete", action="store_true")
    ap.add_argument("--min-batches", type=int, default=0)
    args = ap.parse_args()
    ref, _, _ = load(args.reference)
    other, finished, resumes = load(args.other)
    bad = []
    total_batches = 0
    for mode in ("baseline", "speculative"):
        rrows, _ = ref[mode]
        orows, nb = other[mode]
        total_batches += nb
        for p, row in orows.items():
            if p not in rrows:
                bad.append(f"{mode} prompt {p} is not in the reference")
            elif row != rrows[p]:
                bad.append(f"{mode} prompt {p} differs: {row[1]} vs {rrows[p][1]}")
        if args.complete and set(orows) != set(rrows):
            bad.append(f"{mode}: prompts {sorted(set(rrows) - set(orows))} missing")
    if args.complete and not finished:
        bad.append("not marked finished")
    if total_batches < args.min_batches:
        bad.append(f"{total_batches} committed batches, expected at least {args.min_batches}")
    if bad:
        print(f"{args.other} vs {args.reference}: " + "; ".join(bad[:10]))
        sys.exit(1)
    print(f"{args.other}: {total_batches} committed batches, "
          f"{sum(len(other[m][0]) for m in other)} (mode, prompt) rows equal to the reference"
          f"{', complete' if args.complete else ''}, resumes {resumes}")


if __name__ == "__main__":
    main()
