#!/usr/bin/env bash
# specrun's own stop-on-signal path, without Slurm, on 4 ranks (dp 4), as slurm/specrun.sbatch
# relies on it (run_resume.sh covers a single USR1 to mpirun on 2 ranks, SIGKILL and resume
# errors):
#   1. SIGUSR1 to the mpirun process part-way, and again 0.3 s later (the sbatch script repeats
#      its stop request until the step ends): mpirun forwards both to every rank, the job still
#      stops once, at a batch boundary, with exit code 75;
#   2. SIGTERM to one rank only (rank 1, not mpirun): the stop is collective, every rank stops
#      at the same boundary, exit 75.
# Each time the file holds only whole batches with `finished` empty, and `run --resume`
# completes it to equal an uninterrupted run (greedy tokens and counts per prompt), resumes = 1.
set -euo pipefail
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
SPECRUN_BIN=$(realpath "$SPECRUN_BIN")
source "$(dirname "$0")/slurm_fixture.sh"
N=64 BS=2 DELAY_MS=20 NP=4

make_fixture "$PWD/fx" "$N" "$BS" "$DELAY_MS"
cd fx
mpirun -np "$NP" "$SPECRUN_BIN" run job.toml --set job.output=out/reference.h5 \
  --set debug.inject_delay_ms=0 --set debug.inject_phase=none >reference.log 2>&1 ||
  {
    cat reference.log
    fail "the reference run failed"
  }
"${SLURM_CHECK[@]}" complete out/reference.h5 --prompts "$N" --batch-size "$BS" ||
  fail "reference result incomplete"

# stop_and_resume NAME TARGET SIGNAL [TIMES]: TARGET is "mpirun" or "rank1"; the signal is
# sent TIMES times (default 1), 0.3 s apart.
stop_and_resume() {
  local name=$1 target=$2 sig=$3 times=${4:-1} out=out/$1.h5 pid victim rc k
  mpirun -np "$NP" "$SPECRUN_BIN" run job.toml --set "job.output=$out" >"$name.log" 2>&1 &
  pid=$!
  wait_for_line "$name.log" '\[(baseline|speculative)\] batch [0-9]+/' 60 || {
    kill -9 "$pid" 2>/dev/null || true
    cat "$name.log"
    fail "$name: no batch finished within 60 s"
  }
  if [[ $target == mpirun ]]; then
    victim=$pid
  else
    # The ranks are mpirun's children (one node); rank 1 by its OMPI_COMM_WORLD_RANK.
    victim=""
    for child in $(pgrep -P "$pid"); do
      if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
        victim=$child
      fi
    done
    [[ -n $victim ]] || fail "$name: rank 1 not found among mpirun's children ($(pgrep -P "$pid" | xargs))"
  fi
  for ((k = 0; k < times; ++k)); do
    ((k == 0)) || sleep 0.3
    kill "-$sig" "$victim" 2>/dev/null || echo "$name: the process had already ended"
    echo "$name: sent SIG$sig to $target (pid $victim)"
  done
  set +e
  wait "$pid"
  rc=$?
  set -e
  grep -E 'stopped by a signal|\] batch 1/' "$name.log" || true
  [[ $rc -eq 75 ]] || {
    tail -n 30 "$name.log"
    fail "$name: mpirun exited $rc after SIG$sig, expected 75"
  }
  [[ $(grep -cE 'stopped by a signal after [0-9]+ of [0-9]+ batches' "$name.log") -eq 1 ]] ||
    fail "$name: expected exactly one stop message"
  cp "$out" "$name.stopped.h5"
  "${SLURM_CHECK[@]}" partial "$name.stopped.h5" --prompts "$N" --batch-size "$BS" ||
    fail "$name: the stopped file is not a set of whole batches"
  "${SLURM_CHECK[@]}" attr "$name.stopped.h5" finished "" || fail "$name: finished is set"

  mpirun -np "$NP" "$SPECRUN_BIN" run job.toml --set "job.output=$out" --resume \
    >"$name.resume.log" 2>&1 || {
    tail -n 30 "$name.resume.log"
    fail "$name: run --resume failed"
  }
  "${SLURM_CHECK[@]}" complete "$out" --prompts "$N" --batch-size "$BS" ||
    fail "$name: the resumed file is incomplete"
  "${SLURM_CHECK[@]}" attr "$out" resumes 1 || fail "$name: resumes is not 1"
  "${SLURM_CHECK[@]}" equal out/reference.h5 "$out" ||
    fail "$name: stop + resume differs from the uninterrupted run"
  echo "$name: ok"
}

stop_and_resume usr1-twice mpirun USR1 2
stop_and_resume term-rank1 rank1 TERM
echo "signal_usr1: all checks passed"
