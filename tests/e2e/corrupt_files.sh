#!/usr/bin/env bash
# Corrupted HDF5 inputs (issue 18): files that crash libhdf5 (SIGSEGV) or hang it for
# ever, made by corrupt_h5.py, fail the command within seconds with "... is corrupt or
# unreadable", exit 2, on every rank, and the result file written before stays byte-identical;
# so do corrupted result files (report, compare, --resume, job.overwrite, sweep's point files),
# datasets (verify-data) and the prompt file that report --outputs reads.
# Before, `run` died with a segfault backtrace or hung on every rank, as h5py does.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
SRC_DIR="$(cd "$E2E_DIR/../.." && pwd)"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 8
write_job job.toml out.h5 prompts.h5
sed -i 's/^name = "e2e"/name = "e2e"\noverwrite = true/' job.toml
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml >good.log 2>&1 || fail "the good run failed: $(tail -5 good.log)"
before=$(sha256sum out.h5 | cut -d' ' -f1)

# The recipes are written for the fuzzing seed (a prompt file with ids, categories and texts).
SEED="$SRC_DIR/tests/fuzz/corpus/prompt_file/prompts.h5"
"$PY" "$E2E_DIR/corrupt_h5.py" "$SEED" crash.h5 crash
"$PY" "$E2E_DIR/corrupt_h5.py" "$SEED" hang.h5 hang

# A prompt file that crashes libhdf5: exit 2 at once, naming the file; out.h5 untouched.
start=$(date +%s)
expect_exit 2 "prompt file .*crash.h5 is corrupt or unreadable: reading it crashed the HDF5 library" \
  crash.log -- "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set data.prompts=crash.h5
[[ $(sha256sum out.h5 | cut -d' ' -f1) == "$before" ]] || fail "out.h5 changed after the crash file"
echo "crashing prompt file: refused in $(($(date +%s) - start)) s"

# A prompt file that hangs libhdf5: refused after the read-check timeout (3 s here).
start=$(date +%s)
SPECRUN_READ_CHECK_TIMEOUT_S=3 expect_exit 2 \
  "prompt file .*hang.h5 is corrupt or unreadable: reading it did not finish within 3 s" \
  hang.log -- "${MPIRUN[@]}" -x SPECRUN_READ_CHECK_TIMEOUT_S -np 2 "$SPECRUN_BIN" run job.toml \
  --set data.prompts=hang.h5
took=$(($(date +%s) - start))
[[ $took -le 20 ]] || fail "the hanging prompt file took $took s to refuse"
[[ $(sha256sum out.h5 | cut -d' ' -f1) == "$before" ]] || fail "out.h5 changed after the hang file"
echo "hanging prompt file: refused in $took s"
# The message is printed once, not once per rank.
[[ $(grep -c "is corrupt or unreadable" hang.log) -eq 1 ]] || fail "printed more than once: $(cat hang.log)"

# A result file that crashes libhdf5: report, compare and --resume refuse it; it stays as it was.
"$PY" "$E2E_DIR/corrupt_h5.py" out.h5 bad.h5 crash
bad_sum=$(sha256sum bad.h5 | cut -d' ' -f1)
expect_exit 2 "result file bad.h5 is corrupt or unreadable: reading it crashed" report.log -- \
  "$SPECRUN_BIN" report bad.h5
expect_exit 2 "result file bad.h5 is corrupt or unreadable" compare.log -- \
  "$SPECRUN_BIN" compare out.h5 bad.h5
expect_exit 2 "result file .*bad.h5 is corrupt or unreadable" resume.log -- \
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=bad.h5 --resume
# As an existing job.output with overwrite = true: not replaced (it may be anybody's file).
expect_exit 2 "existing job.output .*bad.h5 is corrupt or unreadable" overwrite.log -- \
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=bad.h5
[[ $(sha256sum bad.h5 | cut -d' ' -f1) == "$bad_sum" ]] || fail "bad.h5 was modified"
# A damaged last commit record (issue 40: report and compare read one batch fewer, silently):
# the batch is left out and said, on stderr and in report --json.
cp out.h5 damaged.h5
"$PY" - damaged.h5 <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    ends = f["speculative/batches/sequences_end"]
    ends[-1] = ends[-2]  # the last batch's record no longer follows the one before it
