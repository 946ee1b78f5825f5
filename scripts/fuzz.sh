#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang, ASan and UBSan (build-fuzz/) and runs
# each one for SECONDS (default 60) from its seed corpus, one after the other. Exits 1 when a
# target crashed, hung (an input slower than --timeout), leaked past the RSS limit or failed to
# start; the input that did it is kept in build-fuzz/artifacts/<target>/.
#   usage: scripts/fuzz.sh [SECONDS] [TARGET ...]   (no TARGET: every tests/fuzz/fuzz_*.cpp)
#   env:   FUZZ_BUILD_DIR (default build-fuzz), FUZZ_CXX (default clang++-16), FUZZ_TIMEOUT
#          (seconds one input may take, default 10), FUZZ_RSS_MB (default 2048),
#          FUZZ_READ_TIMEOUT (SPECRUN_READ_CHECK_TIMEOUT_S of the HDF5 targets, default 0.3)
# Installs Debian's clang-16, libclang-rt-16-dev and libomp-16-dev when missing (unless FUZZ_CXX
# names another compiler).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  for src in tests/fuzz/fuzz_*.cpp; do
    name=${src#tests/fuzz/fuzz_}
    TARGETS+=("${name%.cpp}")
  done
fi
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
CXX_BIN=${FUZZ_CXX:-clang++-16}
CC_BIN=${CXX_BIN/clang++/clang}
TIMEOUT=${FUZZ_TIMEOUT:-10}
RSS_MB=${FUZZ_RSS_MB:-2048}

if [ -z "${FUZZ_CXX:-}" ]; then
  ./scripts/install-deps.sh clang-16 libclang-rt-16-dev libomp-16-dev
elif ! command -v "$CXX_BIN" >/dev/null; then
  echo "fuzz.sh: $CXX_BIN not found" >&2
  exit 2
fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  # -O1 with assertions on: the usual fuzzing build (and half the compile time of -O3).
  CC=$CC_BIN CXX=$CXX_BIN cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DSPECRUN_CUDA=OFF -DSPECRUN_FUZZ=ON -DSPECRUN_WERROR=ON \
    >/dev/null
fi
cmake --build "$BUILD" -j2 --target "${TARGETS[@]/#/fuzz_}"

# Each run works in its own scratch directory (the targets write their inputs to $TMPDIR).
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
failed=()
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t"
  artifacts="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  log="$BUILD/fuzz-$t.log"
  set +e
  # The new inputs go to the build's corpus; the seeds in tests/fuzz/corpus are read only.
  # The HDF5 targets (prompt, result and sweep point files) read each file in a child first
  # (src/common/isolated.h): with a limit of 0.3 s (the seeds read in ~30 ms) a file that hangs
  # libhdf5 is refused quickly and does not reach libFuzzer's --timeout.
  SPECRUN_READ_CHECK_TIMEOUT_S=${FUZZ_READ_TIMEOUT:-0.3} \
    TMPDIR=$SCRATCH UBSAN_OPTIONS=print_stacktrace=1 ASAN_OPTIONS=detect_leaks=0 \
    "$BUILD/tests/fuzz/fuzz_$t" "$corpus" "tests/fuzz/corpus/$t" \
    -max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT" -rss_limit_mb="$RSS_MB" \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  refused=$(grep -o 'refused by the child read: .*' "$log" | tail -1 || true)
  if [ $rc -eq 0 ]; then
    printf 'fuzz %-14s ok      %8s runs in %ss, %s edges covered%s\n' "$t" "${runs:-?}" \
      "$SECONDS_EACH" "${cov:-?}" "${refused:+; $refused}"
  else
    printf 'fuzz %-14s FAILED  (exit %d) after %s runs; log %s, input in %s\n' "$t" "$rc" \
      "${runs:-?}" "$log" "$artifacts"
    grep -E '^==[0-9]+==ERROR|ALARM|SUMMARY|runtime error|deadly signal' "$log" | head -5 | sed 's/^/    /'
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: every target ran ${SECONDS_EACH}s without a crash, a hang or an OOM"
