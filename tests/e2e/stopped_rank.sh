#!/usr/bin/env bash
# A stopped rank on the CPU backend, which hung the job for ever (issues 18 and 40): rank 1 of a
# 2-rank job is SIGSTOPped after its first batch, in three jobs:
#   tp2      a tp-2 decoding job: rank 0 then waits in a tensor-parallel collective;
#   dp2      a tp-1, dp-2 decoding job: rank 0 then waits at a batch boundary, in a collective on
#            the world (the stop agreement or the gather of the batch's results);
#   dataset  a dp-2 dataset job: rank 0 decodes its own prompts, then waits at the end of the job.
# Each job must fail by itself (exit non-zero; a bound only a hang exceeds catches a hang) with a
# message naming the collective, the group, the phase, parallel.comm_timeout_s and rank 1 as the
# stopped one, and leave its output readable in h5py with what was committed before.
#
# When mpirun ends a failed job it sends the ranks left SIGCONT, then SIGTERM and SIGKILL a second
# apart: the stopped rank runs again. In the decoding jobs rank 1 is stopped inside a collective
# (rank 0 is stopped for a moment first, so that rank 1 runs into one and waits there), where
# before issue 40 its watchdog, resumed, at once blamed rank 0 (dead) in a second error. Now it
# must blame nobody and say that the job failed while it was stopped. Every rank is killed at the
# end.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 64
make_prompt_file many.h5 400 --min-len 3 --max-len 20
write_job job.toml out.h5 prompts.h5
write_dataset_job dataset.toml stopped-dataset data/out.h5
mkdir -p data

TIMEOUT_S=4
HANG_S=120  # far above what a working watchdog takes: exceeded only by a hang
pids=()     # every mpirun and rank this script started
kill_all() {
  local p
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill -9 "$p" 2>/dev/null || true
  done
}
trap 'kill_all; cleanup_shm' EXIT

