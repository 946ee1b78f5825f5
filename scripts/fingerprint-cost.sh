#!/usr/bin/env bash
# What the model fingerprints cost (docs/analysis.md, "Model fingerprints"): RUNS one-rank jobs
# on the 100M-parameter perf model of scripts/bench.sh (BF16, a 1-layer draft), each printing,
# from the same run, the models' load time (with the sizes-and-headers fingerprint taken before
# it) and the time rank 0 spent hashing the files whole after the last batch (the job log),
# against runs without fingerprints (debug.fingerprints = false).
#   usage: scripts/fingerprint-cost.sh [OUTDIR, default fingerprint-out]
#   env:   SPECRUN (default build/specrun), RUNS (default 10), THREADS (default 2), COLD=1 drops
#          the page cache before every run (root: /proc/sys/vm/drop_caches), so that the load
#          reads the files from disk as a job's first load on a node does
set -euo pipefail
cd "$(dirname "$0")/.."
SPECRUN=$(realpath "${SPECRUN:-build/specrun}")
OUT=${1:-fingerprint-out}
RUNS=${RUNS:-10}
THREADS=${THREADS:-2}
[ -x "$SPECRUN" ] || { echo "build first: cmake -S . -B build && cmake --build build -j2" >&2; exit 2; }
mkdir -p "$OUT"
cd "$OUT"
[ -f model/target/config.json ] ||
  "$SPECRUN" make-model model --hidden 768 --layers 12 --heads 12 --kv-heads 12 \
    --intermediate 2048 --vocab 32000 --draft-layers 1 --max-pos 2048 --dtype bf16 >/dev/null
/usr/bin/python3 - <<'PY'
import json
with open("prompts.jsonl", "w") as f:
    for i in range(4):
        f.write(json.dumps({"id": f"p{i}", "tokens": [2 + (7 * i + j) % 31990 for j in range(16)]}) + "\n")
PY
"$SPECRUN" prepare prompts.jsonl prompts.h5 --overwrite >/dev/null
cat >job.toml <<TOML
[job]
name = "fingerprint-cost"
output = "out.h5"
overwrite = true
[target]
path = "model/target"
[draft]
kind = "model"
path = "model/draft"
[parallel]
threads = $THREADS
[data]
prompts = "prompts.h5"
batch_size = 4
[decode]
max_new_tokens = 2
modes = ["baseline"]
TOML
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(lscpu | sed -n 's/^Model name: *//p')  load: $(cut -d' ' -f1-3 /proc/loadavg)"
# Alternated: A with the fingerprints, B without (debug.fingerprints = false), in the order
# ABBA ABBA ... so that a busier moment slows both alike and neither always runs first (with
# AB AB ..., A's load was 1.55x B's; with BA BA ..., 0.98x: an order effect, not the hashing).
for ((i = 0; i < RUNS; ++i)); do
  order="true false"
  ((i % 2)) && order="false true"
  for fp in $order; do
    if [[ ${COLD:-0} == 1 ]]; then sync && echo 3 >/proc/sys/vm/drop_caches; fi
    "$SPECRUN" run job.toml --set debug.fingerprints=$fp >log.txt 2>&1
    load=$(sed -n 's/.*models loaded in \([0-9.]*\) s.*/\1/p' log.txt)
    extra=$(sed -n 's/.*model files fingerprinted whole in \([0-9.]*\) s after the last batch.*/\1/p' log.txt)
    /usr/bin/python3 - "$fp" "$load" "${extra:-0}" <<'PY'
import json, sys
import h5py
fp, load, extra = sys.argv[1] == "true", float(sys.argv[2]), float(sys.argv[3])
with h5py.File("out.h5", "r") as f:
    models = json.loads(f["provenance"].attrs["models"])
if fp:
    hashed = sum(m["hash_s"] for m in models.values())
    mb = sum(x["bytes"] for m in models.values() for x in m["files"]) / 1e6
    print(f"A  load {load:.3f} s; hashed whole after the last batch in {extra:.4f} s "
          f"({mb:.0f} MB, {mb / 1e3 / hashed:.1f} GB/s)")
else:
    assert all("fingerprint" not in m for m in models.values()), models
    print(f"B  load {load:.3f} s (no fingerprints)")
PY
  done
done | tee runs.txt
/usr/bin/python3 - <<'PY'
import re, statistics
t = open("runs.txt").read()
a = [float(m.group(1)) for m in re.finditer(r"A  load ([0-9.]+) s", t)]
b = [float(m.group(1)) for m in re.finditer(r"B  load ([0-9.]+) s", t)]
h = [float(m.group(1)) for m in re.finditer(r"last batch in ([0-9.]+) s", t)]
ma, mb, mh = statistics.median(a), statistics.median(b), statistics.median(h)
print(f"load with fingerprints (A): min {min(a):.3f}  median {ma:.3f}  max {max(a):.3f} s")
print(f"load without (B):           min {min(b):.3f}  median {mb:.3f}  max {max(b):.3f} s")
print(f"A / B: medians {ma / mb:.3f}, minima {min(a) / min(b):.3f};  the whole-file hashing "
      f"after the last batch: median {mh:.4f} s = {100 * mh / mb:.1f}% of B's median load")
PY
