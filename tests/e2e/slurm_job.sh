#!/usr/bin/env bash
# slurm/specrun.sbatch and slurm/sweep.sbatch on a real one-node Slurm (8 CPUs, 8 fake GPUs),
# adapted only through variables and sbatch command-line options:
#   1. not under sbatch: the guard exits 2 with a message;
#   2. the template as it is (--gpus-per-node=8, srun --mpi=pmix): complete result file, the
#      script's NCCL_DEBUG and the submitter's NCCL_PROTO on every rank, SLURM_PROCID = rank,
#      all 8 GPUs visible to every rank, `specrun env` reports no mismatch;
#   3. SPECRUN_LAUNCHER=mpirun and --gpus-per-node=0 (CPU): complete, equal to 2, variables
#      reach every rank through mpirun -x, no CUDA_VISIBLE_DEVICES;
#   4. a 2-point sweep (array, the grid syntax of `specrun sweep`): one complete file per grid
#      point with its draft_len, named as a local sweep names it, then one `specrun report` table
#      over the folder.
# Installs Slurm and MUNGE if missing (where it cannot: skipped, exit 77; under CI=true: fails).
set -euo pipefail
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
: "${SPECRUN_SOURCE_DIR:?SPECRUN_SOURCE_DIR must point to the source tree}"
SPECRUN_BIN=$(realpath "$SPECRUN_BIN")
SRC=$SPECRUN_SOURCE_DIR
source "$SRC/tests/e2e/slurm_cluster.sh"
source "$SRC/tests/e2e/slurm_fixture.sh"
WORK=$PWD
N=32 BS=2

# 1. The guard, without any Slurm.
set +e
env -u SLURM_JOB_ID bash "$SRC/slurm/specrun.sbatch" >guard.out 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "specrun.sbatch outside sbatch exited $rc, expected 2: $(cat guard.out)"
grep -q "not running under Slurm" guard.out || fail "the guard's message is missing: $(cat guard.out)"
echo "guard: ok (exit 2: $(head -n 1 guard.out))"

slurm_require_packages
make_fixture "$WORK/fx" "$N" "$BS"
trap slurm_cluster_stop EXIT
slurm_cluster_start "$WORK/cluster" 16817
cd "$WORK/fx"

export SPECRUN_BIN SPECRUN_JOB=job.toml
export NCCL_PROTO=Simple # from the submitting shell: must reach every rank
unset NCCL_DEBUG CUDA_VISIBLE_DEVICES

# 2 and 3, queued together (each takes the whole node, so they run one after the other).
job_srun=$(SPECRUN_LAUNCHER=srun SPECRUN_SET="job.output=out/srun.h5" \
  sbatch --parsable --output=srun.log "$SRC/slurm/specrun.sbatch")
job_mpirun=$(SPECRUN_LAUNCHER=mpirun SPECRUN_SET="--set job.output=out/mpirun.h5" \
  sbatch --parsable --gpus-per-node=0 --output=mpirun.log "$SRC/slurm/specrun.sbatch")
slurm_log "submitted $job_srun (srun, 8 GPUs) and $job_mpirun (mpirun, no GPUs)"
for id in "$job_srun" "$job_mpirun"; do
  slurm_wait_job_gone "$id" 150 || {
    cat srun.log mpirun.log
    slurm_cluster_logs
    fail "job $id did not finish within 150 s"
  }
done
for id in "$job_srun" "$job_mpirun"; do
  state=$(slurm_job_field "$id" JobState)
  code=$(slurm_job_field "$id" ExitCode)
  slurm_log "job $id: $state, exit $code"
  [[ $state == COMPLETED && $code == 0:0 ]] || {
    cat srun.log mpirun.log
    fail "job $id ended $state with exit $code"
  }
done
echo "---- srun.log"
cat srun.log
echo "---- mpirun.log (tail)"
tail -n 8 mpirun.log

for log in srun.log mpirun.log; do
  grep -qF "environment check: 8 ranks, no mismatches" "$log" ||
    fail "$log: \`specrun env\` under the launcher did not report 8 ranks without mismatches"
  grep -qF "specrun exited 0" "$log" || fail "$log: specrun did not exit 0"