# wait_for SECONDS COMMAND...: polls COMMAND every 0.1 s until it succeeds; fails after SECONDS.
wait_for() {
  local limit=$1 k
  shift
  for ((k = 0; k < limit * 10; ++k)); do
    "$@" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# stop_rank1 NAME READY INSIDE -- ARGS...: runs `specrun run ARGS` on 2 ranks, waits until the
# command READY succeeds (rank 1's first batch is committed), stops rank 1 (INSIDE = yes: inside a
# collective, by stopping rank 0 for a moment first), and checks how the job ends.
stop_rank1() {
  local name=$1 ready=$2 inside=$3
  shift 4
  setsid "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run "$@" --set parallel.comm_timeout_s=$TIMEOUT_S \
    >"$name.log" 2>&1 &
  local launcher=$!
  pids+=("$launcher")
  wait_for 60 eval "$ready" || fail "$name: rank 1 committed nothing within 60 s: $(tail -5 "$name.log")"
  local first victim
  first=$(rank_pid "$launcher" 0)
  victim=$(rank_pid "$launcher" 1)
  [[ -n $first && -n $victim ]] || fail "$name: ranks 0 and 1 not found among mpirun's children"
  pids+=("$first" "$victim")
  if [[ $inside == yes ]]; then
    # Rank 1 runs on into a collective with rank 0 (the next one of the step, or the batch
    # boundary) and waits there; 1.5 s is ample for that and well under the timeout.
    kill -STOP "$first"
    sleep 1.5
    kill -STOP "$victim"
    kill -CONT "$first"
  else
    kill -STOP "$victim"
  fi
  local stopped_at
  stopped_at=$(date +%s.%N)
  wait_for "$HANG_S" eval "! kill -0 $launcher" ||
    fail "$name: the job still runs $HANG_S s after rank 1 was stopped: $(tail -5 "$name.log")"
  local rc=0
  wait "$launcher" || rc=$?
  local took
  took=$(echo "$(date +%s.%N) - $stopped_at" | bc)
  # Our own SIGCONT too, in case mpirun left rank 1 stopped; anything it prints shows meanwhile.
  kill -CONT "$victim" 2>/dev/null || true
  sleep 2
  grep -v '^\[' "$name.log" | head -8
  [[ $rc -ne 0 ]] || fail "$name: the job exited 0 with a stopped rank"
  grep -q "did not complete within parallel.comm_timeout_s = $TIMEOUT_S s" "$name.log" ||
    fail "$name: no timeout message: $(tail -5 "$name.log")"
  grep -qE "^error: \[rank 0@[^]]+\] the [a-z() -]+ on the $GROUP group \(2 ranks, this one is its rank 0\)" "$name.log" ||
    fail "$name: the message does not name the collective and the $GROUP group: $(grep error "$name.log")"
  grep -qE "rank 1 \(world rank 1, pid $victim on [^)]+\): stopped \(SIGSTOP or a debugger\), it did not arrive" "$name.log" ||
    fail "$name: the message does not name rank 1 as the stopped one: $(grep error "$name.log")"
  grep -qE "$PHASE" "$name.log" || fail "$name: the message does not name the phase (/$PHASE/): $(grep error "$name.log")"
  # One error, rank 0's: the resumed rank 1 blames nobody.
  [[ $(grep -c '^error:' "$name.log") -eq 1 ]] ||
    fail "$name: more than one error (the resumed rank 1 blames rank 0?): $(grep '^error:' "$name.log")"
  ! grep -qE "rank 0 \(world rank 0, pid $first" "$name.log" ||
    fail "$name: rank 0 is blamed: $(grep -E "rank 0 \(world rank 0" "$name.log")"
  if [[ $inside == yes ]]; then
    grep -qE "^note: \[rank 1@[^]]+\] this rank was stopped \(SIGSTOP or a debugger\) for [0-9.]+ s, and other ranks of the [a-z-]+ group ended meanwhile: the job failed while this rank was stopped" "$name.log" ||
      fail "$name: the resumed rank 1 does not say that it was the stopped one: $(grep -v '^\[' "$name.log" | head -20)"
  fi
  echo "$name: mpirun exited $took s after rank 1 was stopped (comm_timeout_s = $TIMEOUT_S)"
}

# decoding_result NAME FILE MIN: the result file reads in h5py with at least MIN batches committed
# (rank 1's first among them).
decoding_result() {
  "$PY" - "$2" "$3" <<'PY' || fail "$1: the result file is not readable after the timeout"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
want = int(sys.argv[2])
total = 0
for mode in ("baseline", "speculative"):
    if mode in f:
        n = int(f[mode].attrs["batches_committed"])
        print(mode, "batches committed:", n)
        total += n
assert total >= want, f"{total} batches committed, expected at least {want}"
PY
}

# With tp 2 and dp 1 the world is the tensor-parallel group's two ranks: rank 0 may wait on either.
GROUP='(tensor-parallel|world)' PHASE='in the (draft|verify|sample|other|prefill|batch-boundary) phase|outside the decoding phases'
stop_rank1 tp2 "grep -q 'batch 1/' tp2.log" yes -- job.toml --set job.output=tp2.h5 \
  --set parallel.tp=2 --set data.batch_size=2 --set debug.inject_phase=verify \
  --set debug.inject_delay_ms=20
decoding_result tp2 tp2.h5 1

# Group 1 decodes batch 2 of each round: "batch 2/" is its first, gathered and written.
GROUP=world PHASE='in the batch-boundary phase'
stop_rank1 dp2 "grep -q 'batch 2/' dp2.log" yes -- job.toml --set job.output=dp2.h5 \
  --set parallel.tp=1 --set data.batch_size=2 --set debug.inject_phase=verify \
  --set debug.inject_delay_ms=20
decoding_result dp2 dp2.h5 2

GROUP=world PHASE='in the (generation|end-of-job) phase'
# Small parts (one per sequence), short sequences and many prompts: rank 1 is stopped early in its
# stream, and rank 0 ends its own in seconds.
stop_rank1 dataset "test -e data/out.shard-1-of-2.part-00000.h5" no -- dataset.toml \
  --set data.prompts=many.h5 --set data.batch_size=2 --set decode.max_new_tokens=32 \
  --set dataset.hidden_layers=1,final --set dataset.commit_s=0
"$PY" - <<'PY' || fail "dataset: the shards' sealed parts are not readable after the timeout"
import glob, h5py
for shard in (0, 1):
    parts = sorted(glob.glob(f"data/out.shard-{shard}-of-2.part-*.h5"))
    n = sum(len(h5py.File(p, "r")["sequences/prompt_index"]) for p in parts)
    print(f"shard {shard}: {len(parts)} sealed parts, {n} sequences")
    assert n >= 1, f"shard {shard} holds no committed sequence"
PY
echo "stopped_rank: all checks passed"
