#!/usr/bin/python3
"""The layering of docs/architecture.md, enforced: every #include "layer/..." in src/ and
kernels/ must name the file's own layer or one it may use. Prints each violation as
file:line: <layer> includes <layer> (allowed: ...) and exits 1; exits 0 when there is none.
The layer table of docs/architecture.md must say the same as ALLOWED (a difference is printed
and fails too), so that the page stays true.

Besides, analysis, engine and app include no backend's own header (backend/cpu_*, backend/cuda_*,
kernels/cuda/): they reach a backend through ModelFactory, make_token_ops, make_memory_probes.

usage: scripts/check-layers.py [SOURCE_DIR]   (default: the repository this script is in)
       scripts/check-layers.py --self-test   (planted violations must be caught, a planted
                                              allowed include and the documented table must not)
"""
import pathlib
import re
import sys

# Each layer and the layers below it that it may include (its own is always allowed).
# Lowest first: the order of docs/architecture.md.
ALLOWED = {
    "common": set(),
    "text": {"common"},
    "kernels": {"common", "generated"},
    "dist": {"common", "kernels"},
    "io": {"common", "text", "kernels", "dist"},
    "analysis": {"common", "text", "io"},
    "backend": {"common", "kernels", "dist"},
    "model": {"common", "text", "kernels", "dist", "backend"},
    "config": {"common", "dist"},
    "spec": {"common", "text", "kernels", "dist", "backend", "model", "config"},
    "engine": {"common", "text", "kernels", "dist", "io", "analysis", "backend", "model", "config",
               "spec"},
    "app": {"common", "text", "kernels", "dist", "io", "analysis", "backend", "model", "config",
            "spec", "engine"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"(([a-z_]+)/[^"]*)"')
# One backend's own headers (its implementation, its device kernels): the runtime and the CLI
# reach a backend only through ModelFactory, make_token_ops and make_memory_probes, so that no
# command has a code path per backend.
BACKEND_SPECIFIC = re.compile(r"^(backend/(cpu|cuda)_|kernels/cuda/)")
BACKEND_BLIND = {"analysis", "engine", "app"}
# A row of the layer table: | `src/io` | what it is | common, text, kernels, dist |
TABLE_ROW = re.compile(r"^\|\s*`(?:src/)?([a-z_]+)/?`\s*\|[^|]*\|\s*([^|]*?)\s*\|\s*$")
# Not a layer of the sources: the CPU kernels' generated dispatch tables (build/generated).
NOT_DOCUMENTED = {"generated"}


def layer_of(root, path):
    rel = path.relative_to(root).parts
    return rel[0] if rel[0] == "kernels" else rel[1]


def documented_layers(doc_text):
    """The layer table of docs/architecture.md as {layer: allowed set}, in the table's order.
    "all of the above" is every layer of the rows before; "all" every other layer."""
    rows = []
    in_layers = False
    for line in doc_text.splitlines():
        if line.startswith("## "):
            in_layers = line.strip() == "## Layers"
            continue
        m = TABLE_ROW.match(line) if in_layers else None
        if m:
            rows.append((m.group(1), m.group(2)))
    table = {}
    for i, (layer, cell) in enumerate(rows):
        if cell in ("-", ""):
            table[layer] = set()
        elif cell == "all of the above":
            table[layer] = {name for name, _ in rows[:i]}
        elif cell == "all":
            table[layer] = {name for name, _ in rows if name != layer}
        else:
            table[layer] = {w.strip() for w in cell.split(",")}
    return table


