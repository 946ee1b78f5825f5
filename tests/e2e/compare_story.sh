#!/usr/bin/env bash
# The story specrun exists for (issue 17): a new build slows the verify step, and a variable
# reaches one rank only. `specrun compare OLD.h5 NEW.h5` must say so in its first five lines:
# the verdict naming speculative verify, the speedup change, the code change with its clean or
# dirty state, and the variable set on rank 0 alone; exit 1. Also: a cross-rank mismatch present
# in both runs is printed by compare and report (the red herring that never reached the workers),
# a configuration change is reported as two experiments (exit 3), not as a regression, and so is
# a draft checkpoint replaced at the same path (content fingerprints), and a forced CPU kernel
# variant leads the verdict as a recorded change (CHANGED), never as the host's.
# The new build is simulated: debug.inject_delay_ms slows verify by 2 ms per step, and the
# result file's git_commit/git_dirty attributes are set to another commit, dirty.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 16
write_job job.toml out.h5 prompts.h5
SLOW=(--set debug.inject_phase=verify --set debug.inject_delay_ms=2)
run_one() {  # run_one OUT [specrun options]: both ranks alike
  local out=$1
  shift
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$out "$@" >$out.log 2>&1 ||
    fail "run $out failed: $(tail -5 $out.log)"
}
run_split() {  # run_split OUT [specrun options]: NCCL_PROTO=LL on rank 0 only (MPMD launch)
  local out=$1
  shift
  "${MPIRUN[@]}" -np 1 -x NCCL_PROTO=LL "$SPECRUN_BIN" run job.toml --set job.output=$out "$@" : \
    -np 1 "$SPECRUN_BIN" run job.toml --set job.output=$out "$@" >$out.log 2>&1 ||
    fail "run $out failed: $(tail -5 $out.log)"
}
run_one old.h5
run_split new.h5 "${SLOW[@]}"
# The other build: another commit, with uncommitted changes.
"$PY" - <<'PY'
import h5py
with h5py.File("old.h5", "r+") as f:
    f.attrs["git_commit"] = "1111111aaaaaaabbbbbbbcccccccdddddddeeee0"
    f.attrs["git_dirty"] = False
with h5py.File("new.h5", "r+") as f:
    f.attrs["git_commit"] = "2222222aaaaaaabbbbbbbcccccccdddddddeeee0"
    f.attrs["git_dirty"] = True
PY

# 1. The story: the answer is in the first five lines.
rc=0
"$SPECRUN_BIN" compare old.h5 new.h5 >story.txt || rc=$?
head -6 story.txt
[[ $rc -eq 1 ]] || fail "exit $rc, expected 1 (regression)"
head -5 story.txt >top.txt
# A difference the runs recorded comes first (the code, then the rest), then the timings' verdict.
# (Under load other phases may regress too and come first; a busier host's are listed last.)
grep -qE '^CHANGED: code 1111111 \(clean\) -> 2222222 \(dirty\); .* \| REGRESSION: (.*; )?speculative verify \+[0-9.]+% \[95% CI \+[0-9.]+%, \+[0-9.]+%\] per step' top.txt ||
  fail "line 1 does not name the code change, then speculative verify: $(head -1 top.txt)"
grep -qE '^speedup [0-9.]+x -> [0-9.]+x: [-+][0-9.]+% \[95% CI' top.txt || fail "no speedup change in the first 5 lines"
grep -qF 'code 1111111 (clean) -> 2222222 (dirty)' top.txt || fail "no code change with its state in the first 5 lines"
grep -qF 'NCCL_PROTO differs: "LL" on rank 0; <unset> on rank 1' top.txt ||
  fail "the variable set on rank 0 only is not in the first 5 lines"
grep -qF 'NCCL_PROTO: added "LL" on rank 0' top.txt || fail "the environment change is not in the first 5 lines"
if grep -q 'OMPI_APP_CTX_NUM_PROCS\|OMPI_FIRST_RANKS\|OMPI_NUM_APP_CTX' story.txt; then
  fail "launch-syntax variables of the MPMD launch are reported as changes"
