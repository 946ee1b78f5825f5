#!/usr/bin/env bash
# `specrun sweep` under faults (issue 40), on a tiny synthetic pair, one rank per point:
#   1. SIGUSR1 to the sweep (not to mpirun) part-way through point 1: the point's launcher gets
#      SIGUSR1, the run stops at a batch boundary, the sweep exits 75 at once with no launcher
#      left; SIGTERM to the sweep during point 2 of the next run does the same; the third run
#      skips point 1 (finished), resumes point 2 and ends equal to an uninterrupted sweep.
#      Before, the sweep ignored both signals (only a failed point checked the flag).
#   2. A link planted at a point's log: the point is not run, the link's target is untouched
#      (the log was opened with O_APPEND, following links).
#   3. A finished file of another configuration at a point's name: refused, not skipped.
#   4. Values that differ only in characters the file name replaces (two points, one file), a
#      name too long for a file, a grid of 10^9 points, a read-only --out: exit 2 before
#      anything runs, naming the points, the count and limit, the folder.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
SPECRUN_BIN=$(realpath "$SPECRUN_BIN")
source "$E2E_DIR/slurm_fixture.sh"
RO_RUN="$E2E_DIR/ro_run.sh"
make_fixture "$PWD/fx" 24 2 20
cd fx
SWEEP=("$SPECRUN_BIN" sweep job.toml --np 1 --mpirun-args --oversubscribe)

# start_sweep LOG ARGS...: the sweep in the background; its pid in SWEEP_PID.
start_sweep() {
  local log=$1
  shift
  "${SWEEP[@]}" "$@" >"$log" 2>&1 &
  SWEEP_PID=$!
}
# stop_sweep NAME SIGNAL POINT_LOG: once POINT_LOG shows a committed batch, SIGNAL to the sweep;
# it must exit 75 within 60 s with its launcher gone.
stop_sweep() {
  local name=$1 sig=$2 point_log=$3 launcher rc=0 k
  wait_for_line "$point_log" '\] batch [0-9]+/' 60 || {
    kill -9 "$SWEEP_PID" 2>/dev/null || true
    fail "$name: no batch in $point_log within 60 s: $(tail -5 "$point_log")"
  }
  launcher=$(pgrep -P "$SWEEP_PID" | head -1)
  [[ -n $launcher ]] || fail "$name: the sweep has no launcher running"
  kill "-$sig" "$SWEEP_PID"
  for ((k = 0; k < 600 && rc == 0; ++k)); do
    kill -0 "$SWEEP_PID" 2>/dev/null || rc=1
    ((rc)) || sleep 0.1
  done
  if kill -0 "$SWEEP_PID" 2>/dev/null; then
    pkill -9 -P "$launcher" || true
    kill -9 "$launcher" "$SWEEP_PID" 2>/dev/null || true
    fail "$name: the sweep still runs 60 s after SIG$sig"
  fi
  rc=0
  wait "$SWEEP_PID" || rc=$?
  [[ $rc -eq 75 ]] || fail "$name: the sweep exited $rc after SIG$sig, expected 75: $(cat "$name.log")"
  ! kill -0 "$launcher" 2>/dev/null || fail "$name: the point's launcher ($launcher) outlived the sweep"
  grep -q "sweep stopped by a signal at point" "$name.log" || fail "$name: no stop message: $(cat "$name.log")"
  echo "$name: SIG$sig stopped the sweep (exit 75)"
}
finished() { "$PY" -c 'import h5py,sys; sys.exit(0 if h5py.File(sys.argv[1], "r").attrs["finished"] else 1)' "$1"; }

