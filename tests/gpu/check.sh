#!/usr/bin/env bash
# The GPU check, in one script (about 5 minutes on one H200; budgeted for under 8):
#   1. configure and build with CUDA (-DSPECRUN_CUDA=ON -DSPECRUN_WERROR=ON, -j16);
#   2. run every gpu-labelled test: each CUDA op against the CPU reference (test_cuda_ops), the
#      device token decisions against the CPU rules (test_cuda_sampling), the model graph on
#      CUDA against the same graph on the CPU and its cache invariants (test_cuda_transformer),
#      the device self-test (test_cuda), and the end-to-end greedy equality speculative == baseline
#      under `mpirun -np 1 specrun run` (gpu_greedy_equality);
#   3. the benchmark: decode and verify step times of a ~1.1B-parameter synthetic model and the
#      achieved memory bandwidth against the measured copy bandwidth (test_cuda_bench), with a
#      figure.
# Logs, the benchmark JSON and the figure go to $OUT when it is set (else BUILD/check-out).
# Exit status: 0 when everything passed; otherwise the first failing stage's status. A stage
# that fails does not stop the later ones (their logs are still useful).
#   usage: tests/gpu/check.sh   (from anywhere; BUILD_DIR overrides build-gpucheck, JOBS the -j16)
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$SRC/build-gpucheck}
OUT=${OUT:-$BUILD/check-out}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
status=0
stage() {  # stage NAME COMMAND...: runs, logs to $OUT/NAME.log, keeps the first failure
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name: $*"
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "   $name: exit $rc after $((SECONDS - t0)) s (log: $OUT/$name.log)"
  if [[ $rc -ne 0 ]]; then
    tail -n 40 "$OUT/$name.log"
    [[ $status -eq 0 ]] && status=$rc
  fi
  return $rc
}

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv 2>&1
  git -C "$SRC" log -1 --format="commit: %H %s" 2>/dev/null
  git -C "$SRC" status --short 2>/dev/null | head -20
} | tee "$OUT/environment.txt"

stage configure cmake -S "$SRC" -B "$BUILD" -DSPECRUN_CUDA=ON -DSPECRUN_WERROR=ON \
  -DCMAKE_BUILD_TYPE=Release || { echo "configure failed"; exit 1; }
stage build cmake --build "$BUILD" -j"${JOBS:-16}" || { echo "build failed"; exit 1; }
"$BUILD/specrun" env >"$OUT/specrun_env.txt" 2>&1

# Every gpu-labelled test, the end-to-end greedy equality included. The benchmark skips here
# (it needs SPECRUN_GPU_BENCH=1) and runs below on its own.
stage gpu_tests ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 600 \
  --output-junit "$OUT/gpu_tests.xml"
grep -E "tests passed|Skipped|Failed|\*\*\*" "$OUT/gpu_tests.log" | head -40

stage bench env SPECRUN_GPU_BENCH=1 SPECRUN_BENCH_JSON="$OUT/bench.json" \
  SPECRUN_BENCH_DIR="$BUILD/bench-model" "$BUILD/tests/test_cuda_bench" --gtest_color=no
sed -n '/^device:/,/verify (5 tokens)/p' "$OUT/bench.log"
if [[ -f "$OUT/bench.json" ]]; then
  /usr/bin/python3 "$SRC/tests/gpu/plot_bench.py" "$OUT/bench.json" "$OUT/bench.png" ||
    echo "(figure not written)"
fi
rm -rf "$BUILD/bench-model"  # 2.2 GB

echo "== GPU check: exit $status (outputs in $OUT)"
exit $status
