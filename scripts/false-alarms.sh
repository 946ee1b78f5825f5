#!/usr/bin/env bash
# How often `specrun compare` cries wolf, and how often it still catches a real slowdown, when the
# host is busy (issue 17; the figure is in docs/analysis.md, "Host load").
#
#   scripts/false-alarms.sh [PAIRS=10] [OUT_DIR=false-alarms]
#
# One job (the trained code pair on 2 ranks, tp 2, 2 threads each, 16 prompts, 32 new tokens;
# a synthetic pair when ../shared is absent) is run as a reference, then:
#   identical reruns  PAIRS runs of the same job, half of them (every other one) with a competing
#                     CPU-bound process (HOGS of them, default 1: `sha256sum /dev/zero`) for the
#                     whole run; `specrun compare REF RERUN` must not say "regression" (exit 1);
#   slower code       PAIRS runs with debug.inject_delay_ms = INJECT_MS (default 0.5) spun in the
#                     speculative verify phase, half of them under the same competing process;
#                     compare must exit 1 naming speculative verify.
# Prints one line per comparison (exit code, first verdict line), then the two rates, and writes
# every result file and comparison to OUT_DIR. Needs a quiet machine apart from the hog it
# starts (the load average is printed): it measures, it asserts nothing.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
PAIRS=${1:-10}
OUT=$(realpath -m "${2:-false-alarms}")
BIN=${SPECRUN_BIN:-$SRC/build/specrun}
SHARED=${SPECRUN_SHARED_DIR:-$SRC/../shared}
HOGS=${HOGS:-1}
INJECT_MS=${INJECT_MS:-0.5}
NP=${NP:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$OUT"
cd "$OUT"

if [[ -f $SHARED/models/code-target/config.json ]]; then
  TARGET=$SHARED/models/code-target DRAFT=$SHARED/models/code-draft
  [[ -f prompts.h5 ]] || "$BIN" prepare "$SHARED/prompts/code_prompts.jsonl" prompts.h5 >/dev/null
else
  [[ -f models/target/config.json ]] || "$BIN" make-model models --hidden 256 --layers 6 \
    --heads 8 --kv-heads 4 --intermediate 768 --vocab 2048 --draft-layers 2 >/dev/null
  TARGET=$OUT/models/target DRAFT=$OUT/models/draft
  python3 -c "
import json, random
random.seed(4)
with open('prompts.jsonl', 'w') as f:
    for i in range(16):
        f.write(json.dumps({'id': f'p{i}', 'tokens': [1] + [random.randint(3, 2047) for _ in range(60)]}) + '\n')"
  [[ -f prompts.h5 ]] || "$BIN" prepare prompts.jsonl prompts.h5 >/dev/null
fi
cat >job.toml <<TOML
[job]
name = "false-alarms"
output = "ref.h5"
overwrite = true
[target]
path = "$TARGET"
[draft]
kind = "model"
path = "$DRAFT"
[parallel]
tp = 2
threads = ${THREADS:-2}
[data]
prompts = "prompts.h5"
batch_size = 4
max_prompts = 16
[decode]
max_new_tokens = 32
draft_len = 4
stop_at_eos = false
TOML

hog_pids=()
start_hogs() {
  for ((h = 0; h < HOGS; h++)); do
    sha256sum /dev/zero &
    hog_pids+=($!)
  done
}
stop_hogs() {
  ((${#hog_pids[@]})) && kill "${hog_pids[@]}" 2>/dev/null
  wait "${hog_pids[@]}" 2>/dev/null || true
  hog_pids=()
}
trap stop_hogs EXIT

run() {  # run NAME [--set ...]
  local name=$1
  shift
  mpirun -np "$NP" "$BIN" run job.toml --set job.output="$name.h5" "$@" >"$name.log" 2>&1 ||
    { echo "run $name failed:"; tail -5 "$name.log"; exit 1; }
}

echo "false-alarms: $PAIRS pairs each, hog = $HOGS x sha256sum /dev/zero on every other run," \
  "inject = $INJECT_MS ms in speculative verify; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
run ref
false_alarms=0 false_quiet=0 false_hog=0 caught=0 caught_quiet=0 caught_hog=0
for kind in rerun slower; do
  for ((i = 1; i <= PAIRS; i++)); do
    hog=$((i % 2 == 0))
    name=$kind-$i
    sets=()
    [[ $kind == slower ]] && sets=(--set debug.inject_phase=verify --set "debug.inject_delay_ms=$INJECT_MS")
    ((hog)) && start_hogs
    run "$name" "${sets[@]}"
    stop_hogs
    set +e
    "$BIN" compare ref.h5 "$name.h5" >"$name.compare.txt" 2>&1
    rc=$?
    set -e
    verdict=$(head -1 "$name.compare.txt")
    printf '  %-9s hog %d  exit %d  %s\n' "$name" "$hog" "$rc" "${verdict:0:150}"
    if [[ $kind == rerun && $rc -eq 1 ]]; then
      false_alarms=$((false_alarms + 1))
      ((hog)) && false_hog=$((false_hog + 1)) || false_quiet=$((false_quiet + 1))
    fi
    if [[ $kind == slower && $rc -eq 1 ]] && grep -q "speculative verify" <(head -5 "$name.compare.txt"); then
      caught=$((caught + 1))
      ((hog)) && caught_hog=$((caught_hog + 1)) || caught_quiet=$((caught_quiet + 1))
    fi
  done
done
half=$((PAIRS / 2))
echo "false alarms (identical reruns flagged as a regression): $false_alarms of $PAIRS" \
  "($false_quiet of $((PAIRS - half)) quiet, $false_hog of $half under the hog)"
echo "detections (the $INJECT_MS ms verify slowdown flagged, naming speculative verify): $caught of $PAIRS" \
  "($caught_quiet of $((PAIRS - half)) quiet, $caught_hog of $half under the hog)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); outputs in $OUT"
