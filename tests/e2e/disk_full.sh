#!/usr/bin/env bash
# A full disk (issue 40), on a small tmpfs of the script's own (root only; exit 77, skipped
# visibly, where mount is not allowed). Reference: an uninterrupted run on the real disk.
#  1. The disk fills while a job runs (a filler file written after its third batch): the job
#     fails with exit 1 and one "disk full" message naming the file (no crash at exit: it was
#     SIGSEGV in libhdf5's shutdown); the file opens in h5py and `report` with every batch
#     committed before, equal to the reference, and no batch left out; with room again,
#     `--resume` completes it equal to the reference.
#  2. job.overwrite = true over an earlier result on a disk that cannot hold the new one: the
#     earlier result stays byte-identical (the new one is written beside it, `OUT.replacing`,
#     and replaces it only when finished); with room again, `--resume` finishes the replacement
#     and renames it over the earlier result.
#  3. prepare onto a full disk: exit 1 with the disk named, no crash, no OUT.tmp left, and an
#     existing OUT (--overwrite) byte-identical.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

mkdir fs
if ! mount -t tmpfs -o size=12m tmpfs fs 2>/dev/null; then
  echo "SKIPPED: cannot mount a tmpfs here (needs root): the disk-full cases did not run"
  exit 77
fi
cleanup() {
  umount -l fs 2>/dev/null || true
  cleanup_shm
}
trap cleanup EXIT

make_models models
make_prompt_file prompts.h5 16 --seed 21
export E2E_BATCH=2 E2E_TP=1 # 8 batches per mode
write_job job.toml out.h5 prompts.h5
sed -i 's/^max_new_tokens = 16$/max_new_tokens = 10/' job.toml
NP=2
SLOW=(--set debug.inject_delay_ms=20 --set debug.inject_phase=sample)

"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=full.h5 >full.log 2>&1 ||
  fail "reference run failed: $(tail -5 full.log)"

# fill FILE: writes FILE until the tmpfs is full.
fill() { dd if=/dev/zero of="$1" bs=64k 2>/dev/null || true; }

# 1. The disk fills during the job.
"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=fs/r.h5 "${SLOW[@]}" \
  >fill.log 2>&1 &
pid=$!
wait_batches fill.log 3
fill fs/filler
rc=0
timeout 120 tail --pid=$pid -f /dev/null || fail "the job did not end on a full disk"
wait $pid || rc=$?
[[ $rc -eq 1 ]] || fail "full disk: exit $rc, expected 1 (139 = the crash at exit): $(tail -5 fill.log)"
grep -qE 'disk full: cannot write the (baseline|speculative) batch [0-9]+ to .*fs/r.h5' fill.log ||
  fail "no disk-full message: $(tail -5 fill.log)"
grep -q 'keeps the batches committed before' fill.log || fail "no word on what is kept: $(tail -3 fill.log)"
[[ $(grep -c 'disk full' fill.log) -eq 1 ]] || fail "the disk-full message printed more than once"
! grep -qiE 'segmentation|signal 11|core dumped' fill.log || fail "a crash: $(grep -iE 'segm|signal' fill.log)"
"$PY" "$E2E_DIR/same_results.py" full.h5 fs/r.h5 --min-batches 3
"$SPECRUN_BIN" report fs/r.h5 >fill_report.txt 2>fill_report.err ||
  fail "report refuses the file a full disk left: $(tail -3 fill_report.err)"
! grep -q 'warning' fill_report.err || fail "report left batches out: $(cat fill_report.err)"
rm fs/filler
"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=fs/r.h5 "${SLOW[@]}" --resume >fill_resume.log 2>&1 ||
  fail "resume after a full disk failed: $(tail -5 fill_resume.log)"
"$PY" "$E2E_DIR/same_results.py" full.h5 fs/r.h5 --complete
rm fs/r.h5

# 2. job.overwrite = true onto a disk that cannot hold the new result.
"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml --set job.output=fs/old.h5 \
  --set decode.max_new_tokens=6 >old.log 2>&1 || fail "the earlier run failed: $(tail -5 old.log)"
sum_old=$(md5sum <fs/old.h5)
OVER=(--set job.output=fs/old.h5 --set job.overwrite=true)
for room in 0 header; do
  if [[ $room == 0 ]]; then
    fill fs/filler
  else
    # Room for the header and the first batch, not for the job.
    fill fs/filler && truncate -s -4M fs/filler
  fi
  rc=0
  timeout 120 "${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml "${OVER[@]}" >over_$room.log 2>&1 || rc=$?
  [[ $rc -eq 1 ]] || fail "overwrite on a full disk ($room): exit $rc, expected 1: $(tail -5 over_$room.log)"
  grep -q 'disk full' over_$room.log || fail "no disk-full message ($room): $(tail -5 over_$room.log)"
  [[ $(md5sum <fs/old.h5) == "$sum_old" ]] || fail "the earlier result changed ($room)"
  rm fs/filler
done
[[ $(grep -c 'replacing .*fs/old.h5' over_header.log) -ge 1 ]] || fail "the replacement is not named in the log"
[[ -f fs/old.h5.replacing ]] || fail "no unfinished replacement left to resume"
"${MPIRUN[@]}" -np $NP "$SPECRUN_BIN" run job.toml "${OVER[@]}" --resume >over_resume.log 2>&1 ||
  fail "resume of the replacement failed: $(tail -5 over_resume.log)"
[[ ! -e fs/old.h5.replacing ]] || fail "the finished replacement was not renamed"
"$PY" "$E2E_DIR/same_results.py" full.h5 fs/old.h5 --complete

# 3. prepare onto a full disk.
fill fs/filler
for overwrite in no yes; do
  args=()
  out=fs/p_$overwrite.h5
  if [[ $overwrite == yes ]]; then
    rm fs/filler
    cp prompts.h5 "$out"
    fill fs/filler
    args=(--overwrite)
  fi
  sum_before=$([[ -f $out ]] && md5sum <"$out" || echo none)
  rc=0
  "$SPECRUN_BIN" prepare prompts.jsonl "$out" "${args[@]}" >prep_$overwrite.log 2>&1 || rc=$?
  [[ $rc -eq 1 ]] || fail "prepare on a full disk (overwrite $overwrite): exit $rc: $(tail -3 prep_$overwrite.log)"
  grep -q 'the file system is full' prep_$overwrite.log || fail "prepare: $(tail -3 prep_$overwrite.log)"
  [[ ! -e $out.tmp ]] || fail "prepare left $out.tmp"
  [[ $(([[ -f $out ]] && md5sum <"$out") || echo none) == "$sum_before" ]] || fail "prepare changed $out"
done
echo "disk_full: OK"