fi
"$SPECRUN_BIN" compare old.h5 new.h5 --json >story.json || [[ $? -eq 1 ]]
"$PY" - <<'PY'
import json
c = json.load(open("story.json"))
assert c["exit_code"] == 1 and c["regression"] is True, c["exit_code"]
assert c["verdict"][0].startswith("CHANGED: code 1111111 (clean) -> 2222222 (dirty)"), c["verdict"]
assert " | REGRESSION: " in c["verdict"][0] and "speculative verify +" in c["verdict"][0], c["verdict"]
assert c["speedup"] is not None and c["speedup"]["ci_low"] <= c["speedup"]["relative_change"] <= c["speedup"]["ci_high"]
assert c["code"] == {"base": "1111111 (clean)", "new": "2222222 (dirty)"}, c["code"]
assert c["mismatches"]["base"] == [] and len(c["mismatches"]["new"]) == 1, c["mismatches"]
v = [t for t in c["timings"] if t["mode"] == "speculative" and t["name"] == "verify"][0]
assert v["regression"] and v["new_ms_per_token"] > v["base_ms_per_token"], v
print("compare --json: story ok")
PY

# 2. The same mismatch in both runs: not a change, but printed by compare and by report.
run_split split.h5
rc=0
"$SPECRUN_BIN" compare split.h5 new.h5 --threshold 1000 >both.txt || rc=$?
head -5 both.txt
[[ $rc -ne 2 && $rc -ne 3 ]] || fail "compare of the two split runs: exit $rc"
head -5 both.txt | grep -qE 'cross-rank mismatches: NEW: NCCL_PROTO differs: "LL" on rank 0; <unset> on rank 1 \| BASE: NCCL_PROTO differs' ||
  fail "a mismatch present in both runs is not printed"
"$SPECRUN_BIN" report split.h5 >report.txt
grep -qF 'NCCL_PROTO differs: "LL" on rank 0; <unset> on rank 1' report.txt || fail "report does not print the mismatch"
"$SPECRUN_BIN" report old.h5 >report-old.txt
grep -q 'cross-rank mismatches: none' report-old.txt || fail "report of a uniform run"

# 3. A configuration change is another experiment: exit 3, per-token costs, no regression verdict.
run_one k2.h5 --set decode.draft_len=2
rc=0
"$SPECRUN_BIN" compare old.h5 k2.h5 >experiment.txt || rc=$?
head -2 experiment.txt
[[ $rc -eq 3 ]] || fail "draft_len 4 vs 2: exit $rc, expected 3"
head -1 experiment.txt | grep -qE '^DIFFERENT EXPERIMENTS \(decode.draft_len differ.*speculative ms per token: draft [0-9.]+ -> [0-9.]+' ||
  fail "no experiment verdict: $(head -1 experiment.txt)"
# 4. The draft checkpoint replaced at the same path (another trained draft): the content
# fingerprints differ, so compare names the model and calls the runs two experiments.
"$SPECRUN_BIN" make-model alt --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 \
  --vocab 256 --seed 5 >/dev/null
cp alt/draft/* models/draft/
run_one swapped.h5
rc=0
"$SPECRUN_BIN" compare old.h5 swapped.h5 >swapped.txt || rc=$?
head -5 swapped.txt
[[ $rc -eq 3 ]] || fail "swapped draft: exit $rc, expected 3"
head -1 swapped.txt | grep -qF 'DIFFERENT EXPERIMENTS (draft model differ' || fail "the swapped draft is not the verdict"
head -5 swapped.txt | grep -qE 'models: draft model: "xxh3:[0-9a-f]{16} \(.*models/draft\)" -> "xxh3:[0-9a-f]{16} \(.*models/draft; model.safetensors: values \(same tensors\)\)"' ||
  fail "the draft's fingerprints are not shown"
if head -5 swapped.txt | grep -q 'target model'; then fail "the unchanged target is reported"; fi
# 5. The CPU kernel variant forced (SPECRUN_CPU_ISA=baseline, as a user testing a kernel change
# would): a difference the run recorded leads the verdict whatever the timings did, never the
# host's load (issue 48: the forced variant doubled verify and was called ENVIRONMENT).
"${MPIRUN[@]}" -np 2 -x SPECRUN_CPU_ISA=baseline "$SPECRUN_BIN" run job.toml --set job.output=isa.h5 \
  >isa.h5.log 2>&1 || fail "run isa.h5 failed: $(tail -5 isa.h5.log)"
rc=0
"$SPECRUN_BIN" compare swapped.h5 isa.h5 >isa.txt || rc=$?  # both with the swapped draft
head -2 isa.txt
[[ $rc -eq 0 || $rc -eq 1 ]] || fail "forced kernel variant: exit $rc, expected 0 or 1"
head -1 isa.txt | grep -qE '^CHANGED: .*cpu_isa' || fail "the kernel variant does not lead: $(head -1 isa.txt)"
if head -1 isa.txt | grep -q ENVIRONMENT; then fail "a recorded change was called ENVIRONMENT"; fi
echo "compare_story: OK"
