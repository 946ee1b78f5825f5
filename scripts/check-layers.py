#!/usr/bin/python3
"""The layering of docs/architecture.md, enforced: every #include "layer/..." in src/ and
kernels/ must name the file's own layer or one it may use. Prints each violation as
file:line: <layer> includes <layer> (allowed: ...) and exits 1; exits 0 when there is none.

usage: scripts/check-layers.py [SOURCE_DIR]   (default: the repository this script is in)
       scripts/check-layers.py --self-test   (a planted model -> engine include must be caught)
"""
import pathlib
import re
import sys

# Each layer and the layers below it that it may include (its own is always allowed).
# Lowest first: the order of docs/architecture.md.
ALLOWED = {
    "common": set(),
    "kernels": {"common", "generated"},
    "text": {"common"},
    "dist": {"common", "kernels"},
    "io": {"common", "text", "kernels", "dist"},
    "backend": {"common", "kernels", "dist"},
    "model": {"common", "text", "kernels", "dist", "backend"},
    "config": {"common", "dist"},
    "spec": {"common", "text", "kernels", "dist", "backend", "model", "config"},
    "engine": {"common", "text", "kernels", "dist", "io", "backend", "model", "config", "spec"},
    "app": {"common", "text", "kernels", "dist", "io", "backend", "model", "config", "spec", "engine"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def layer_of(root, path):
    rel = path.relative_to(root).parts
    return rel[0] if rel[0] == "kernels" else rel[1]


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / "src" / "model").mkdir(parents=True)
        (root / "kernels").mkdir()
        (root / "src" / "model" / "bad.h").write_text('#include "engine/decoder.h"\n')
        bad = check(root)
    ok = len(bad) == 1 and "model includes engine" in bad[0]
    print("self-test: " + ("the planted violation was caught" if ok else f"NOT caught: {bad}"))
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    bad = check(root)
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
            target = m.group(1)
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(root)}:{n}: {layer} includes {target} "
                           f"(allowed: {', '.join(sorted(ALLOWED[layer])) or 'nothing'})")
    return bad


if __name__ == "__main__":
    sys.exit(main())