PY
"$SPECRUN_BIN" report damaged.h5 >damaged.txt 2>damaged.err || fail "report of damaged.h5: $(tail -3 damaged.err)"
grep -qE '^warning: damaged.h5:/speculative: 1 of [0-9]+ recorded batches left out.*does not follow the one before it' damaged.err ||
  fail "report left a batch out silently: $(cat damaged.err)"
"$SPECRUN_BIN" report damaged.h5 --json 2>/dev/null | "$PY" -c '
import json, sys
w = json.load(sys.stdin)["warnings"]
assert len(w) == 1 and "left out" in w[0], w'
"$SPECRUN_BIN" compare out.h5 damaged.h5 >damaged_compare.txt 2>damaged_compare.err || true
grep -q '^warning: damaged.h5:/speculative: 1 of' damaged_compare.err ||
  fail "compare left a batch out silently: $(cat damaged_compare.err)"
# A dataset's top-level file that crashes libhdf5: verify-data refuses it.
write_job ds.toml ds.h5 prompts.h5 "[dataset]" 'hidden_layers = "1,final"'
sed -i 's/^\[decode\]/[decode]\nmodes = ["dataset"]/' ds.toml
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run ds.toml >ds.log 2>&1 || fail "the dataset run failed: $(tail -5 ds.log)"
"$PY" "$E2E_DIR/corrupt_h5.py" ds.h5 ds-bad.h5 crash
expect_exit 2 "dataset file ds-bad.h5 is corrupt or unreadable: reading it crashed" verify.log -- \
  "$SPECRUN_BIN" verify-data ds-bad.h5

# report --outputs opens the recorded prompt file: read in a child first like every other, so a
# crashing or hanging one is refused (it crashed report in-process before); out.h5 untouched.
cp prompts.h5 prompts.good.h5
"$PY" "$E2E_DIR/corrupt_h5.py" prompts.good.h5 prompts.h5 crash
expect_exit 2 "prompt file .*prompts.h5 is corrupt or unreadable: reading it crashed" outputs.log -- \
  "$SPECRUN_BIN" report out.h5 --outputs out.jsonl
"$PY" "$E2E_DIR/corrupt_h5.py" "$SEED" prompts.h5 hang
SPECRUN_READ_CHECK_TIMEOUT_S=3 expect_exit 2 \
  "prompt file .*prompts.h5 is corrupt or unreadable: reading it did not finish within 3 s" \
  outputs-hang.log -- "$SPECRUN_BIN" report out.h5 --outputs out.jsonl
cp prompts.good.h5 prompts.h5
[[ ! -e out.jsonl && $(sha256sum out.h5 | cut -d' ' -f1) == "$before" ]] ||
  fail "report --outputs wrote outputs, or out.h5 changed"
# sweep reads existing point files (finished? its own?): in a child too. A crashing or hanging one
# fails its point, not the sweep, which goes on to the next point.
mkdir sw
cp bad.h5 sw/draft_len=2.h5
"$PY" "$E2E_DIR/corrupt_h5.py" "$SEED" sw/draft_len=3.h5 hang
rc=0
SPECRUN_READ_CHECK_TIMEOUT_S=3 timeout 60 "$SPECRUN_BIN" sweep job.toml --grid decode.draft_len=2,3 \
  --out sw --np 2 --mpirun-args --oversubscribe --set data.max_prompts=2 >sweep.log 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "sweep over corrupted point files: exit $rc, expected 1: $(cat sweep.log)"
grep -q "point 1/2 draft_len=2: FAILED, not run: result file sw/draft_len=2.h5 is corrupt or unreadable: reading it crashed" sweep.log &&
  grep -q "point 2/2 draft_len=3: FAILED, not run: result file sw/draft_len=3.h5 is corrupt or unreadable: reading it did not finish within 3 s" sweep.log ||
  fail "sweep over corrupted point files: $(cat sweep.log)"
[[ $(sha256sum sw/draft_len=2.h5 | cut -d' ' -f1) == "$bad_sum" ]] || fail "sw/draft_len=2.h5 was modified"
echo "corrupt_files: OK"
