#!/usr/bin/env bash
# Quantized checkpoints against BF16 on the CPU (issue 44): one synthetic model shape (the
# ~134M-parameter model of docs/performance.md: hidden 768, 12 layers, 12 heads, intermediate
# 2048, vocab 32000) written three ways by make-model: BF16, int4-g32 (every Linear and lm_head
# packed: --quant-roles all) and fp8-block (every Linear; lm_head BF16 by DeepSeek-V3's
# convention). `specrun bench --cases decode` of the three, alternated ROUNDS times so that a
# busy machine slows all alike. Prints per format the decode step (min / median / max over the
# rounds' medians), the bytes a step reads, the share of the measured read bandwidth, and the
# ratios to BF16 against the issue's targets (int4-g32 <= 0.40, fp8-block <= 0.65). Prints,
# never asserts.
#   usage: scripts/bench-quant.sh [OUTDIR, default bench-quant-out]
#   env:   SPECRUN (default build/specrun), REPEATS (default 5), ROUNDS (default 3),
#          THREADS (default 2), MODEL (make-model shape options, default the one above)
set -euo pipefail
cd "$(dirname "$0")/.."
SPECRUN=${SPECRUN:-build/specrun}
OUT=${1:-bench-quant-out}
REPEATS=${REPEATS:-5}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
read -r -a SHAPE <<<"${MODEL:---hidden 768 --layers 12 --heads 12 --kv-heads 12 --intermediate 2048 --vocab 32000}"
[ -x "$SPECRUN" ] || { echo "build first: ./scripts/build.sh" >&2; exit 2; }

declare -A QUANT=([bf16]="" [int4-g32]="--quantize int4-g32 --quant-roles all"
  [fp8-block]="--quantize fp8-block --quant-roles linear")
FORMATS=(bf16 int4-g32 fp8-block)
mkdir -p "$OUT"
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(lscpu | sed -n 's/^Model name: *//p')  load: $(cut -d' ' -f1-3 /proc/loadavg)"
for f in "${FORMATS[@]}"; do
  if [ ! -f "$OUT/$f/target/config.json" ]; then
    # shellcheck disable=SC2086 # the options are words
    "$SPECRUN" make-model "$OUT/$f" "${SHAPE[@]}" --draft-layers 1 ${QUANT[$f]} >/dev/null
  fi
done
for round in $(seq 1 "$ROUNDS"); do
  for f in "${FORMATS[@]}"; do
    "$SPECRUN" bench --model-dir "$OUT/$f/target" --threads "$THREADS" --repeats "$REPEATS" \
      --cases decode --json "$OUT/$f.round$round.json" --overwrite >"$OUT/$f.round$round.txt" 2>&1 ||
      { echo "bench of $f failed: $(tail -3 "$OUT/$f.round$round.txt")" >&2; exit 1; }
  done
  echo "round $round/$ROUNDS done; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
/usr/bin/python3 - "$OUT" "$ROUNDS" "${FORMATS[@]}" <<'PYEOF'
import json, statistics, sys
out, rounds, formats = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for f in formats:
    runs = [json.load(open(f"{out}/{f}.round{r}.json")) for r in range(1, rounds + 1)]
    decode = [next(c for c in j["cases"] if c["name"] == "decode") for j in runs]
    ms = [c["ms_median"] for c in decode]
    rows[f] = dict(ms=ms, bytes=runs[0]["decode_weight_bytes"],
                   pct=statistics.median(c["pct_bandwidth"] for c in decode),
                   kernels=runs[0]["kernels"], quant=runs[0].get("quantization", ""))
print(f"kernels: {rows[formats[0]]['kernels']}")
print(f"{'format':<10} {'MB/step':>8} {'ms/step median':>15} {'(min - max)':>18} {'% bw':>6} "
      f"{'x BF16':>7}  target")
base = statistics.median(rows["bf16"]["ms"])
targets = {"int4-g32": 0.40, "fp8-block": 0.65}
for f in formats:
    r = rows[f]
    med = statistics.median(r["ms"])
    ratio = med / base
    target = f"<= {targets[f]:.2f} {'met' if ratio <= targets[f] else 'NOT met'}" \
        if f in targets else ""
    print(f"{f:<10} {r['bytes'] / 1e6:8.1f} {med:15.2f} ({min(r['ms']):7.2f} - {max(r['ms']):7.2f}) "
          f"{r['pct']:6.1f} {ratio:7.2f}  {target}")
print("bytes ratio (the bound a bandwidth-limited step would reach): " +
      ", ".join(f"{f} {rows[f]['bytes'] / rows['bf16']['bytes']:.2f}" for f in formats[1:]))
PYEOF
