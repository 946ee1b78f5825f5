#!/usr/bin/env bash
# Every command that writes a file (issue 40) refuses to write over one of its own inputs (under
# any name: compared by device and inode), over an existing file unless told to (--overwrite),
# and through a link; a read-only folder or an overlong name is exit 2 with a message naming the
# path, a full disk (a tmpfs of the script's own, root only) exit 1, the output left as it was. Commands: report --outputs, prepare, generate --dump-logits, bench --json, make-model,
# import-llama2c, scripts/plot_results.py and plot_sweep.py. Also report --outputs checks the
# result's identities as report does, and prepare refuses a NUL in a prompt's strings (a prompt
# file would store them cut short). Inputs stay byte-identical throughout.
# Before: `report r.h5 --outputs r.h5` replaced the result with JSONL and exited 0.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
SRC_DIR="$(cd "$E2E_DIR/../.." && pwd)"
SHARED=${SPECRUN_SHARED_DIR:-$E2E_DIR/../../../shared}
RO_RUN="$E2E_DIR/ro_run.sh"
rm -rf w && mkdir w && cd w
sum() { sha256sum "$1" | cut -d' ' -f1; }

make_models models
make_prompt_file prompts.h5 8
E2E_TP=1 write_job job.toml r.h5 prompts.h5
"${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml >run.log 2>&1 || fail "the run failed: $(tail -5 run.log)"
"${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml --set job.output=r2.h5 --set decode.draft_len=2 \
  >run2.log 2>&1 || fail "the second run failed: $(tail -5 run2.log)"
r_sum=$(sum r.h5)
p_sum=$(sum prompts.h5)
cfg_sum=$(sum models/target/config.json)
inputs_unchanged() {
  [[ $(sum r.h5) == "$r_sum" && $(sum prompts.h5) == "$p_sum" &&
    $(sum models/target/config.json) == "$cfg_sum" ]] || fail "$1: an input changed"
}

# --- report --outputs: never over its inputs, under any name, even with --overwrite ---------------
expect_exit 2 "--outputs file r.h5 is one of this command's inputs" o1.log -- \
  "$SPECRUN_BIN" report r.h5 --outputs r.h5 --overwrite
expect_exit 2 "--outputs file prompts.h5 is the same file as .*prompts.h5, one of this command's inputs" \
  o2.log -- "$SPECRUN_BIN" report r.h5 --outputs prompts.h5 --overwrite
ln r.h5 alias.jsonl
expect_exit 2 "alias.jsonl is the same file as r.h5" o3.log -- \
  "$SPECRUN_BIN" report r.h5 --outputs alias.jsonl --overwrite
expect_exit 2 "is the same file as .*models/target/config.json" o4.log -- \
  "$SPECRUN_BIN" report r.h5 --outputs models/target/config.json --overwrite
inputs_unchanged "report --outputs over an input"
# An existing file only with --overwrite; a link never; the old fixed temporary name untouched.
"$SPECRUN_BIN" report r.h5 --outputs out.jsonl >/dev/null || fail "report --outputs failed"
[[ $(wc -l <out.jsonl) -eq 8 ]] || fail "out.jsonl has $(wc -l <out.jsonl) lines, expected 8"
expect_exit 2 "--outputs file out.jsonl already exists; pass --overwrite to replace it" o5.log -- \
  "$SPECRUN_BIN" report r2.h5 --outputs out.jsonl
"$PY" -c 'import json,sys; assert json.loads(open("out.jsonl").readline())["speculative"]["tokens"]' ||
  fail "out.jsonl was damaged"
echo precious >victim
ln -s victim link.jsonl
ln -s victim out2.jsonl.tmp
expect_exit 2 "--outputs file link.jsonl is a symbolic link" o6.log -- \
  "$SPECRUN_BIN" report r.h5 --outputs link.jsonl --overwrite
