#!/usr/bin/env bash
# The run-time acceptance alarm (decode.alarm_steps, decode.min_tau), on 2 ranks (tp 2):
#  1. a job whose drafts are never accepted (decode.acceptance = "fixed:0": acceptance exactly 0
#     from the first step) warns once after decode.alarm_steps verify steps, the warning recorded
#     in the result file (root attribute `alarms`, read back by h5py; `report` prints it; `report
#     --json` lists it), and the job finishes (exit 0);
#  2. the same job with decode.min_tau = 1.5 stops after the batch that reached alarm_steps:
#     exit 1, the reason printed once (by rank 0; no rank hangs), the file readable in h5py with
#     the batches written before the stop, unfinished, the stop's reason among its alarms;
#  3. no alarm with real acceptance (the truncated draft accepts), nor with alarm_steps = 0;
#  4. preflight: a draft that is the target (its folder, or a copy) warns and is recorded; an
#     EAGLE-3 head run as draft.kind = "model" is refused naming the kind.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 16
export E2E_BATCH=4 E2E_TP=2  # 4 batches per mode; a batch has 4 x 15 verify steps (4 x 50 drafted tokens: the last steps draft fewer)
write_job job.toml out.h5 prompts.h5
run() {  # run NAME EXPECTED_RC SETTINGS...
  local name=$1 want=$2 rc=0
  shift 2
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$name.h5 \
    --set decode.stop_at_eos=false "$@" >$name.log 2>$name.err || rc=$?
  [[ $rc -eq $want ]] || fail "$name: exit $rc, expected $want: $(tail -5 $name.err)"
}
ZERO=(--set decode.acceptance=fixed:0 --set decode.alarm_steps=100)

# 1. A warning, once; the job finishes.
run warn 0 "${ZERO[@]}"
[[ $(cat warn.log warn.err | grep -c 'speculative acceptance alarm: tau 1.00 after') -eq 1 ]] ||
  fail "the alarm was not said exactly once: $(grep "acceptance alarm" warn.log warn.err)"
grep -q 'speculative acceptance alarm: tau 1.00 after 120 verify steps (0 of 400 drafted' \
  warn.log warn.err || fail "the alarm does not give the counts: $(grep "acceptance alarm" warn.log warn.err)"
"$SPECRUN_BIN" report warn.h5 >warn_report.txt
[[ $(grep -c '^ALARM .*speculative acceptance alarm' warn_report.txt) -eq 1 ]] ||
  fail "report does not show the alarm: $(head -5 warn_report.txt)"
"$SPECRUN_BIN" report warn.h5 --json | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
assert j["job_finished"] is True, j["finished"]
assert len(j["alarms"]) == 1 and "tau 1.00" in j["alarms"][0], j["alarms"]'
"$PY" - warn.h5 <<'PY'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    alarms = [a.decode() if isinstance(a, bytes) else a for a in f.attrs["alarms"]]
    assert len(alarms) == 1 and "0 of 400 drafted tokens accepted" in alarms[0], alarms
    assert f.attrs["finished"] not in ("", b""), "unfinished"
PY

# 2. decode.min_tau: the job stops after the second batch (2 x 60 >= 100 verify steps).
run stop 1 "${ZERO[@]}" --set decode.min_tau=1.5
[[ $(grep -c 'decode.min_tau = 1.5: tau 1.00 after 120 verify steps' stop.err) -eq 1 ]] ||
  fail "the stop's reason is not printed once: $(cat stop.err)"
"$PY" - stop.h5 <<'PY'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["finished"] in ("", b""), "a stopped job's file says finished"
    assert f["speculative"].attrs["batches_committed"] == 2, f["speculative"].attrs["batches_committed"]
    alarms = [a.decode() if isinstance(a, bytes) else a for a in f.attrs["alarms"]]
    assert len(alarms) == 2 and "decode.min_tau = 1.5" in alarms[1], alarms
PY
"$SPECRUN_BIN" report stop.h5 >stop_report.txt
grep -q 'the job did not finish' stop_report.txt || fail "report of the stopped job: $(head -3 stop_report.txt)"

# 3. No alarm with real acceptance, nor when the alarm is off.
run real 0 --set decode.alarm_steps=100 --set decode.min_tau=1.2
run off 0 --set decode.acceptance=fixed:0 --set decode.alarm_steps=0 --set decode.min_tau=1.5
for name in real off; do
  ! grep -q 'acceptance alarm\|min_tau' $name.log $name.err || fail "$name: an alarm: $(cat $name.err)"
  "$PY" -c 'import h5py, sys; assert "alarms" not in h5py.File(sys.argv[1], "r").attrs' $name.h5
done
# 4. Preflight (issue 47): a draft that is the target warns and is recorded, the job runs on;
# the same folder through draft.path, and a copy of it (caught by the content fingerprints at
# the end). An EAGLE-3 head run as draft.kind = "model" is refused, naming the kind to use.
run self 0 --set draft.path=models/target
grep -q 'preflight: draft.path (.*models/target) is target.path' self.err self.log ||
  fail "no warning for a draft that is the target: $(tail -3 self.err)"
cp -r models/target models/copy
run copy 0 --set draft.path=models/copy
grep -q "preflight: the draft model's files (.*models/copy) are the target's" copy.err copy.log ||
  fail "no warning for a copy of the target: $(tail -3 copy.err)"
for name in self copy; do
  "$SPECRUN_BIN" report $name.h5 >${name}_report.txt
  [[ $(grep -c '^ALARM .*preflight: ' ${name}_report.txt) -eq 1 ]] ||
    fail "$name: report does not show the preflight warning once: $(grep ALARM ${name}_report.txt)"
done
SHARED=${SPECRUN_SHARED_DIR:-/nonexistent}
if [[ -f "$SHARED/models/code-eagle3/config.json" ]]; then
  rc=0
  "$SPECRUN_BIN" run job.toml --set job.output=e3.h5 --set parallel.tp=1 \
    --set draft.path="$SHARED/models/code-eagle3" >e3.log 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || fail "an EAGLE-3 head as draft.kind = model: exit $rc"
  grep -q 'LlamaForCausalLMEagle3.*is not supported.*EAGLE-3 draft head.*draft.kind = "eagle3"' e3.log ||
    fail "the refusal does not name the kind: $(tail -3 e3.log)"
fi
echo "acceptance_alarm: OK"
