#!/usr/bin/python3
"""Checks a prompt file with h5py against docs/file-formats.md and against the JSONL it came from.

usage: check_prompt_file.py PROMPTS.h5 SOURCE.jsonl
Exit status 0 when the layout and every prompt match; otherwise prints the problems, exits 1.
"""
import json
import re
import sys

import h5py
import numpy as np

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def main():
    path, source = sys.argv[1], sys.argv[2]
    records = [json.loads(line) for line in open(source, encoding="utf-8") if line.strip()]
    n = len(records)
    with h5py.File(path, "r") as f:
        a = f.attrs
        check(a["schema"] == "specrun.prompts", f"schema {a['schema']!r}")
        check(a["schema_version"] == 1 and a["schema_version"].dtype == np.int32,
              f"schema_version {a['schema_version']!r}")
        check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", a["created"]) is not None,
              f"created {a['created']!r}")
        check(isinstance(a["specrun_version"], str) and a["specrun_version"], "specrun_version")
        check(a["source"] == source, f"source {a['source']!r}")

        tok, off = f["prompts/tokens"], f["prompts/offsets"]
        check(tok.dtype == np.int32 and tok.ndim == 1, f"tokens {tok.dtype} {tok.shape}")
        check(off.dtype == np.int64 and off.shape == (n + 1,), f"offsets {off.dtype} {off.shape}")
        for ds in (tok, off):
            check(ds.chunks is not None and ds.maxshape == (None,), f"{ds.name} not extendible")
            check(ds.compression == "gzip" and ds.shuffle, f"{ds.name} not shuffle+gzip")
        check(tok.chunks == (65536,), f"tokens chunk {tok.chunks}")
        offsets = off[:]
        tokens = tok[:]
        check(offsets[0] == 0 and offsets[-1] == len(tokens), "offsets do not span tokens")
        check(bool(np.all(np.diff(offsets) > 0)), "offsets not strictly increasing")

        want_cols = {k: any(k in r and r[k] is not None for r in records)
                     for k in ("id", "category", "text")}
        for k, present in want_cols.items():
            check((f"prompts/{k}" in f) == present, f"/prompts/{k} present: {not present}")
            if present:
                ds = f[f"prompts/{k}"]
                check(h5py.check_string_dtype(ds.dtype) is not None and ds.shape == (n,),
                      f"/prompts/{k}: {ds.dtype} {ds.shape}")
        cols = {k: f[f"prompts/{k}"].asstr()[:] for k, p in want_cols.items() if p}
        for i, r in enumerate(records):
            got = tokens[offsets[i]:offsets[i + 1]].tolist()
            if not check(got == r["tokens"], f"prompt {i}: tokens differ"):
                break
            if "id" in cols:
                check(cols["id"][i] == str(r["id"]), f"prompt {i}: id {cols['id'][i]!r}")
            for k in ("category", "text"):
                if k in cols:
                    want = r.get(k) or ""
                    check(cols[k][i] == want, f"prompt {i}: {k} {cols[k][i]!r} != {want!r}")
    if failures:
        print(f"check_prompt_file.py {path}: {len(failures)} problems", file=sys.stderr)
        for x in failures[:30]:
            print("  " + x, file=sys.stderr)
        sys.exit(1)
    print(f"{path}: {n} prompts, {len(tokens)} tokens, layout and contents OK")


if __name__ == "__main__":
    main()
