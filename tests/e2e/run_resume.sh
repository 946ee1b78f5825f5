#!/usr/bin/env bash
# Stop and resume on 2 ranks (dp 2 x tp 1: two groups commit batches in turn). Reference: an uninterrupted run. Then:
#  1. SIGUSR1 to mpirun part-way (it forwards the signal): exit 75, the file holds the committed
#     batches and says the job did not finish; `--resume` completes it with output tokens and
#     counts identical to the reference for every prompt and mode (greedy).
#  2. SIGKILL of mpirun and all its ranks at once, at two moments (after 2 batches, and at a
#     random time after the first): the file opens in h5py and
#     holds committed batches equal to the reference; `--resume` completes it.
#  3. `--resume` with a changed --set, or with a changed prompt file, and a plain run onto an
#     existing output without job.overwrite: exit 2 with the reason, the file untouched.
# The interrupted runs sleep 10 ms per step in the sample phase (debug.inject_*), which leaves
# time to interrupt them and does not change greedy tokens.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 16 --seed 11
export E2E_BATCH=2 E2E_TP=1  # 8 batches per mode, 4 per group
write_job job.toml out.h5 prompts.h5
sed -i 's/^max_new_tokens = 16$/max_new_tokens = 10/' job.toml
NP=2
SLOW=(--set debug.inject_delay_ms=10 --set debug.inject_phase=sample)

"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=full.h5 >full.log 2>&1 ||
  fail "reference run failed: $(tail -5 full.log)"


# 1. SIGUSR1, then --resume.
"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=stop.h5 "${SLOW[@]}" \
  >stop.log 2>&1 &
pid=$!
wait_batches stop.log 3
kill -USR1 $pid
rc=0
wait $pid || rc=$?
[[ $rc -eq 75 ]] || fail "SIGUSR1: exit $rc, expected 75: $(tail -5 stop.log)"
grep -q 'stopped by a signal' stop.log || fail "no stop message: $(tail -3 stop.log)"
"$PY" "$E2E_DIR/same_results.py" full.h5 stop.h5 --min-batches 3
if "$PY" "$E2E_DIR/same_results.py" full.h5 stop.h5 --complete >/dev/null; then
  fail "the stopped file is already complete: the signal came too late to test anything"
fi
"$SPECRUN_BIN" report stop.h5 >stop_report.txt
grep -q 'the job did not finish' stop_report.txt || fail "report of a stopped job: $(head -3 stop_report.txt)"
"$SPECRUN_BIN" report stop.h5 --json | "$PY" -c 'import json,sys; assert json.load(sys.stdin)["job_finished"] is False'
# Model fingerprints: a stopped job has the weights by size and header; the finished one (and
# the resumed one below) their whole contents, the same as full.h5's.
models() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    m = json.loads(f["provenance"].attrs["models"])
complete = sys.argv[2] == "complete"
for role in ("target", "draft"):
    e = m[role]
    weights = [x for x in e["files"] if x["name"].endswith(".safetensors")]
    assert e["complete"] is complete and weights, (role, e)
    assert all(("content" in x) == complete and "header" in x for x in weights), (role, weights)
    assert e["fingerprint"].startswith("xxh3:" if complete else "xxh3-headers:"), e["fingerprint"]
    print(role, e["fingerprint"])
PY
}
models stop.h5 headers >/dev/null || fail "the stopped job's model fingerprints"
models full.h5 complete >full_models.txt || fail "the finished job's model fingerprints"

# 3a. Resume errors, before the successful resume: the stopped file must stay untouched.
sum_before=$(md5sum stop.h5)
expect_exit 2 'cannot resume .*stop.h5: the job configuration differs' resume_set.log -- \
  "${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=stop.h5 "${SLOW[@]}" \
  --set decode.max_new_tokens=12 --resume
make_prompt_file prompts.h5 16 --seed 12  # same size, other tokens
expect_exit 2 'cannot resume .*stop.h5: the prompt file .*prompts.h5 differs' resume_prompts.log -- \
  "${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=stop.h5 "${SLOW[@]}" --resume
make_prompt_file prompts.h5 16 --seed 11  # the original again
[[ $(md5sum stop.h5) == "$sum_before" ]] || fail "a refused resume modified stop.h5"

"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=stop.h5 "${SLOW[@]}" \
  --resume >resume.log 2>&1 || fail "resume failed: $(tail -5 resume.log)"
"$PY" "$E2E_DIR/same_results.py" full.h5 stop.h5 --complete
models stop.h5 complete >resumed_models.txt || fail "the resumed job's model fingerprints"
cmp -s full_models.txt resumed_models.txt || fail "fingerprints differ: $(cat full_models.txt resumed_models.txt)"

# 2. SIGKILL of the whole launch (mpirun and every rank at once) at three moments.
for moment in 2 random; do
  out=kill_$moment.h5
  "${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=$out "${SLOW[@]}" \
    >kill_$moment.log 2>&1 &
  pid=$!
  if [[ $moment == random ]]; then
    wait_batches kill_$moment.log 1
    sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  else
    wait_batches kill_$moment.log $moment
  fi
  # mpirun and its children (the ranks, which Open MPI puts in process groups of their own).
  victims=("$pid" $(pgrep -P "$pid" || true))
  kill -KILL "${victims[@]}" 2>/dev/null || true
  wait "$pid" || true
  for v in "${victims[@]}"; do
    while kill -0 "$v" 2>/dev/null; do sleep 0.05; done
  done
  # What the killed ranks could not remove, their shared-memory segments, is in this script's own
  # directory (run_common.sh), which its exit trap removes; before, it piled up in /dev/shm.
  [[ -n $(ls -A "$SPECRUN_SHM_DIR") ]] ||
    fail "no shared-memory segments of the killed job in $SPECRUN_SHM_DIR (where did they go?)"
  "$PY" "$E2E_DIR/same_results.py" full.h5 $out --min-batches $([[ $moment == random ]] && echo 1 || echo $moment)
  "${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=$out "${SLOW[@]}" \
    --resume >kill_${moment}_resume.log 2>&1 || fail "resume after SIGKILL ($moment) failed: $(tail -5 kill_${moment}_resume.log)"
  "$PY" "$E2E_DIR/same_results.py" full.h5 $out --complete
done

# 3b. An existing output without job.overwrite: refused before anything is written.
sum_before=$(md5sum full.h5)
expect_exit 2 'full.h5 already exists; set job.overwrite = true' exists.log -- \
  "${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=full.h5
[[ $(md5sum full.h5) == "$sum_before" ]] || fail "a refused run modified full.h5"
echo "run_resume: all checks passed"