def check_documented(doc_text, allowed=None):
    allowed = ALLOWED if allowed is None else allowed
    table = documented_layers(doc_text)
    bad = []
    for layer in sorted(set(allowed) | set(table)):
        want = allowed.get(layer)
        have = table.get(layer)
        if want is None:
            bad.append(f"docs/architecture.md: layer '{layer}' is not in scripts/check-layers.py")
        elif have is None:
            bad.append(f"docs/architecture.md: the layer table has no row for '{layer}'")
        elif have != want - NOT_DOCUMENTED:
            bad.append(f"docs/architecture.md: '{layer}' may include "
                       f"{', '.join(sorted(have)) or 'nothing'} there but "
                       f"{', '.join(sorted(want - NOT_DOCUMENTED)) or 'nothing'} here")
    return bad


def self_test():
    import tempfile
    planted = {  # file -> the violation it must produce, or None when it is allowed
        "src/model/bad.h": ('#include "engine/decoder.h"\n', "model includes engine"),
        "src/analysis/bad_engine.h": ('#include "engine/job_runner.h"\n',
                                      "analysis includes engine"),
        "src/analysis/bad_model.cpp": ('#include "model/model_config.h"\n',
                                       "analysis includes model"),
        "src/analysis/good.h": ('#include "io/result_file.h"\n#include "text/tokenizer.h"\n', None),
        "src/engine/good.cpp": ('#include "analysis/summary.h"\n#include "backend/backend.h"\n',
                                None),
        "src/engine/bad_backend.cpp": ('#include "backend/cuda_backend.h"\n',
                                       "engine includes backend/cuda_backend.h"),
        "src/app/bad_kernels.cpp": ('#include "kernels/cuda/sampling.h"\n',
                                    "app includes kernels/cuda/sampling.h"),
        "src/spec/good_cuda.cpp": ('#include "backend/cuda_backend.h"\n', None),
    }
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / "kernels").mkdir()
        for rel, (text, _) in planted.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        bad = check(root)
    want = sorted(v for _, v in planted.values() if v)
    caught = sorted(v for v in want if any(v in b for b in bad))
    ok = caught == want and len(bad) == len(want)
    print("self-test: " + ("the planted violations were caught, the allowed includes passed"
                           if ok else f"expected {want}, got {bad}"))
    # The documented table is read as it is meant: a changed row must be told apart.
    doc = pathlib.Path(__file__).parent.parent / "docs" / "architecture.md"
    text = doc.read_text()
    doc_ok = not check_documented(text)
    drifted = dict(ALLOWED, analysis=ALLOWED["analysis"] | {"model"})
    drift_ok = bool(check_documented(text, drifted))
    print("self-test: docs/architecture.md's table " +
          ("agrees, and a drifted one is caught" if doc_ok and drift_ok
           else f"agreement {doc_ok}, drift caught {drift_ok}"))
    return 0 if ok and doc_ok and drift_ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    bad = check(root)
    doc = root / "docs" / "architecture.md"
    if doc.exists():
        bad += check_documented(doc.read_text())
    for line in bad:
        print(line)
    print(f"layers: {len(bad)} violation(s)")
    return 1 if bad else 0


def check(root):
    files = [p for d in ("src", "kernels") for p in (root / d).rglob("*")
             if p.suffix in {".h", ".cpp", ".cu", ".cuh", ".inc"}]
    bad, seen = [], set()
    for path in sorted(files):
        layer = layer_of(root, path)
        if layer not in ALLOWED:
            bad.append(f"{path.relative_to(root)}: layer '{layer}' is not in the layer list "
                       "(add it to scripts/check-layers.py and docs/architecture.md)")
            continue
        seen.add(layer)
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header, target = m.group(1), m.group(2)
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(root)}:{n}: {layer} includes {target} "
                           f"(allowed: {', '.join(sorted(ALLOWED[layer])) or 'nothing'})")
            elif layer in BACKEND_BLIND and BACKEND_SPECIFIC.match(header):
                bad.append(f"{path.relative_to(root)}:{n}: {layer} includes {header}, one "
                           "backend's own header (reach the backend through ModelFactory, "
                           "make_token_ops or make_memory_probes)")
    return bad


if __name__ == "__main__":
    sys.exit(main())