"$SPECRUN_BIN" report r.h5 --outputs out2.jsonl >/dev/null || fail "report --outputs out2.jsonl failed"
[[ -L out2.jsonl.tmp && $(cat victim) == precious ]] || fail "the link at out2.jsonl.tmp was used or removed"
"$SPECRUN_BIN" report r2.h5 --outputs out.jsonl --overwrite >/dev/null || fail "--overwrite failed"
cmp -s out.jsonl out2.jsonl && fail "--overwrite did not replace out.jsonl"
[[ -z $(find . -maxdepth 1 -name '.*.tmp') ]] || fail "temporary files left: $(find . -name '.*.tmp')"

# --- report --outputs checks the identities report checks (a tampered sequence row) -------------
cp r.h5 tampered.h5
"$PY" - <<'PY'
import h5py
with h5py.File("tampered.h5", "r+") as f:
    f["speculative/sequences/verify_steps"][0] += 1
PY
expect_exit 2 "tampered.h5: speculative: prompt [0-9]+: its step rows sum to .*the result file is inconsistent" \
  o7.log -- "$SPECRUN_BIN" report tampered.h5 --outputs tampered.jsonl
[[ ! -e tampered.jsonl ]] || fail "outputs of an inconsistent result were written"

# --- prepare ------------------------------------------------------------------------------------
"$PY" "$E2E_DIR/make_prompts.py" in.jsonl 4
in_sum=$(sum in.jsonl)
expect_exit 2 "prompt file in.jsonl is one of this command's inputs" p1.log -- \
  "$SPECRUN_BIN" prepare in.jsonl in.jsonl --overwrite
ln in.jsonl in-alias.h5
expect_exit 2 "prompt file in-alias.h5 is the same file as in.jsonl" p2.log -- \
  "$SPECRUN_BIN" prepare in.jsonl in-alias.h5 --overwrite
[[ $(sum in.jsonl) == "$in_sum" ]] || fail "prepare damaged its input"
expect_exit 2 "prompt file link.h5 is a symbolic link" p3.log -- \
  bash -c "ln -s victim link.h5 && '$SPECRUN_BIN' prepare in.jsonl link.h5 --overwrite"
# A NUL in a prompt's text, id or category: refused naming the line (stored, it was cut short).
printf '%s\n' '{"tokens": [1, 5, 6], "text": "ab"}' '{"tokens": [1, 7], "text": "a\u0000b"}' \
  '{"tokens": [1, 8], "text": "c", "category": "x\u0000"}' >nul.jsonl
expect_exit 2 "line 2: the prompt's text holds a NUL character \(\\\\u0000\) at byte 1" p4.log -- \
  "$SPECRUN_BIN" prepare nul.jsonl nul.h5
grep -q 'line 3: "category" holds a NUL character' p4.log || fail "the category's NUL: $(cat p4.log)"
[[ ! -e nul.h5 ]] || fail "a prompt file was written from nul.jsonl"

# --- generate --dump-logits, bench --json: checked before the work --------------------------------
GEN=("$SPECRUN_BIN" generate models/target --tokens 1,5 --max-new-tokens 2 --threads 1)
"${GEN[@]}" --dump-logits logits.bin >/dev/null || fail "generate --dump-logits failed"
expect_exit 2 "--dump-logits file logits.bin already exists; pass --overwrite" g1.log -- \
  "${GEN[@]}" --dump-logits logits.bin
expect_exit 2 "--dump-logits file models/target/config.json is one of this command's inputs|is the same file as models/target/config.json" \
  g2.log -- "${GEN[@]}" --dump-logits models/target/config.json --overwrite
"${GEN[@]}" --dump-logits logits.bin --overwrite >/dev/null || fail "generate --overwrite failed"
echo '{}' >bench.json
expect_exit 2 "--json file bench.json already exists; pass --overwrite" b1.log -- \
  "$SPECRUN_BIN" bench --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 --vocab 256 \
  --repeats 1 --warmup 1 --steps 2 --context 4 --threads 1 --cases decode --json bench.json
