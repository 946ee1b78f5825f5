#!/usr/bin/env bash
# Preemption-safe requeue of slurm/specrun.sbatch on a real one-node Slurm. For each of
#   A. srun launcher, `scancel --signal=USR1 --batch` (what --signal=B:USR1@T delivers), and
#   B. mpirun launcher on the CPU (--gpus-per-node=0), `scancel --signal=TERM --batch`,
# the job is signalled part-way and must: stop at a batch boundary (specrun exits 75), leave a
# file of whole batches with `finished` empty, requeue itself (scontrol requeue), restart with
# SLURM_RESTART_COUNT=1 and --resume, and end COMPLETED with Restarts=1 and a complete result
# file equal (greedy tokens and counts, per prompt) to an uninterrupted run without Slurm.
#   C. USR1 as soon as srun starts (before specrun's handlers exist): the launcher drops it or
#      it kills the ranks; either way the script must requeue (re-sending the stop every
#      SPECRUN_STOP_RESEND_S, or requeueing a run the signal killed) and the job complete.
# Installs Slurm and MUNGE if missing (where it cannot: skipped, exit 77; under CI=true: fails).
set -euo pipefail
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
: "${SPECRUN_SOURCE_DIR:?SPECRUN_SOURCE_DIR must point to the source tree}"
SPECRUN_BIN=$(realpath "$SPECRUN_BIN")
SRC=$SPECRUN_SOURCE_DIR
source "$SRC/tests/e2e/slurm_cluster.sh"
source "$SRC/tests/e2e/slurm_fixture.sh"
WORK=$PWD
# 64 prompts in batches of 2 on 8 ranks: 4 rounds per mode, 8 batch boundaries; 20 ms per
# verify step keeps the job running for seconds, long enough to be signalled part-way.
N=64 BS=2 DELAY_MS=20

slurm_require_packages
make_fixture "$WORK/fx" "$N" "$BS" "$DELAY_MS"
cd "$WORK/fx"

# The uninterrupted reference, without Slurm and without the delay (tokens do not depend on it).
mpirun -np 4 "$SPECRUN_BIN" run job.toml --set job.output=out/reference.h5 \
  --set debug.inject_delay_ms=0 --set debug.inject_phase=none >reference.log 2>&1 ||
  {
    cat reference.log
    fail "the reference run failed"
  }
"${SLURM_CHECK[@]}" complete out/reference.h5 --prompts "$N" --batch-size "$BS" ||
  fail "reference result incomplete"

trap slurm_cluster_stop EXIT
slurm_cluster_start "$WORK/cluster" 16827
# The environment check under the launcher is tested by slurm_job; skip it here (faster).
export SPECRUN_BIN SPECRUN_JOB=job.toml SPECRUN_ENV_CHECK=0

# signal_and_check NAME SIGNAL LAUNCHER WHEN [sbatch options...]
# WHEN = batch: signal once a batch is committed, and check the stop at a batch boundary;
# WHEN = start: signal as soon as the launcher starts (ranks not yet up, or loading models),
# and check only that the job still requeues and completes correctly.
signal_and_check() {
  local name=$1 sig=$2 launcher=$3 when=$4
  shift 4
  local log=$name.log out=out/$name.h5 id pattern
  id=$(SPECRUN_LAUNCHER=$launcher SPECRUN_SET="job.output=$out" SPECRUN_STOP_RESEND_S=2 \
    sbatch --parsable --output="$log" "$@" "$SRC/slurm/specrun.sbatch")
  slurm_log "$name: job $id submitted ($launcher)"
  pattern='\[(baseline|speculative)\] batch [0-9]+/'
  [[ $when == start ]] && pattern='running: '
  wait_for_line "$log" "$pattern" 120 || {
    cat "$log"
    slurm_cluster_logs
    fail "$name: no line /$pattern/ in the log within 120 s"
  }
  scancel --signal="$sig" --batch "$id"
  slurm_log "$name: sent SIG$sig to the batch shell of job $id"
  wait_for_line "$log" 'requeueing job' 60 || {
    cat "$log"
    fail "$name: the job did not requeue itself within 60 s of SIG$sig"
  }
  # The file as the stopped run left it (the restart waits ~10 s for cred_expire).
  if [[ -f $out ]]; then cp "$out" "$name.stopped.h5"; fi
  slurm_wait_job_gone "$id" 180 || {
    cat "$log"
    slurm_cluster_logs
    fail "$name: job $id did not finish within 180 s of the requeue"
  }
  echo "---- $log (specrun.sbatch and progress lines)"
  grep -aE '^\[specrun.sbatch|stopped by a signal|\] batch 1/' "$log"

  local state code restarts
  state=$(slurm_job_field "$id" JobState)
  code=$(slurm_job_field "$id" ExitCode)
  restarts=$(slurm_job_field "$id" Restarts)
  slurm_log "$name: job $id $state, exit $code, restarts $restarts"
  [[ $state == COMPLETED && $code == 0:0 ]] || fail "$name: job ended $state with exit $code"
  [[ $restarts == 1 ]] || fail "$name: scontrol shows Restarts=$restarts, expected 1"

  grep -qF "received SIG$sig: asking specrun to stop" "$log" || fail "$name: the trap did not run"
  grep -qF "restart 1 on" "$log" || fail "$name: the restart did not see SLURM_RESTART_COUNT=1"
  [[ $(grep -c "specrun exited 0" "$log") -eq 1 ]] || fail "$name: expected one clean exit"
  "${SLURM_CHECK[@]}" complete "$out" --prompts "$N" --batch-size "$BS" ||
    fail "$name: the final file is incomplete"
  "${SLURM_CHECK[@]}" equal out/reference.h5 "$out" ||
    fail "$name: the requeued run differs from the uninterrupted one"
  if [[ $when == start ]]; then
    slurm_log "$name: ok ($(grep -aE 'specrun exited|stop signal ended|stopped by a signal' "$log" | head -n 2 | xargs))"
    return 0
  fi
  grep -qE 'stopped by a signal after [0-9]+ of [0-9]+ batches' "$log" ||
    fail "$name: specrun did not report a stop at a batch boundary"
  grep -qF "specrun exited 75" "$log" || fail "$name: specrun did not exit 75 after the signal"
  grep -qE "running: .* --resume$" "$log" || fail "$name: the restart did not add --resume"

  "${SLURM_CHECK[@]}" attr "$name.stopped.h5" resumes 0 ||
    fail "$name: the restart began before the stopped file could be copied (slow requeue expected)"
  "${SLURM_CHECK[@]}" partial "$name.stopped.h5" --prompts "$N" --batch-size "$BS" ||
    fail "$name: the stopped file is not a set of whole batches"
  "${SLURM_CHECK[@]}" attr "$out" resumes 1 || fail "$name: the file was not resumed exactly once"
  slurm_log "$name: ok"
}

signal_and_check usr1-srun USR1 srun batch
signal_and_check term-mpirun TERM mpirun batch --gpus-per-node=0
signal_and_check usr1-early USR1 srun start --gpus-per-node=0
echo "slurm_requeue: all checks passed"