# 1. Signals, then resume.
GRID=(--grid decode.draft_len=2,3 --out sw)
start_sweep usr1.log "${GRID[@]}"
stop_sweep usr1 USR1 sw/draft_len=2.log
! finished sw/draft_len=2.h5 || fail "point 1 finished although stopped"
[[ ! -e sw/draft_len=3.h5 ]] || fail "point 2 started after the stop"
start_sweep term.log "${GRID[@]}"
stop_sweep term TERM sw/draft_len=3.log
grep -q "point 1/2 draft_len=2 (resuming) ... done" term.log || fail "point 1 was not resumed: $(cat term.log)"
finished sw/draft_len=2.h5 || fail "point 1 is not finished"
! finished sw/draft_len=3.h5 || fail "point 2 finished although stopped"
"${SWEEP[@]}" "${GRID[@]}" >again.log 2>&1 || fail "the third sweep failed: $(cat again.log)"
grep -q "sweep: 2 points, 1 run, 1 already finished, 0 failed" again.log &&
  grep -q "point 2/2 draft_len=3 (resuming)" again.log || fail "the third sweep: $(cat again.log)"
"${SWEEP[@]}" --grid decode.draft_len=2,3 --out ref >ref.log 2>&1 || fail "the reference sweep failed"
for k in 2 3; do
  "${SLURM_CHECK[@]}" equal "ref/draft_len=$k.h5" "sw/draft_len=$k.h5" ||
    fail "draft_len=$k: stopped and resumed differs from the uninterrupted sweep"
done
echo "signals: the stopped sweep resumed to the uninterrupted one's results"

FAST=(--set data.max_prompts=4 --set debug.inject_delay_ms=0 --set debug.inject_phase=none)
# 2. A link planted at a point's log.
echo precious >victim
mkdir sw2 && ln -s ../victim sw2/draft_len=2.log
rc=0
"${SWEEP[@]}" "${FAST[@]}" --grid decode.draft_len=2,3 --out sw2 >link.log 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "a planted log link: exit $rc, expected 1: $(cat link.log)"
grep -q "point 1/2 draft_len=2: FAILED, not run: cannot write log file sw2/draft_len=2.log: it is a symbolic link" link.log ||
  fail "the planted link is not named: $(cat link.log)"
[[ $(cat victim) == precious && ! -e sw2/draft_len=2.h5 ]] || fail "the point ran or wrote through the link"
finished sw2/draft_len=3.h5 || fail "the other point did not run"

# 3. A finished result of another configuration where a point's file goes.
mkdir sw3 && cp sw2/draft_len=3.h5 sw3/draft_len=4.h5
rc=0
"${SWEEP[@]}" "${FAST[@]}" --grid decode.draft_len=4 --out sw3 >other.log 2>&1 || rc=$?
[[ $rc -eq 1 ]] && grep -q "FAILED, not run: sw3/draft_len=4.h5 is the finished result of another configuration" other.log ||
  fail "another configuration's file: exit $rc, $(cat other.log)"
cmp -s sw2/draft_len=3.h5 sw3/draft_len=4.h5 || fail "the other file was modified"

# 4. Refused before anything runs.
expect_exit 2 "points 1 \(draft.path=models/draft\) and 2 \(draft.path=models_draft\) would share the result file path=models_draft.h5" \
  collide.log -- "${SWEEP[@]}" --grid draft.path=models/draft,models_draft --out sw4
[[ ! -e sw4 ]] || fail "the colliding sweep created sw4"
long=$(printf 'm%.0s' {1..300})
expect_exit 2 "point 1 \(draft.path=m+\) would be written to a file named 305 bytes" long.log -- \
  "${SWEEP[@]}" --grid "draft.path=$long" --out sw4
values=$(seq -s, 1 1000)
expect_exit 2 "the grid has 1000000000 points \(1000 x 1000 x 1000 values\), more than the 100000" \
  huge.log -- "${SWEEP[@]}" --grid "decode.draft_len=$values" --grid "decode.tree_nodes=$values" \
  --grid "job.seed=$values" --count
if mode=$("$RO_RUN" --mode); then
  mkdir ro
  expect_exit 2 "cannot create the output folder ro/sw: (the file system holding ro is read-only|permission denied: the folder ro is not writable)" \
    ro.log -- "$RO_RUN" ro "${SWEEP[@]}" "${FAST[@]}" --grid decode.draft_len=2 --out ro/sw
  echo "read-only --out ($mode): $(head -1 ro.log)"
else
  echo "SKIPPED: the read-only --out check (root, without user namespaces or setpriv)"
  exit 77
fi
echo "sweep_faults: OK"
