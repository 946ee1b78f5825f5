#!/usr/bin/env bash
# Bad input through `specrun run` under mpirun: each case exits 2 with a message naming the
# culprit, and no rank hangs (every launch runs under `timeout 60`; 124 fails the test).
#   - a prompt token outside the target vocabulary (names the prompt index and id)
#   - a prompt file without /prompts/offsets (names the dataset)
#   - a world size not divisible by parallel.tp (before any model is loaded)
#   - an unknown --set key (names it, suggests the right one)
#   - malformed TOML (names file and line; printed once, by rank 0)
# None of them may leave a result file behind.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file good.h5 6
# Prompt 4 (id "p4") holds token 300; the vocabulary has 256.
"$PY" - <<'PY'
import json
rows = [json.loads(l) for l in open("good.jsonl")]
rows[4]["tokens"][1] = 300
with open("badtoken.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
PY
"$SPECRUN_BIN" prepare badtoken.jsonl badtoken.h5 >/dev/null
# A prompt file whose /prompts/offsets is missing.
"$PY" - <<'PY'
import h5py, numpy as np
with h5py.File("nooffsets.h5", "w") as f:
    f.attrs["schema"] = "specrun.prompts"
    f.attrs["schema_version"] = np.int32(1)
    f.create_dataset("prompts/tokens", data=np.arange(2, 20, dtype=np.int32))
PY
write_job job.toml out.h5 good.h5
RUN=("${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml)

expect_exit 2 "badtoken.h5: prompt 4 \(id 'p4'\).*token 300 at position 1 is outside the (target )?vocabulary" \
  badtoken.log -- "${RUN[@]}" --set data.prompts=badtoken.h5 --set job.output=badtoken_out.h5
expect_exit 2 'nooffsets.h5.*/prompts/offsets' nooffsets.log -- \
  "${RUN[@]}" --set data.prompts=nooffsets.h5 --set job.output=nooffsets_out.h5
expect_exit 2 'world size 3 is not divisible by parallel.tp = 2' tp.log -- \
  "${MPIRUN[@]}" -np 3 "$SPECRUN_BIN" run job.toml --set job.output=tp_out.h5
if grep -q 'models loaded' tp.log; then fail "models were loaded before the tp check"; fi
expect_exit 2 'decode\.draft_lenn.*draft_len' setkey.log -- "${RUN[@]}" --set decode.draft_lenn=3
printf '[job]\nname = "x"\noutput = "malformed_out.h5"\n[decode]\ndraft_len = = 4\n' >malformed.toml
expect_exit 2 'malformed.toml:5' malformed.log -- \
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run malformed.toml
# Every rank fails with rank 0's error, which is printed once, not once per rank.
[[ $(grep -c 'malformed.toml:5' malformed.log) -eq 1 ]] ||
  fail "the job file error is printed $(grep -c 'malformed.toml:5' malformed.log) times"

# A 6 KB prompt file declaring one prompt of 500,000,000 tokens (unwritten chunks read as 0): refused
# from its offsets before any token is read or hashed (reading it cost 4 GB of memory; issue 18).
"$PY" - <<'PY'
import h5py, numpy as np
with h5py.File("huge.h5", "w") as f:
    f.attrs["schema"] = "specrun.prompts"
    f.attrs["schema_version"] = np.int32(1)
    f.create_dataset("prompts/offsets", data=np.array([0, 500_000_000], dtype=np.int64))
    f.create_dataset("prompts/tokens", shape=(500_000_000,), dtype=np.int32, chunks=(1 << 16,),
                     compression="gzip", fillvalue=0)
PY
/usr/bin/time -f "%M" -o huge.rss "${RUN[@]}" --set data.prompts=huge.h5 --set job.output=huge_out.h5 \
  >huge.log 2>&1 || true
grep -q "huge.h5: prompt 0 has 500000000 tokens" huge.log || fail "huge prompt: $(tail -3 huge.log)"
echo "a prompt of 5e8 tokens refused; peak RSS of the job $(tail -1 huge.rss) KB ($(du -k huge.h5 | cut -f1) KB file)"

# Every error is found before the result file is created (prompts are all checked against the
# target once it has loaded, before anything is written).
for f in tp_out.h5 out.h5 malformed_out.h5 badtoken_out.h5 nooffsets_out.h5 huge_out.h5; do
  [[ ! -e $f ]] || fail "$f was created by a job that failed before starting"
done

# With job.overwrite = true, a failing job leaves an existing result byte-identical (issue 18:
# it used to truncate the file before validating its inputs).
timeout 120 "${RUN[@]}" --set job.output=kept.h5 >kept.log 2>&1 || fail "good run: $(tail -3 kept.log)"
before=$(md5sum <kept.h5)
expect_exit 2 "badtoken.h5: prompt 4" kept-badtoken.log -- "${RUN[@]}" --set job.output=kept.h5 \
  --set job.overwrite=true --set data.prompts=badtoken.h5
expect_exit 2 "model directory .*missing-model" kept-model.log -- "${RUN[@]}" \
  --set job.output=kept.h5 --set job.overwrite=true --set target.path=missing-model
[[ $(md5sum <kept.h5) == "$before" ]] || fail "a failed job with overwrite = true changed kept.h5"
# job.overwrite replaces only specrun result files, and never writes through a link (it replaced
# any file, issue 18): a text file, a model's safetensors and a link to a result stay as they were.
echo "notes, not a result" >notes.txt
cp models/target/model.safetensors weights.safetensors
ln -sf kept.h5 link.h5
for target in notes.txt weights.safetensors link.h5; do
  sum=$(md5sum <"$target")
  expect_exit 2 "job.output .*$target (exists and is not a specrun output|is a symbolic link)" \
    "over-$target.log" -- "${RUN[@]}" --set job.output=$target --set job.overwrite=true
  [[ $(md5sum <"$target") == "$sum" ]] || fail "job.overwrite changed $target"
done
# prepare removes a link planted at OUT.tmp instead of writing through it.
ln -sf notes.txt planted.h5.tmp
"$SPECRUN_BIN" prepare good.jsonl planted.h5 >/dev/null || fail "prepare with a planted OUT.tmp"
[[ $(cat notes.txt) == "notes, not a result" ]] || fail "prepare wrote through OUT.tmp"
[[ ! -e planted.h5.tmp ]] || fail "prepare left planted.h5.tmp"

# A second job on the output of a running one (issue 40: with job.overwrite it would remove the
# first one's unfinished replacement, kept.h5.replacing): refused, naming the running job; the
# first one finishes and replaces kept.h5.
"${RUN[@]}" --set job.output=kept.h5 --set job.overwrite=true --set data.prompts=good.h5 \
  --set debug.inject_delay_ms=400 --set debug.inject_phase=sample >first.log 2>&1 &
first=$!
for _ in $(seq 600); do [[ -f kept.h5.replacing ]] && grep -q '\] batch 1/' first.log && break; sleep 0.1; done
[[ -f kept.h5.replacing ]] || fail "the first job never wrote kept.h5.replacing: $(tail -3 first.log)"
expect_exit 2 "job.output .*kept.h5 is in use by another running job \(pid [0-9]+ on host" second.log -- \
  "${RUN[@]}" --set job.output=kept.h5 --set job.overwrite=true
expect_exit 2 "job.output .*kept.h5 is in use by another running job" second-resume.log -- \
  "${RUN[@]}" --set job.output=kept.h5 --set job.overwrite=true --resume
kill -0 $first 2>/dev/null || fail "the first job ended before the second ones were refused (too fast to test)"
wait $first || fail "the first job failed beside the refused ones: $(tail -3 first.log)"
[[ ! -e kept.h5.replacing && ! -e kept.h5.lock ]] || fail "the first job left kept.h5.replacing or its lock"
"$SPECRUN_BIN" report kept.h5 >kept-report.txt 2>&1 || fail "report of the replaced kept.h5: $(tail -3 kept-report.txt)"
[[ $(md5sum <kept.h5) != "$before" ]] || fail "the first job did not replace kept.h5"

# Found by both ranks, printed once (issue 18: errors every rank meets printed once per rank).
[[ $(grep -c 'missing-model' kept-model.log) -eq 1 ]] ||
  fail "the missing-model error is printed $(grep -c 'missing-model' kept-model.log) times"
echo "run_errors: all checks passed"
