#!/usr/bin/env bash
# How often `specrun gate` cries wolf on repeats of an unchanged job, and whether it catches a
# worse draft (issue 47; the figures are in docs/analysis.md, "Golden acceptance curves and the
# gate").
#
#   scripts/gate-false-alarms.sh [GOLDEN_RUNS=5] [REPEATS=20] [OUT_DIR=gate-false-alarms]
#
# One job (the trained code pair in ../shared, 1 rank, 24 code prompts of two categories, 32 new
# tokens, chains of 4, temperature 0.8) is run GOLDEN_RUNS times (seeds 11, 12, ...) to make a
# golden, then REPEATS more times (seeds 21, 22, ...), each gated against it; then once with a
# draft whose layers' weights got noise of 0.6 of their standard deviation (the retrained-worse
# draft of tests/e2e/gate.sh). Prints one line per gate (exit code, first line) and the count of
# false alarms. It measures, it asserts nothing.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
GOLDEN_RUNS=${1:-5}
REPEATS=${2:-20}
OUT=${3:-gate-false-alarms}
BIN=${SPECRUN_BIN:-$SRC/build/specrun}
SHARED=${SPECRUN_SHARED_DIR:-$SRC/../shared}
[ -f "$SHARED/models/code-target/config.json" ] || {
  echo "needs the trained pair in $SHARED/models" >&2
  exit 2
}
mkdir -p "$OUT" && cd "$OUT"
{ sed -n 1,12p "$SHARED/prompts/code_prompts.jsonl"; sed -n 201,212p "$SHARED/prompts/code_prompts.jsonl"; } >prompts.jsonl
"$BIN" prepare prompts.jsonl prompts.h5 --overwrite >/dev/null
rm -rf draft && cp -r "$SHARED/models/code-draft" draft
cat >job.toml <<TOML
[job]
name = "gate-false-alarms"
output = "out.h5"
overwrite = true
[target]
path = "$SHARED/models/code-target"
[draft]
kind = "model"
path = "draft"
[parallel]
tp = 1
threads = 1
[data]
prompts = "prompts.h5"
batch_size = 8
[decode]
modes = ["speculative"]
max_new_tokens = 32
draft_len = 4
temperature = 0.8
stop_at_eos = false
TOML
run() { mpirun --oversubscribe -np 1 "$BIN" run job.toml --set job.output="$1.h5" "${@:2}" >"$1.log" 2>&1; }
golden=()
for i in $(seq "$GOLDEN_RUNS"); do
  run "golden$i" --set job.seed=$((10 + i))
  golden+=("golden$i.h5")
done
"$BIN" golden "${golden[@]}" --out golden.json --overwrite
alarms=0
for i in $(seq "$REPEATS"); do
  run "repeat$i" --set job.seed=$((20 + i))
  rc=0
  "$BIN" gate "repeat$i.h5" --golden golden.json >"repeat$i.gate" || rc=$?
  [[ $rc -eq 1 ]] && alarms=$((alarms + 1))
  echo "repeat $i: exit $rc: $(head -1 "repeat$i.gate" | cut -c1-160)"
done
rm -rf worse && cp -r draft worse
/usr/bin/python3 - worse/model.safetensors <<'PY'
import json, struct, sys
import numpy as np
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
rng = np.random.default_rng(3)
for name, t in header.items():
    if name == "__metadata__" or ".layers." not in name or t["dtype"] not in ("F32", "BF16"):
        continue
    a, b = t["data_offsets"]
    at, end = 8 + n + a, 8 + n + b
    if t["dtype"] == "F32":
        w = np.frombuffer(bytes(data[at:end]), dtype="<f4").copy()
        w += rng.normal(0, 0.6 * w.std() + 1e-3, w.shape).astype(np.float32)
        data[at:end] = w.astype("<f4").tobytes()
    else:
        w = (np.frombuffer(bytes(data[at:end]), dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        w = w + rng.normal(0, 0.6 * w.std() + 1e-3, w.shape).astype(np.float32)
        data[at:end] = (w.view(np.uint32) >> 16).astype("<u2").tobytes()
open(path, "wb").write(bytes(data))
PY
run worse --set draft.path=worse --set job.seed=21
rc=0
"$BIN" gate worse.h5 --golden golden.json >worse.gate || rc=$?
echo "worse draft: exit $rc: $(head -1 worse.gate | cut -c1-200)"
echo "false alarms: $alarms of $REPEATS unchanged repeats against a golden of $GOLDEN_RUNS runs (load $(cut -d' ' -f1-3 /proc/loadavg))"
