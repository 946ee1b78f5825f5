#!/usr/bin/env python3
"""Finds the code that GCC PR target/108599 miscompiles, by compiling it and reading GCC's RTL.

GCC 12 (and 13 before 13.3) turns a 256- or 512-bit integer constant into a broadcast of its
first 64-bit word when it repeats, without noticing that a CONST_WIDE_INT leaves its upper zero
words implicit: {0.5, 0.5, 0, 0} becomes four 0.5s. Such constants arise when AVX is on and the
tuning moves 32 or 64 bytes at a time (by-pieces moves, folded memcpy: any AVX-512 -march, or
-mtune of an Intel AVX-512 core). In the RTL expand dump the miscompiled move is a register of
mode OI (256 bits) or XI (512) set from a vec_duplicate, whose REG_EQUAL note is a
const_wide_int with fewer 64-bit words than the mode: this script reports each one with its
function.

  audit-gcc-pr108599.py --build-dir build [-j 2] [--extra=-mtune=rocketlake ...]
      every translation unit of build/compile_commands.json, compiled as the build does (plus
      the extra flags, last, so that they win), to dumps in a scratch directory
  audit-gcc-pr108599.py --source FILE --flags "-O2 -march=x86-64-v4 ..." [--expect N|--expect-some]
      one file with the given flags (the test of CMake's guard flags)

Exit status: 0 when nothing is found (or, with --expect*, when the findings match), 1 otherwise,
2 on a compiler failure.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

MODE_BITS = {"OI": 256, "XI": 512}
INSN = re.compile(r"^\(insn ", re.M)
SET_FROM_SUBREG = re.compile(r"\(set \(reg:(OI|XI) (\d+)")
DUP = re.compile(r"\(set \(reg:V\w+ (\d+)\)\s+\(vec_duplicate:")
SUBREG_OF = re.compile(r"\(subreg:(?:OI|XI) \(reg:V\w+ (\d+)\)")
REG_EQUAL_CWI = re.compile(r"REG_EQUAL \(const_wide_int 0x([0-9a-fA-F]+)\)")
FUNCTION = re.compile(r"^;; Function (.*?) \(", re.M)


def findings_in_dump(text):
    """(function, insn text) for every miscompiled wide constant in one expand dump."""
    out = []
    # Split the dump per function, then per insn.
    parts = FUNCTION.split(text)
    # parts: [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2]):
        insns = INSN.split(body)
        duplicated = set()
        for insn in insns:
            d = DUP.search(insn)
            if d:
                duplicated.add(d.group(1))
                continue
            s = SET_FROM_SUBREG.search(insn)
            if not s:
                continue
            sub = SUBREG_OF.search(insn)
            note = REG_EQUAL_CWI.search(insn)
            if not (sub and note and sub.group(1) in duplicated):
                continue
            words = (len(note.group(1)) + 15) // 16
            if words * 64 < MODE_BITS[s.group(1)]:
                out.append((name.strip(), " ".join(insn.split())[:200]))
    return out


def compile_and_scan(args, source, scratch, label):
    """Compiles `source` with `args` (a compiler command without -o/-c), returns findings."""
    dumpdir = tempfile.mkdtemp(dir=scratch)
    cmd = args + ["-S", "-o", os.devnull, "-fdump-rtl-expand", "-dumpdir", dumpdir + "/",
                  "-dumpbase", "tu", source]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{label}: compiler failed:\n{' '.join(cmd)}\n{r.stderr[-2000:]}")
    found = []
    for f in os.listdir(dumpdir):
        if f.endswith(".expand"):
            with open(os.path.join(dumpdir, f), errors="replace") as fh:
                found += findings_in_dump(fh.read())
    return found


def strip_output_args(argv):
    """The compile command of compile_commands.json without -o X, -c and the source."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or a.startswith("-MF") or a in ("-MD", "-MMD"):
            continue
        out.append(a)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build-dir")
    p.add_argument("--source")
    p.add_argument("--compiler", default="g++")
    p.add_argument("--flags", default="")
    p.add_argument("--extra", action="append", default=[], help="flag appended to every command")
    p.add_argument("-j", type=int, default=os.cpu_count() or 1)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--expect", type=int, help="exit 0 only with exactly this many findings")
    g.add_argument("--expect-some", action="store_true", help="exit 0 only with findings")
    a = p.parse_args()

    jobs = []  # (label, argv, source)
    if a.source:
        jobs.append((a.source, [a.compiler] + shlex.split(a.flags) + a.extra, a.source))
    elif a.build_dir:
        with open(os.path.join(a.build_dir, "compile_commands.json")) as fh:
            for e in json.load(fh):
                if not e["file"].endswith((".cpp", ".cc", ".cxx")):
                    continue
                argv = e.get("arguments") or shlex.split(e["command"])
                argv = [x for x in strip_output_args(argv) if x != e["file"]]
                jobs.append((os.path.relpath(e["file"]), argv + a.extra, e["file"]))
    else:
        p.error("give --build-dir or --source")

    total = []
    with tempfile.TemporaryDirectory() as scratch:
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=a.j) as pool:
                futures = {pool.submit(compile_and_scan, argv, src, scratch, label): label
                           for label, argv, src in jobs}
                for fut in concurrent.futures.as_completed(futures):
                    label = futures[fut]
                    for function, insn in fut.result():
                        total.append((label, function))
                        print(f"{label}: {function}: {insn}")
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 2
    print(f"{len(total)} miscompiled wide constant(s) in {len(jobs)} translation unit(s)")
    if a.expect is not None:
        return 0 if len(total) == a.expect else 1
    if a.expect_some:
        return 0 if total else 1
    return 0 if not total else 1


if __name__ == "__main__":
    sys.exit(main())
