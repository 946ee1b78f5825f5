#!/usr/bin/env bash
# CPU performance figures of docs/performance.md: the ~100M-parameter synthetic model (hidden
# 768, 12 layers, 12 heads, intermediate 2048, vocab 32000) in BF16 and F32 with 2 threads
# (decode, verify, prefill, batched decode next to the measured read bandwidth), then decode
# with tp = 1 x 1 thread against `mpirun -np 2` tp = 2 x 1 thread, alternated ROUNDS times so
# that a busy machine slows both alike, next to the read kernel on one core and on two (the
# memory's own ratio). Prints the tables and the ratios against the targets.
#   usage: scripts/bench.sh [OUTDIR, default bench-out]
#   env:   SPECRUN (default build/specrun), REPEATS (default 7), ROUNDS (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
SPECRUN=${SPECRUN:-build/specrun}
OUT=${1:-bench-out}
REPEATS=${REPEATS:-7}
ROUNDS=${ROUNDS:-3}
[ -x "$SPECRUN" ] || { echo "build first: cmake -S . -B build && cmake --build build -j2" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODEL=(--hidden 768 --layers 12 --heads 12 --kv-heads 12 --intermediate 2048 --vocab 32000)

mkdir -p "$OUT"
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(lscpu | sed -n 's/^Model name: *//p')  load: $(cut -d' ' -f1-3 /proc/loadavg)"
for dtype in bf16 f32; do
  [ -f "$OUT/model-$dtype/target/config.json" ] ||
    "$SPECRUN" make-model "$OUT/model-$dtype" "${MODEL[@]}" --draft-layers 1 --max-pos 2048 \
      --dtype "$dtype" >/dev/null
done

for dtype in bf16 f32; do
  echo "== tp 1, threads 2, $dtype"
  "$SPECRUN" bench --model-dir "$OUT/model-$dtype/target" --threads 2 --repeats "$REPEATS" \
    --json "$OUT/$dtype.json" --overwrite 2>/dev/null
done

echo "== decode: tp 1 x 1 thread vs tp 2 x 1 thread (mpirun -np 2), $ROUNDS alternations"
for ((r = 0; r < ROUNDS; ++r)); do
  "$SPECRUN" bench --model-dir "$OUT/model-bf16/target" --threads 1 --cases decode \
    --repeats "$REPEATS" --json "$OUT/tp1-$r.json" --overwrite 2>/dev/null >/dev/null
  mpirun -np 2 --bind-to core "$SPECRUN" bench --model-dir "$OUT/model-bf16/target" --tp 2 \
    --threads 1 --cases decode --repeats "$REPEATS" --json "$OUT/tp2-$r.json" --overwrite 2>/dev/null \
    >/dev/null
done

echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PYEOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def case(d, name):
    return next(c for c in d["cases"] if c["name"] == name)
print()
print(f"{'dtype':6} {'decode GB/s':>12} {'read GB/s':>10} {'% bw':>6} {'verify/decode':>14} "
      f"{'prefill/decode':>15} {'batch/decode':>13}")
for dtype in ("bf16", "f32"):
    d = json.load(open(f"{out}/{dtype}.json"))
    dec, bw = case(d, "decode"), case(d, "bandwidth")
    print(f"{dtype:6} {dec['gb_per_s']:12.2f} {bw['gb_per_s']:10.2f} {dec['pct_bandwidth']:6.1f} "
          f"{d['verify_over_decode']:14.2f} {d['prefill_over_decode']:15.2f} "
          f"{d['batch_over_decode']:13.2f}")
print("targets:                        >= 80%      <= 1.3           >= 8        >= 4")
def rounds_of(tp, name, key="ms_median"):
    return [case(json.load(open(f"{out}/tp{tp}-{r}.json")), name)[key] for r in range(rounds)]
tp1, tp2 = rounds_of(1, "decode"), rounds_of(2, "decode")
m1, m2 = statistics.median(tp1), statistics.median(tp2)
print(f"\ndecode ms/token, tp 1 x 1 thread: {m1:.3f} (rounds: {', '.join(f'{t:.3f}' for t in tp1)})")
print(f"decode ms/token, tp 2 x 1 thread: {m2:.3f} (rounds: {', '.join(f'{t:.3f}' for t in tp2)}), "
      f"of which communication {statistics.median(rounds_of(2, 'decode', 'comm_ms')):.3f}")
print(f"tp 2 / tp 1 time: {m2 / m1:.2f} (target <= 0.65)")
# The read kernel over the same bytes, one core against two: the memory's own ratio, which
# bounds decode's (both stream every weight once).
r1, r2 = rounds_of(1, "bandwidth"), rounds_of(2, "bandwidth")
print(f"read kernel, 2 cores / 1 core time: {statistics.median(r2) / statistics.median(r1):.2f} "
      f"(rounds: {', '.join(f'{b / a:.2f}' for a, b in zip(r1, r2))}; 1 core "
      f"{statistics.median(rounds_of(1, 'bandwidth', 'gb_per_s')):.1f} GB/s, 2 cores "
      f"{statistics.median(rounds_of(2, 'bandwidth', 'gb_per_s')):.1f} GB/s)")
PYEOF
