#!/usr/bin/python3
"""Writes a JSONL prompt set for the e2e tests and scripts/rss_bench.sh.

usage: make_prompts.py OUT.jsonl N [--vocab V] [--min-len A] [--max-len B] [--seed S]
                       [--categories a,b,...]
Prompt i: id "p<i>", category categories[i % len], tokens drawn uniformly from [2, V) (0 and 1
are left out so that no prompt contains a BOS/EOS id of the synthetic models), length uniform in
[A, B]. Deterministic for a given seed.
"""
import argparse
import json

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("n", type=int)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--min-len", type=int, default=4)
ap.add_argument("--max-len", type=int, default=12)
ap.add_argument("--seed", type=int, default=7)
ap.add_argument("--categories", default="code,chat")
args = ap.parse_args()

rng = np.random.default_rng(args.seed)
cats = [c for c in args.categories.split(",") if c]
with open(args.out, "w") as f:
    for i in range(args.n):
        length = int(rng.integers(args.min_len, args.max_len + 1))
        tokens = rng.integers(2, args.vocab, size=length).tolist()
        row = {"id": f"p{i}", "tokens": tokens}
        if cats:
            row["category"] = cats[i % len(cats)]
        f.write(json.dumps(row) + "\n")
