#!/usr/bin/python3
"""Acceptance figures of a speculative result file counted as ../shared/models/code-eagle3/README.md
counts them, so that a runner that shortens drafts near max_new_tokens is comparable: run with
max_new_tokens >= N + 7 and no EOS stop; per sequence, only the verify steps that begin while fewer
than N new tokens exist count (the first new token is the target's after the prefill).
S = those steps, A = their accepted draft tokens; tau = (A + S) / S per prompt (mean tau) and
pooled; alpha = A / (S k) for chains.

usage: eagle3_tau.py RESULT.h5 [--new N] [--k K] [--json]
"""
import json
import sys

import h5py
import numpy as np


def figures(path, new=64, k=None):
    with h5py.File(path, "r") as f:
        steps = f["speculative"]["steps"]
        seq = steps["sequence"][:] if "sequence" in steps else steps["prompt_index"][:]
        acc = steps["accepted"][:]
        drafted = steps["drafted"][:]
        order = np.lexsort((steps["step"][:], steps["batch"][:]))
    per = {}
    for i in order:
        s = int(seq[i])
        gen, S, A, D = per.get(s, (1, 0, 0, 0))
        if gen < new:
            S, A, D = S + 1, A + int(acc[i]), D + int(drafted[i])
        per[s] = (gen + int(acc[i]) + 1, S, A, D)
    S = sum(v[1] for v in per.values())
    A = sum(v[2] for v in per.values())
    D = sum(v[3] for v in per.values())
    mean_tau = float(np.mean([(v[2] + v[1]) / v[1] for v in per.values() if v[1] > 0]))
    out = {"prompts": len(per), "S": S, "A": A, "mean_tau": mean_tau, "pooled_tau": (A + S) / S}
    if k:
        out["alpha"] = A / (S * k)
    out["drafted"] = D
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    new = int(args[args.index("--new") + 1]) if "--new" in args else 64
    k = int(args[args.index("--k") + 1]) if "--k" in args else None
    r = figures(args[0], new, k)
    if "--json" in args:
        print(json.dumps(r))
    else:
        print(" ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                       for key, value in r.items()))
