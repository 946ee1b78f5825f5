#!/usr/bin/env bash
# A stopped rank on the CPU backend (issue 18, finding 4): with one of two tp ranks SIGSTOPped
# part-way, the other waits in a collective; after parallel.comm_timeout_s the job fails (exit
# non-zero, within the timeout + 10 s) with a message naming the collective, the group, the phase,
# the timeout and rank 1 as stopped, and the result file opens in h5py holding only whole batches.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 64
write_job job.toml out.h5 prompts.h5
TIMEOUT_S=4
setsid "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set parallel.tp=2 \
  --set parallel.comm_timeout_s=$TIMEOUT_S --set data.batch_size=2 \
  --set debug.inject_phase=verify --set debug.inject_delay_ms=20 >run.log 2>&1 &
pid=$!
# Wait for the first committed batch, then stop rank 1.
for _ in $(seq 1 600); do
  grep -q 'batch 1/' run.log 2>/dev/null && break
  sleep 0.1
done
grep -q 'batch 1/' run.log || { kill -9 -- -"$pid" 2>/dev/null; fail "no batch finished: $(tail -5 run.log)"; }
victim=""
for child in $(pgrep -P "$pid"); do
  if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
    victim=$child
  fi
done
[[ -n $victim ]] || { kill -9 -- -"$pid"; fail "rank 1 not found among mpirun's children"; }
kill -STOP "$victim"
stopped_at=$(date +%s.%N)
# The job must end by itself; a hang is caught by the deadline below.
deadline=$((TIMEOUT_S + 10))
for _ in $(seq 1 $((deadline * 10))); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  kill -CONT "$victim" 2>/dev/null || true
  kill -9 -- -"$pid" 2>/dev/null || true
  pkill -9 -f "specrun run job.toml --set parallel.tp=2" || true
  fail "the job still runs $deadline s after rank 1 was stopped: $(tail -5 run.log)"
fi
set +e
wait "$pid"
rc=$?
set -e
took=$(echo "$(date +%s.%N) - $stopped_at" | bc)
kill -CONT "$victim" 2>/dev/null || true
kill -9 "$victim" 2>/dev/null || true
cat run.log | grep -v '^\[' | head -8
[[ $rc -ne 0 ]] || fail "the job exited 0 with a stopped rank"
grep -q "did not complete within parallel.comm_timeout_s = $TIMEOUT_S s" run.log ||
  fail "no timeout message: $(tail -5 run.log)"
grep -q "tensor-parallel group" run.log || fail "the message does not name the group"
grep -qE "rank 1 \(world rank 1, pid $victim on [^)]+\): stopped \(SIGSTOP or a debugger\), it did not arrive" run.log ||
  fail "the message does not name rank 1 as the stopped one: $(grep error run.log)"
grep -qE "(in the (draft|verify|sample|other|prefill) phase|outside the decoding phases)" run.log ||
  fail "the message does not name the phase: $(grep error run.log)"
"$PY" - <<'PY' || fail "the result file is not readable after the timeout"
import h5py
f = h5py.File("out.h5", "r")
for mode in ("baseline", "speculative"):
    if mode in f:
        g = f[mode]
        print(mode, "batches committed:", int(g.attrs["batches_committed"]))
PY
echo "stopped_rank: the job failed $took s after rank 1 was stopped (comm_timeout_s = $TIMEOUT_S)"
