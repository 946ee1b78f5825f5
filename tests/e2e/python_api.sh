#!/usr/bin/env bash
# The Python package (python/specrun, docs/analysis.md "From Python") against `specrun report
# --json`: every figure the package computes (counts, tau, alpha, acceptance by depth, tokens/s,
# phase quantiles per step and per rank, categories, the paired speedup and its bootstrap
# intervals) equals the report's, on
#  1. the golden version-1 file (tests/golden/result-v1-836c867.h5; dp 2);
#  2. a fresh greedy job, baseline and speculative on 2 ranks (tp 2), two categories;
#  3. a fresh sampled job on 2 ranks as 2 data-parallel groups (tp 1: timing rows with NaN ranks),
#     stopping at EOS (sequences of different lengths), with its job.seed as the bootstrap seed;
#  4. a job of one new token (every sequence ends at the prefill: no step rows; batches placed by
#     data.batch_size);
#  5. the greedy file with its last speculative commit record damaged (both readers stop at the
#     record before it, with the same warning);
# with numpy record arrays (pandas is not required) and, where pandas is installed, DataFrames.
# The comparison can fail: a report made with another --seed gives other intervals, and the check
# must say so. A result file whose step rows break an identity is refused by the package, naming
# the prompt, as `report` refuses it. And `import specrun` works from the repository root with no
# build and no PYTHONPATH, as the README says.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
CHECK=("$PY" "$E2E_DIR/check_python_api.py")
rm -rf w && mkdir w && cd w

check() {  # check RESULT.h5: report --json, then the package against it
  local result=$1 name
  name=$(basename "$result" .h5)
  "$SPECRUN_BIN" report "$result" --json >"$name.json" || fail "report $result"
  "${CHECK[@]}" "$result" "$name.json" --tables numpy || fail "$result: the package differs from report --json"
  if "$PY" -c 'import pandas' 2>/dev/null; then
    "${CHECK[@]}" "$result" "$name.json" --tables pandas || fail "$result (pandas)"
  fi
}

# 1. The golden file.
check "$ROOT/tests/golden/result-v1-836c867.h5"

# 2. and 3. Fresh jobs.
make_models models
make_prompt_file prompts.h5 12 --categories code,chat
write_job job.toml greedy.h5 prompts.h5
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml >greedy.log 2>&1 || fail "greedy run: $(tail -5 greedy.log)"
check greedy.h5
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=sampled.h5 --set parallel.tp=1 \
  --set data.batch_size=3 --set decode.temperature=0.8 --set decode.stop_at_eos=true \
  --set job.seed=11 >sampled.log 2>&1 || fail "sampled run: $(tail -5 sampled.log)"
check sampled.h5

# `report --csv`: every table equals the package's (same column names), the summary the
# report's JSON; a second run into the same folder is refused without --overwrite.
check_csv() {  # check_csv RESULT.h5
  local name
  name=$(basename "$1" .h5)
  "$SPECRUN_BIN" report "$1" --csv "$name-csv" >/dev/null || fail "report --csv $1"
  "$PY" - "$1" "$name-csv" "$name.json" "$ROOT/python" <<'PYEOF' || fail "$1: report --csv differs from the package"
import csv, json, math, sys
sys.path.insert(0, sys.argv[4])
import numpy as np
import specrun
r = specrun.load(sys.argv[1], tables="numpy")
report = json.load(open(sys.argv[3]))
def rows(name):
    with open(f"{sys.argv[2]}/{name}.csv", newline="") as f:
        return list(csv.DictReader(f))
def same(table, got, cols, what):
    assert len(got) == len(table), (what, len(got), len(table))
    for c in cols:
        want = np.asarray(table[c])
        for i, row in enumerate(got):
            v = row[c]
            if want.dtype.kind in "iub":
                assert int(v) == int(want[i]), (what, c, i, v, want[i])
            elif want.dtype.kind == "f":  # float32 timings: 9 digits give the same float32
                w = float(want[i])
                val = np.float32(float(v)) if want.dtype == np.float32 and v else float(v or "nan")
                assert (v == "" and math.isnan(w)) or val == want[i], (what, c, i, v, w)
            else:
                w = want[i].decode() if isinstance(want[i], bytes) else str(want[i])
                assert v == w, (what, c, i, v, w)
for name, m in r.modes.items():
    same(m.sequences, rows(f"{name}_sequences"), ["prompt_index", "prompt_id", "category",
         "prompt_len", "generated", "verify_steps", "drafted", "accepted", "finish_reason",
         "wall_s"], f"{name} sequences")
    same(m.steps, rows(f"{name}_steps"), ["batch", "step", "prompt_index", "active", "drafted",
         "accepted", "depth", "bonus", "emitted"], f"{name} steps")
    same(m.timings, rows(f"{name}_timings"), ["row", "batch", "rank"] + m.phases,
         f"{name} timings")
    same(m.acceptance, rows(f"{name}_acceptance"), ["depth", "offered", "reached", "prior",
         "unconditional", "conditional"], f"{name} acceptance")
for row in rows("summary"):
    mode = report["modes"][row["mode"]]
    for k in ("prompts", "generated", "verify_steps", "drafted", "accepted"):
        assert int(row[k]) == mode[k], (row["mode"], k, row[k], mode[k])
    for k in ("tokens_per_s", "tau", "alpha"):
        assert math.isclose(float(row[k]), mode[k], rel_tol=1e-12), (row["mode"], k, row[k], mode[k])
    if row["speedup"]:
        s = report["speedup"]
        assert math.isclose(float(row["speedup"]), s["value"], rel_tol=1e-12), (row, s)
print(f"{sys.argv[1]}: report --csv equals the package's tables and report --json")
PYEOF
  if "$SPECRUN_BIN" report "$1" --csv "$name-csv" >/dev/null 2>csv-again.err; then
    fail "report --csv replaced existing files without --overwrite"
  fi
  grep -q 'already exists; pass --overwrite' csv-again.err || fail "$(cat csv-again.err)"
}
check_csv greedy.h5
check_csv sampled.h5
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["dp"] == 2 and not j["greedy"], j["dp"]' sampled.json
# One new token: every sequence ends at the prefill, no step rows, batches from data.batch_size.
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=prefill_only.h5 \
  --set decode.max_new_tokens=1 >prefill_only.log 2>&1 || fail "prefill-only run: $(tail -5 prefill_only.log)"