[[ $(cat bench.json) == '{}' ]] || fail "bench.json was replaced"
inputs_unchanged "generate"

# --- make-model and import-llama2c: an existing model only with --overwrite ----------------------
MM=(--hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 --vocab 256)
expect_exit 2 "model file models/target/model.safetensors already exists; pass --overwrite" m1.log -- \
  "$SPECRUN_BIN" make-model models "${MM[@]}" --seed 7
inputs_unchanged "make-model without --overwrite"
"$SPECRUN_BIN" make-model models2 "${MM[@]}" >/dev/null || fail "make-model models2 failed"
"$SPECRUN_BIN" make-model models2 "${MM[@]}" --seed 7 --overwrite >/dev/null || fail "make-model --overwrite failed"
cmp -s models/target/model.safetensors models2/target/model.safetensors &&
  fail "make-model --overwrite did not replace the weights"
if [[ -f $SHARED/models/stories260K/stories260K.bin ]]; then
  ST=$SHARED/models/stories260K
  "$SPECRUN_BIN" import-llama2c "$ST/stories260K.bin" st --tokenizer "$ST/tok512.bin" >/dev/null ||
    fail "import-llama2c failed"
  expect_exit 2 "model file st/model.safetensors already exists" i1.log -- \
    "$SPECRUN_BIN" import-llama2c "$ST/stories260K.bin" st --tokenizer "$ST/tok512.bin"
  cp "$ST/tok512.bin" st2-tok.bin && mkdir st2 && ln st2-tok.bin st2/tokenizer.bin
  expect_exit 2 "model file st2/tokenizer.bin is the same file as st2-tok.bin" i2.log -- \
    "$SPECRUN_BIN" import-llama2c "$ST/stories260K.bin" st2 --tokenizer st2-tok.bin --overwrite
  cmp -s st2-tok.bin "$ST/tok512.bin" || fail "import-llama2c damaged its tokenizer"
else
  echo "NOTE: no ../shared stories260K; import-llama2c not checked"
fi

# --- the plot scripts -----------------------------------------------------------------------------
PLOT="$SRC_DIR/scripts/plot_results.py"
PLOT_SWEEP="$SRC_DIR/scripts/plot_sweep.py"
"$PY" "$PLOT" r.h5 plots >/dev/null || fail "plot_results.py failed"
acc_sum=$(sum plots/acceptance.png)
rc=0
"$PY" "$PLOT" r2.h5 plots >pl1.log 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "plots/acceptance.png already exists; pass --overwrite" pl1.log ||
  fail "plot_results.py over existing plots: exit $rc, $(cat pl1.log)"
[[ $(sum plots/acceptance.png) == "$acc_sum" ]] || fail "plots/acceptance.png changed"
"$PY" "$PLOT" r2.h5 plots --overwrite >/dev/null || fail "plot_results.py --overwrite failed"
mkdir lplots && ln -s ../victim lplots/tau.png
rc=0
"$PY" "$PLOT" r.h5 lplots --overwrite >pl2.log 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "lplots/tau.png is a symbolic link" pl2.log ||
  fail "plot_results.py through a link: exit $rc, $(cat pl2.log)"
[[ $(cat victim) == precious && ! -e lplots/acceptance.png ]] || fail "wrote through lplots/tau.png or began"
mkdir iplots && ln r.h5 iplots/phases.png
rc=0
"$PY" "$PLOT" r.h5 iplots --overwrite >pl3.log 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "iplots/phases.png is the same file as r.h5" pl3.log ||
  fail "plot_results.py over its input: exit $rc, $(cat pl3.log)"
inputs_unchanged "plot_results.py"
"$SPECRUN_BIN" report r.h5 r2.h5 --json >table.json
"$PY" "$PLOT_SWEEP" table.json splots >/dev/null || fail "plot_sweep.py failed"
rc=0
"$PY" "$PLOT_SWEEP" table.json splots >ps1.log 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "splots/speedup.png already exists" ps1.log ||
  fail "plot_sweep.py over existing plots: exit $rc, $(cat ps1.log)"
