#!/usr/bin/env bash
# Faults around a dataset job's files (decode.modes = ["dataset"], issue 40):
#  1. verify-data refuses --tolerance nan, inf and -1 (exit 2 naming the option): NaN and
#     infinity passed any data, a negative tolerance failed identical rows.
#  2. A missing part: the top-level file's reader (specrun_data.py, verify-data) refuses it,
#     naming the part, instead of reading its rows as zeros (HDF5 fills a missing source).
#  3. A job.overwrite job over a finished dataset removes the old top-level file before it
#     touches a part: killed part-way (SIGKILL, every rank), it leaves no top-level file that still
#     says finished over the new parts; `run --resume` then completes it (the lock file the killed
#     job left does not block it).
#  4. A second job on the same output while the first runs (with job.overwrite, or --resume) is
#     refused up front, naming the running job's pid and host, and deletes nothing of it.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

"$SPECRUN_BIN" make-model models --hidden 128 --layers 4 --heads 4 --kv-heads 2 \
  --intermediate 256 --vocab 512 >/dev/null
make_prompt_file prompts.h5 2000 --vocab 512 --min-len 4 --max-len 60
write_dataset_job job.toml dataset-faults small/data.h5
SHORT=(--set decode.max_new_tokens=48)
run2() { timeout 300 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml "$@"; }
mkdir -p small
run2 --set data.max_prompts=12 "${SHORT[@]}" >small.log 2>&1 || fail "the small job failed: $(tail -5 small.log)"

# wait_for_file GLOB SECONDS: until a file matches GLOB.
wait_for_file() {
  local start=$SECONDS
  while ((SECONDS - start < $2)); do
    compgen -G "$1" >/dev/null && return 0
    sleep 0.05
  done
  return 1
}
# kill_job PID PATTERN: SIGKILL to mpirun and every rank whose command line matches PATTERN.
kill_job() {
  pkill -9 -f "$2" || true
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# 1. --tolerance.
for t in nan inf -1; do
  expect_exit 2 "--tolerance $t: expected a finite number >= 0" tol.log -- \
    "$SPECRUN_BIN" verify-data small/data.h5 --tolerance=$t
done
echo "verify-data: --tolerance nan, inf and -1 refused"

# 2. A missing part.
mkdir -p miss && cp small/data*.h5 miss/
part=$(ls miss/data.shard-1-of-2.part-*.h5 | head -1)
rm "$part"
expect_exit 2 "its part $part is missing" miss-py.log -- "$PY" "$E2E_DIR/../../scripts/specrun_data.py" miss/data.h5
expect_exit 2 "its part $part is missing" miss-verify.log -- "$SPECRUN_BIN" verify-data miss/data.h5
echo "a missing part: refused by specrun_data.py and verify-data, naming $part"

# 3. job.overwrite over a finished dataset, killed part-way.
mkdir -p stale && cp small/data*.h5 stale/
[[ -f stale/data.h5 ]] || fail "no top-level file to overwrite"
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=stale/data.h5 \
  --set job.overwrite=true --set data.max_prompts=400 --set job.seed=4 "${SHORT[@]}" >stale.log 2>&1 &
pid=$!
wait_for_file "stale/data.shard-1-of-2.part-00001.h5" 120 || {
  kill_job $pid "job.output=stale/data.h5"
  fail "the overwriting job sealed no part: $(tail -5 stale.log)"
}
present=no
[[ -e stale/data.h5 ]] && present=yes
kill_job $pid "job.output=stale/data.h5"
[[ $present == no ]] ||
  fail "the overwriting job writes parts while the old top-level file (finished) is still there"
[[ ! -e stale/data.h5 ]] || fail "a top-level file is left after the overwriting job was killed"
[[ -e stale/data.h5.lock ]] || echo "note: the killed job left no lock file"
timeout 300 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=stale/data.h5 \
  --set job.overwrite=true --set data.max_prompts=400 --set job.seed=4 "${SHORT[@]}" --resume \
  >stale-resume.log 2>&1 || fail "resume after the kill: $(tail -5 stale-resume.log)"
[[ ! -e stale/data.h5.lock ]] || fail "the lock file stays after the job ended"
"$PY" "$E2E_DIR/../../scripts/specrun_data.py" stale/data.h5 >stale-read.txt 2>&1 ||
  fail "the resumed dataset does not read: $(cat stale-read.txt)"
grep -q ': 400 sequences' stale-read.txt || fail "the resumed dataset: $(cat stale-read.txt)"
echo "job.overwrite killed part-way: no stale top-level file; resumed past the dead job's lock"

# 4. A second job while the first runs.
mkdir -p conc
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=conc/data.h5 \
  --set data.max_prompts=2000 >conc.log 2>&1 &
pid=$!
wait_for_file "conc/data.shard-1-of-2.part-00001.h5" 120 || {
  kill_job $pid "job.output=conc/data.h5"
  fail "the first job sealed no part: $(tail -5 conc.log)"
}
rank0=$(rank_pid "$pid" 0)
[[ -n $rank0 ]] || { kill_job $pid "job.output=conc/data.h5"; fail "rank 0 not found"; }
sealed=$(cd conc && ls data.shard-*.part-*.h5)  # parts sealed before the second jobs
before=$(cd conc && md5sum $sealed)
for extra in "--set job.overwrite=true" "--resume"; do
  rc=0
  timeout 120 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=conc/data.h5 \
    --set data.max_prompts=2000 $extra >second.log 2>&1 || rc=$?
  grep -qE "job.output [^ ]*conc/data.h5 is in use by another running job \(pid $rank0 on host [^,]+, since" second.log &&
    [[ $rc -eq 2 ]] || {
    kill_job $pid "job.output=conc/data.h5"
    fail "a second job ($extra) was not refused naming the first (exit $rc): $(grep -v '^\[' second.log | tail -5)"
  }
done
after=$(cd conc && md5sum $sealed)
kill -0 "$pid" 2>/dev/null || fail "the first job ended while the second was refused: $(tail -5 conc.log)"
kill -TERM "$rank0"
rc=0
wait "$pid" || rc=$?
[[ $rc -eq 75 ]] || fail "the first job, stopped by SIGTERM: exit $rc: $(tail -5 conc.log)"
[[ $before == "$after" ]] || fail "the refused jobs changed the running job's parts"
"$PY" - <<'PY' || fail "the first job's parts do not all read"
import glob, h5py
parts = sorted(glob.glob("conc/data.shard-*.part-*.h5"))
assert not glob.glob("conc/*.tmp"), glob.glob("conc/*.tmp")
n = sum(len(h5py.File(p, "r")["sequences/prompt_index"]) for p in parts)
assert 0 < n < 2000, n
print(f"the first job: {len(parts)} sealed parts, {n} sequences, after two refused jobs")
PY
echo "dataset_faults: all checks passed"
