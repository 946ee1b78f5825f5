#!/usr/bin/env bash
# What the model fingerprints cost (docs/analysis.md, "Model fingerprints"): RUNS one-rank jobs
# on the 100M-parameter perf model of scripts/bench.sh (BF16, a 1-layer draft), each printing the
# models' load time (the job log) and the time rank 0 spent hashing every model file whole
# (the result file's models.*.hash_s), both measured in the same run; then the median ratio.
#   usage: scripts/fingerprint-cost.sh [OUTDIR, default fingerprint-out]
#   env:   SPECRUN (default build/specrun), RUNS (default 10), THREADS (default 2)
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
for ((i = 0; i < RUNS; ++i)); do
  "$SPECRUN" run job.toml 2>&1 | sed -n 's/.*models loaded in \([0-9.]*\) s.*/\1/p' >load.txt
  /usr/bin/python3 - "$(cat load.txt)" <<'PY'
import json, sys
import h5py
load = float(sys.argv[1])
with h5py.File("out.h5", "r") as f:
    models = json.loads(f["provenance"].attrs["models"])
hashed = sum(m["hash_s"] for m in models.values())
mb = sum(x["bytes"] for m in models.values() for x in m["files"]) / 1e6
print(f"load {load:.3f} s  hash {hashed:.4f} s ({mb:.0f} MB, {mb / 1e3 / hashed:.1f} GB/s)  "
      f"hash/load {100 * hashed / load:.1f}%")
PY
done | tee runs.txt
/usr/bin/python3 - <<'PY'
import re, statistics
r = [float(m.group(1)) for m in re.finditer(r"hash/load ([0-9.]+)%", open("runs.txt").read())]
print(f"hash/load over {len(r)} runs: min {min(r):.1f}%  median {statistics.median(r):.1f}%  max {max(r):.1f}%")
PY