ln -sf ../victim splots/tau.png
rc=0
"$PY" "$PLOT_SWEEP" table.json splots --overwrite >ps2.log 2>&1 || rc=$?
[[ $rc -eq 2 && $(cat victim) == precious ]] || fail "plot_sweep.py through a link: exit $rc, $(cat ps2.log)"
[[ -z $(find . -name '.*.tmp') ]] || fail "temporary files left: $(find . -name '.*.tmp')"

# --- a full disk: exit 1 naming the path, an existing output byte-identical, no temporary file ----
mkdir full
if mount -t tmpfs -o size=64k tmpfs full 2>/dev/null; then
  trap 'umount -l full 2>/dev/null || true; cleanup_shm' EXIT
  echo '{"old": true}' >full/out.jsonl
  dd if=/dev/zero of=full/filler bs=1k 2>/dev/null || true # the disk is now full
  expect_exit 1 "cannot write --outputs file full/new.jsonl: no space left on the device \(disk full\); full/new.jsonl was left as it was" \
    f1.log -- "$SPECRUN_BIN" report r.h5 --outputs full/new.jsonl
  expect_exit 1 "cannot write --outputs file full/out.jsonl: no space left on the device \(disk full\)" \
    f2.log -- "$SPECRUN_BIN" report r.h5 --outputs full/out.jsonl --overwrite
  [[ $(cat full/out.jsonl) == '{"old": true}' && ! -e full/new.jsonl ]] || fail "the full disk changed an output"
  [[ -z $(find full -name '.*.tmp') ]] || fail "temporary files left on the full disk"
  umount -l full
else
  echo "NOTE: cannot mount a tmpfs here (needs root): the full-disk case did not run"
fi

# --- overlong names and read-only folders: exit 2 naming the path -----------------------------------
long=$(printf 'n%.0s' {1..300})
expect_exit 2 "--outputs file $long.jsonl has a name of 306 bytes, and the file system allows 255" \
  n1.log -- "$SPECRUN_BIN" report r.h5 --outputs "$long.jsonl"
expect_exit 2 "prompt file $long.h5 has a name of 303 bytes" n2.log -- \
  "$SPECRUN_BIN" prepare in.jsonl "$long.h5"
if mode=$("$RO_RUN" --mode); then
  echo "read-only folders: $mode"
  mkdir ro
  expect_exit 2 "cannot write --outputs file ro/out.jsonl: (the file system holding ro is read-only|permission denied: the folder ro is not writable)" \
    r1.log -- "$RO_RUN" ro "$SPECRUN_BIN" report r.h5 --outputs ro/out.jsonl
  expect_exit 2 "cannot write prompt file ro/p.h5: (the file system holding ro is read-only|permission denied: the folder ro is not writable)" \
    r2.log -- "$RO_RUN" ro "$SPECRUN_BIN" prepare in.jsonl ro/p.h5
  expect_exit 2 "cannot write model file ro/m/target/model.safetensors: (the file system holding ro is read-only|permission denied: the folder ro is not writable)" \
    r3.log -- "$RO_RUN" ro "$SPECRUN_BIN" make-model ro/m "${MM[@]}"
  rc=0
  "$RO_RUN" ro "$PY" "$PLOT" r.h5 ro/plots >r4.log 2>&1 || rc=$?
  [[ $rc -eq 2 ]] && grep -q "cannot create the output folder ro/plots" r4.log ||
    fail "plot_results.py into a read-only folder: exit $rc, $(cat r4.log)"
  [[ -z $(ls ro) ]] || fail "something was written in ro: $(ls ro)"
  grep -h "^error" r1.log r2.log r3.log r4.log
else
  echo "SKIPPED: the read-only folder checks (root, without user namespaces or setpriv)"
  inputs_unchanged "the end"
  exit 77
fi
inputs_unchanged "the end"
echo "output_files: OK"
