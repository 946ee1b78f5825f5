#!/usr/bin/env bash
# SIGKILL at random moments during a dataset job (2 ranks, dp 2, continuous batching, gzip), each
# kill followed by `run --resume`: every trial must end bit-identical to an uninterrupted run
# (tokens, hidden states, top-k and the sequences table, read through the top-level file; the
# part files differ, since parts are sealed every dataset.commit_s seconds).
# Then a graceful stop by a signal to one rank only, SIGTERM to rank 1 and SIGINT to rank 0: the
# job exits 75 with every group stopped at a step boundary (group 0 and group 1 each end short of
# its stream, with no unsealed part), and `run --resume` ends bit-identical too.
#   SPECRUN_KILLS=20 (default 3 under ctest); SPECRUN_BIN must point to specrun.
#   scripts/dataset-kill-resume.sh runs it outside ctest with 20 kills.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
KILLS=${SPECRUN_KILLS:-3}
rm -rf w && mkdir w && cd w

"$SPECRUN_BIN" make-model models --hidden 256 --layers 4 --heads 4 --kv-heads 2 \
  --intermediate 512 --vocab 512 >/dev/null
make_prompt_file prompts.h5 480 --vocab 512 --min-len 4 --max-len 60
write_dataset_job job.toml dataset-kill ref/data.h5
mkdir -p ref
start=$(date +%s.%N)
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml >ref.log 2>&1 || fail "reference: $(tail -5 ref.log)"
full=$(echo "$(date +%s.%N) - $start" | bc)
echo "uninterrupted run: $full s"

compare() {  # compare DIR: the dataset equals the reference's, row for row and bit for bit
  "$PY" - "$1" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
a = h5py.File("ref/data.h5", "r")
b = h5py.File(f"{d}/data.h5", "r")
for name in ("tokens", "hidden", "topk_ids", "topk_probs"):
    x, y = a[name][:], b[name][:]
    assert x.shape == y.shape, f"{name}: {x.shape} vs {y.shape}"
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), f"{name} differs"
for name in a["sequences"]:
    if name == "wall_s":
        continue
    assert np.array_equal(a["sequences"][name][:], b["sequences"][name][:]), name
assert b.attrs["finished"], "not finished"
PY
}

identical=0
for trial in $(seq 1 "$KILLS"); do
  dir=t$trial
  mkdir -p $dir
  # Kill somewhere between the start and the end of an uninterrupted run.
  delay=$("$PY" -c "import random; random.seed($trial); print(round(random.uniform(0.3, 0.95) * $full, 2))")
  setsid "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$dir/data.h5 \
    >$dir/run.log 2>&1 &
  launcher=$!
  sleep "$delay"
  # Every rank and the launcher: each rank is its own process group.
  pkill -9 -f "specrun run job.toml --set job.output=$dir/data.h5" || true
  kill -9 -- -"$launcher" 2>/dev/null || true
  wait "$launcher" 2>/dev/null || true
  committed=$("$PY" -c "
import h5py, glob
print(sum(len(h5py.File(p, 'r')['sequences/prompt_index']) for p in glob.glob('$dir/data.shard-*.part-*.h5')))")
  timeout 300 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$dir/data.h5 \
    --resume >$dir/resume.log 2>&1 || fail "trial $trial: resume failed: $(tail -5 $dir/resume.log)"
  if compare $dir; then
    identical=$((identical + 1))
    echo "trial $trial: killed after ${delay} s ($committed sequences in sealed parts), resumed: identical"
  else
    fail "trial $trial: the resumed dataset differs from the uninterrupted one"
  fi
done
echo "dataset_kill_resume: $identical of $KILLS killed-and-resumed runs bit-identical to the uninterrupted one"

# A stop request to one rank of a dp 2 job stops both groups.
for case in "TERM 1" "INT 0"; do
  read -r sig rank <<<"$case"
  dir=sig$sig
  mkdir -p $dir
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$dir/data.h5 >$dir/run.log 2>&1 &
  launcher=$!
  for _ in $(seq 1 1200); do
    compgen -G "$dir/data.shard-1-of-2.part-*.h5" >/dev/null && break
    sleep 0.05
  done
  victim=$(rank_pid "$launcher" "$rank")
  [[ -n $victim ]] || {
    pkill -9 -f "specrun run job.toml --set job.output=$dir/data.h5" || true
    fail "SIG$sig: rank $rank not found among mpirun's children"
  }
  kill -$sig "$victim"
  rc=0
  wait "$launcher" || rc=$?
  [[ $rc -eq 75 ]] || fail "SIG$sig to rank $rank: exit $rc, expected 75: $(tail -5 $dir/run.log)"
  grep -q "stopped by a signal (SIG$sig)" $dir/run.log || fail "SIG$sig: no stop message: $(tail -5 $dir/run.log)"
  "$PY" - "$dir" <<'PY' || fail "SIG$sig to rank $rank did not stop every group at a boundary"
import glob, sys, h5py
d = sys.argv[1]
assert not glob.glob(f"{d}/*.tmp"), f"unsealed parts: {glob.glob(f'{d}/*.tmp')}"
for g in (0, 1):
    n = sum(len(h5py.File(p, "r")["sequences/prompt_index"])
            for p in glob.glob(f"{d}/data.shard-{g}-of-2.part-*.h5"))
    assert n < 240, f"group {g} ran its whole stream (240 sequences): it did not stop"
    print(f"  group {g}: {n} of 240 sequences sealed")
PY
  timeout 300 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$dir/data.h5 \
    --resume >$dir/resume.log 2>&1 || fail "SIG$sig: resume failed: $(tail -5 $dir/resume.log)"
  compare $dir || fail "SIG$sig: the resumed dataset differs from the uninterrupted one"
  echo "SIG$sig to rank $rank: every group stopped and sealed (exit 75), resumed: identical"
done