check prefill_only.h5
"$PY" -c 'import json,sys; m=json.load(open(sys.argv[1]))["modes"]["speculative"]; assert m["verify_steps"] == 0 and m["batches"] == 3, m' prefill_only.json

# A damaged last commit record (it points past the rows): both read up to the record before it
# and give the same warning and the same numbers.
cp greedy.h5 damaged.h5
"$PY" - damaged.h5 <<'PY'
import sys
import h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["speculative/batches/sequences_end"]
    d[-1] = d[-1] + 1000
PY
check damaged.h5
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j["warnings"]) == 1 and "points past the rows" in j["warnings"][0], j["warnings"]' damaged.json

# The comparison can fail: another seed, other intervals (the point estimate stays).
"$SPECRUN_BIN" report greedy.h5 --json --seed 99 >seed99.json
"${CHECK[@]}" greedy.h5 seed99.json --tables numpy --expect-mismatch speedup.low ||
  fail "the check did not see the intervals of another seed"

# A file that breaks an identity: the package refuses it naming the prompt, as report does.
cp greedy.h5 broken.h5
"$PY" - broken.h5 <<'PY'
import sys
import h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["speculative/steps/accepted"]
    d[0] = d[0] - 1 if d[0] > 0 else d[0] + 1
PY
rc=0
"$SPECRUN_BIN" report broken.h5 --json >broken_report.json 2>broken_report.err || rc=$?
[[ $rc -eq 2 ]] || fail "report accepted the broken file (exit $rc)"
rc=0
PYTHONPATH="$ROOT/python" "$PY" -c 'import specrun, sys; specrun.load(sys.argv[1]).summary()' broken.h5 \
  >broken_py.txt 2>&1 || rc=$?
[[ $rc -ne 0 ]] || fail "the package accepted the broken file"
grep -qE 'ResultFileError: .*broken.h5: speculative: (prompt [0-9]+: its step rows sum|accepted_per_position)' \
  broken_py.txt || fail "the package's refusal does not name the file, mode and row: $(tail -2 broken_py.txt)"

# Not a result file: a clear error naming the file.
rc=0
PYTHONPATH="$ROOT/python" "$PY" -c 'import specrun, sys; specrun.load(sys.argv[1])' prompts.h5 \
  >notresult.txt 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -q "prompts.h5 has schema 'specrun.prompts', expected 'specrun.result'" notresult.txt ||
  fail "a prompt file was not refused clearly: $(tail -2 notresult.txt)"

# From the repository root, no build, no PYTHONPATH (README, docs/analysis.md).
RESULT="$PWD/greedy.h5"
(cd "$ROOT" && env -u PYTHONPATH "$PY" -c "
import specrun, sys
r = specrun.load(sys.argv[1])
assert specrun.__file__.startswith(sys.argv[2]), specrun.__file__
print('from the root:', r, r.speedup())" "$RESULT" "$ROOT/specrun") || fail "import specrun from the repository root"
echo "python_api: OK"
