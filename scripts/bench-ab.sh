#!/usr/bin/env bash
# Two specrun binaries side by side: `specrun bench` of A, then of B, ROUNDS times in turn on the
# same model, so that a machine whose speed drifts slows both alike. Prints each case's median
# ms per step for A and B, the B/A ratio of every round (min, median, max) and the load.
#   usage: scripts/bench-ab.sh A_SPECRUN B_SPECRUN [OUTDIR, default bench-ab]
#   env:   ROUNDS (default 5), REPEATS (per bench call, default 3), STEPS (default 8),
#          DTYPE (bf16 or f32, default bf16), THREADS (default 2), CASES (default
#          decode,verify,prefill,batch), A_ENV / B_ENV (environment
#          assignments for A or B, e.g. B_ENV=SPECRUN_CPU_ISA=baseline)
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
OUT=${3:-bench-ab}
ROUNDS=${ROUNDS:-5}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-8}
DTYPE=${DTYPE:-bf16}
THREADS=${THREADS:-2}
CASES=${CASES:-decode,verify,prefill,batch}
MODEL=(--hidden 768 --layers 12 --heads 12 --kv-heads 12 --intermediate 2048 --vocab 32000)
mkdir -p "$OUT"
[ -f "$OUT/model-$DTYPE/target/config.json" ] ||
  "$A" make-model "$OUT/model-$DTYPE" "${MODEL[@]}" --draft-layers 1 --max-pos 2048 \
    --dtype "$DTYPE" >/dev/null
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(lscpu | sed -n 's/^Model name: *//p')  load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; ++r)); do
  for side in A B; do
    bin=${!side}
    envs_var=${side}_ENV
    read -r -a envs <<<"${!envs_var:-}"
    rm -f "$OUT/$side-$r.json" # bench --json replaces no file unless told (--overwrite)
    env "${envs[@]}" "$bin" bench --model-dir "$OUT/model-$DTYPE/target" --threads "$THREADS" \
      --repeats "$REPEATS" --steps "$STEPS" --cases "$CASES" --json "$OUT/$side-$r.json" >/dev/null 2>&1
  done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PYEOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {s: [json.load(open(f"{out}/{s}-{r}.json")) for r in range(rounds)] for s in "AB"}
print(f"A kernels: {runs['A'][0].get('kernels', '(not reported)')}")
print(f"B kernels: {runs['B'][0].get('kernels', '(not reported)')}")
print(f"{'case':10} {'A ms':>10} {'B ms':>10} {'B/A median':>11} {'(min - max over rounds)':>24}")
for name in [c["name"] for c in runs["A"][0]["cases"]]:
    a = [next(c for c in d["cases"] if c["name"] == name)["ms_median"] for d in runs["A"]]
    b = [next(c for c in d["cases"] if c["name"] == name)["ms_median"] for d in runs["B"]]
    ratios = [y / x for x, y in zip(a, b)]
    print(f"{name:10} {statistics.median(a):10.3f} {statistics.median(b):10.3f} "
          f"{statistics.median(ratios):11.3f} {min(ratios):11.3f} - {max(ratios):.3f}")
PYEOF
