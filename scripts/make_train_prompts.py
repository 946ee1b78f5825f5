#!/usr/bin/python3
"""Prompts for draft-training data, cut from the TRAINING split of the Python standard library
that ../shared/models was trained on (../shared/models/README.md, "Training data"): the *.py
files of Debian 12's python3.11 stdlib, without test/ or tests/ directories, dist-packages and
files over 300 KB; a file is held out iff zlib.crc32(relative path) % 10 == 0, and held-out files
(where the code prompts of the benchmarks come from) are never used here.

Each prompt is BOS followed by the tokens of a window of one training file that starts at the
beginning of a line, between --min-len and --max-len tokens long (sentencepiece, the models'
tokenizer, no dummy prefix); with --near-end, a fraction of the windows end shortly before their
file's end, where the target soon predicts EOS (prompts of mixed output lengths, for batching
benchmarks). Writes JSONL for `specrun prepare`.

usage: make_train_prompts.py OUT.jsonl [--n 2000] [--seed 1] [--stdlib /usr/lib/python3.11]
                             [--tokenizer ../shared/models/tokenizer/tokenizer.model]
"""
import argparse
import json
import os
import random
import sys
import zlib

import sentencepiece as spm


def stdlib_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        parts = [] if rel_dir == "." else rel_dir.split(os.sep)
        if any(p in ("test", "tests") for p in parts) or "dist-packages" in parts:
            continue
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            if os.path.getsize(path) > 300 * 1024:
                continue
            yield os.path.relpath(path, root), path


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-len", type=int, default=48)
    ap.add_argument("--max-len", type=int, default=320)
    ap.add_argument("--near-end", type=float, default=0.0,
                    help="fraction of prompts that end within --near-end-tokens tokens of their "
                         "file's end (so the target soon emits EOS: mixed output lengths)")
    ap.add_argument("--near-end-tokens", type=int, default=160)
    ap.add_argument("--stdlib", default="/usr/lib/python3.11")
    ap.add_argument("--tokenizer",
                    default=os.path.join(here, "..", "..", "shared", "models", "tokenizer",
                                         "tokenizer.model"))
    args = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    train, held = [], 0
    for rel, path in stdlib_files(args.stdlib):
        if zlib.crc32(rel.encode()) % 10 == 0:
            held += 1
            continue
        train.append((rel, path))
    print(f"make_train_prompts: {len(train)} training files, {held} held out (never used) under "
          f"{args.stdlib}", file=sys.stderr)
    if not train:
        sys.exit(f"no training files under {args.stdlib}")
    rng = random.Random(args.seed)
    # Token streams per file, with the token index where each line starts.
    cache = {}

    def tokens_of(path):
        if path not in cache:
            text = open(path, encoding="utf-8", errors="replace").read()
            lines = text.splitlines(keepends=True)
            ids, starts = [], []
            for line in lines:
                starts.append(len(ids))
                ids.extend(sp.encode(line))
            cache[path] = (ids, starts)
        return cache[path]

    written = 0
    with open(args.out, "w") as out:
        while written < args.n:
            rel, path = train[rng.randrange(len(train))]
            ids, starts = tokens_of(path)
            if len(ids) < args.min_len + 1:
                continue
            length = rng.randint(args.min_len, args.max_len)
            if rng.random() < args.near_end:
                end = len(ids) - rng.randint(0, args.near_end_tokens)
                start = next((st for st in starts if st >= end - length), end)
                window = ids[start:end]
            else:
                start = starts[rng.randrange(len(starts))]
                window = ids[start:start + length]
            if len(window) < args.min_len:
                continue
            out.write(json.dumps({"id": f"train-{written}", "category": "train",
                                  "source": rel, "tokens": [1] + window}) + "\n")
            written += 1
    print(f"make_train_prompts: wrote {written} prompts to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