done
grep -qE "running: srun --mpi=pmix -K1" srun.log || fail "srun.log: not launched by srun --mpi=pmix"
grep -qE "running: mpirun -np 8" mpirun.log || fail "mpirun.log: not launched by mpirun -np 8"

"${SLURM_CHECK[@]}" complete out/srun.h5 --prompts "$N" --batch-size "$BS" || fail "srun result"
"${SLURM_CHECK[@]}" complete out/mpirun.h5 --prompts "$N" --batch-size "$BS" || fail "mpirun result"
"${SLURM_CHECK[@]}" equal out/srun.h5 out/mpirun.h5 || fail "srun and mpirun results differ"
"${SLURM_CHECK[@]}" env out/srun.h5 --world 8 NCCL_DEBUG=WARN NCCL_PROTO=Simple \
  CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 SLURM_PROCID='<rank>' \
  "SLURM_JOB_ID=$job_srun" || fail "srun: the environment did not reach every rank"
"${SLURM_CHECK[@]}" env out/mpirun.h5 --world 8 NCCL_DEBUG=WARN NCCL_PROTO=Simple \
  CUDA_VISIBLE_DEVICES='<unset>' OMPI_COMM_WORLD_RANK='<rank>' "SLURM_JOB_ID=$job_mpirun" ||
  fail "mpirun: the environment did not reach every rank"

# 4. The sweep: a chain of 1 and a tree 3/2/4 at temperature 0, one array task each, with the
# grid syntax of `specrun sweep` (coupled keys: the chain is top_k 1, its length draft_len).
AXIS="decode.tree_top_k+decode.tree_depth+decode.tree_nodes+decode.draft_len=1/5/15/1,3/2/4/4"
sweep=$(SPECRUN_SWEEP_GRID="$AXIS" \
  SPECRUN_SWEEP_DIR=sweep-out SPECRUN_SET="data.max_prompts=8" SPECRUN_ENV_CHECK=0 \
  sbatch --parsable --array=0-1 --gpus-per-node=0 --output=sweep-%a.log \
  --export=ALL,SPECRUN_SBATCH="$SRC/slurm/specrun.sbatch" "$SRC/slurm/sweep.sbatch")
slurm_log "submitted sweep array $sweep"
slurm_wait_job_gone "$sweep" 120 || {
  cat sweep-*.log
  fail "sweep $sweep did not finish within 120 s"
}
cat sweep-0.log
names=(tree_top_k+tree_depth+tree_nodes+draft_len=1-5-15-1 tree_top_k+tree_depth+tree_nodes+draft_len=3-2-4-4)
i=0
for k in 1 2; do  # the draft_len attribute: the longest path
  f=sweep-out/${names[$i]}.h5
  i=$((i + 1))
  [[ -f $f ]] || {
    cat sweep-*.log
    fail "sweep: $f missing"
  }
  "${SLURM_CHECK[@]}" complete "$f" --prompts 8 --batch-size "$BS" || fail "sweep: $f incomplete"
  /usr/bin/python3 -c "
import h5py, sys
k = int(h5py.File(sys.argv[1], 'r')['speculative'].attrs['draft_len'])
sys.exit(0 if k == $k else f'draft_len {k} in {sys.argv[1]}, expected $k')" "$f"
done
# The same points as a local sweep: its --print-sets names the same files.
[[ $("$SPECRUN_BIN" sweep job.toml --grid "$AXIS" --out sweep-out --point 1 --print-sets) == \
  *"job.output=sweep-out/${names[1]}.h5" ]] || fail "sweep.sbatch and specrun sweep disagree on file names"
# One table over the folder, as docs/slurm.md shows it.
"$SPECRUN_BIN" report sweep-out/*.h5 >sweep-report.txt || fail "specrun report over the sweep failed"
cat sweep-report.txt
grep -qE '^file +decode.draft_len +decode.tree_depth +decode.tree_nodes +decode.tree_top_k +tau' sweep-report.txt ||
  fail "the sweep table lacks the swept keys: $(head -1 sweep-report.txt)"
echo "slurm_job: all checks passed"
