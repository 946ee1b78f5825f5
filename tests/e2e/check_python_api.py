#!/usr/bin/python3
"""Checks the Python package (python/specrun) against `specrun report --json` of one result file:
every number the package computes must equal the report's (counts and flags exactly, floats and
the bootstrap intervals within 1e-9 relative: the package reproduces the C++ sums, percentiles and
random stream, so in practice they are the same doubles).

usage: check_python_api.py RESULT.h5 REPORT.json [--tables auto|numpy] [--expect-mismatch KEY]
  --expect-mismatch KEY: the report was made with another seed: the check must find KEY (e.g.
  speedup.low) different, which shows that the comparison can fail.
Prints how many values were compared; exits 1 naming the first difference.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import specrun  # noqa: E402

REL = 1e-9
# Figures of `report --json` this package does not compute (documented in docs/analysis.md).
NOT_COMPUTED_MODE_KEYS = {"experts"}
NOT_COMPUTED_TOP_KEYS = {"experts_verify_over_decode", "hosts", "identities_checked",
                         "cross_rank_mismatches", "file", "workload"}


class Mismatch(Exception):
    pass


def compare(path, mine, theirs, counter):
    if isinstance(mine, bool) or isinstance(theirs, bool):
        if mine is not theirs:
            raise Mismatch("%s: package %r, report %r" % (path, mine, theirs))
    elif isinstance(mine, dict):
        if not isinstance(theirs, dict) or set(mine) != set(theirs):
            raise Mismatch("%s: package keys %s, report keys %s" % (
                path, sorted(mine), sorted(theirs) if isinstance(theirs, dict) else theirs))
        for k in mine:
            compare(path + "." + k, mine[k], theirs[k], counter)
        return
    elif isinstance(mine, (list, tuple)):
        if not isinstance(theirs, list) or len(mine) != len(theirs):
            raise Mismatch("%s: package %r, report %r" % (path, mine, theirs))
        for i, (a, b) in enumerate(zip(mine, theirs)):
            compare("%s[%d]" % (path, i), a, b, counter)
        return
    elif isinstance(mine, int) and isinstance(theirs, int):
        if mine != theirs:
            raise Mismatch("%s: package %d, report %d" % (path, mine, theirs))
    elif isinstance(mine, (int, float)) and isinstance(theirs, (int, float)):
        a, b = float(mine), float(theirs)
        if not (a == b or math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)):
            raise Mismatch("%s: package %r, report %r (relative difference %.3g)" % (
                path, a, b, abs(a - b) / max(abs(a), abs(b))))
    elif mine != theirs:
        raise Mismatch("%s: package %r, report %r" % (path, mine, theirs))
    counter[0] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("result")
    ap.add_argument("report")
    ap.add_argument("--tables", default="auto")
    ap.add_argument("--expect-mismatch")
    args = ap.parse_args()
    with open(args.report) as f:
        report = json.load(f)
    r = specrun.load(args.result, tables=args.tables)
    mine = r.summary()
    counter = [0]
    try:
        # The per-mode figures, all of them but the expert accounting (null for dense models).
        theirs_modes = {name: {k: v for k, v in m.items() if k not in NOT_COMPUTED_MODE_KEYS}
                        for name, m in report["modes"].items()}
        for m in report["modes"].values():
            for model in ("target", "draft"):
                if m["experts"][model] is not None:
                    sys.exit("the file has expert records, which this check does not cover")
        compare("modes", mine["modes"], theirs_modes, counter)
        computed = set(mine) | {"modes"}
        for k in sorted(computed - {"modes"}):
            compare(k, mine[k], report[k], counter)
        # The file's identity as report prints it.
        header = {
            "schema": r.attrs["schema"], "schema_version": r.schema_version,
            "specrun_version": r.attrs["specrun_version"], "git_commit": r.attrs["git_commit"],
            "git_dirty": bool(r.attrs["git_dirty"]), "world_size": r.attrs["world_size"],
            "tp": r.attrs["tp"], "dp": r.attrs["dp"], "started": r.attrs["started"],
            "finished": r.attrs["finished"], "job_finished": r.attrs["finished"] != "",
            "resumes": r.attrs["resumes"], "alarms": r.alarms, "warnings": r.warnings,
            "batches_committed": sum(m.batches_committed for m in r.modes.values()),
            "models": r.models,
            "target_weight_bytes": (None if r.target_weight_bytes is None
                                    else r.target_weight_bytes.tolist()),
        }
        for k, v in header.items():
            compare(k, v, report[k], counter)
        left = set(report) - computed - set(header) - NOT_COMPUTED_TOP_KEYS
        if left:
            raise Mismatch("report --json has keys the check does not cover: %s" % sorted(left))
    except Mismatch as e:
        if args.expect_mismatch and str(e).startswith(args.expect_mismatch + ":"):
            print("check_python_api: the expected difference was found: %s" % e)
            return 0
        print("FAIL: %s: %s" % (args.result, e), file=sys.stderr)
        return 1
    if args.expect_mismatch:
        print("FAIL: %s: no difference at %s although the report used another seed"
              % (args.result, args.expect_mismatch), file=sys.stderr)
        return 1
    # The tables the numbers came from.
    spec = r.speculative
    if spec is not None:
        n = len(spec.sequences)
        assert n == report["modes"]["speculative"]["prompts"], n
        assert len(spec.steps) == report["modes"]["speculative"]["verify_steps"], len(spec.steps)
        assert len(spec.timings) == report["modes"]["speculative"]["step_rows"] * r.attrs["world_size"]
        acc = spec.acceptance
        assert len(acc) == len(report["modes"]["speculative"]["acceptance_unconditional"])
    if counter[0] < 100:
        print("FAIL: only %d values compared" % counter[0], file=sys.stderr)
        return 1
    print("check_python_api: %s: %d values equal to report --json (tables: %s)" % (
        args.result, counter[0], type(r.speculative.sequences).__name__ if r.speculative else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
