#!/usr/bin/env bash
# The prepare -> run -> report flow on 4 ranks (dp 2 x tp 2) with a small synthetic pair: the
# result file read with h5py has the documented layout, the right counts, identical greedy
# outputs in both modes and every rank's provenance; `specrun report` prints the summary and
# `report --json` agrees with numbers recomputed in Python from the raw datasets.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 14 --categories code,chat,math
# 14 prompts in batches of 4: the last batch holds 2 (a partial batch); 4 batches over dp 2.
write_job job.toml out.h5 prompts.h5
"${MPIRUN[@]}" -np 4 "$SPECRUN_BIN" run job.toml >run.log 2>&1 || fail "run failed: $(tail -5 run.log)"
grep -q 'greedy outputs identical: 14 / 14 prompts' run.log || fail "run summary: $(tail -30 run.log)"

"$SPECRUN_BIN" report out.h5 >report.txt
cat report.txt
for want in 'world 4 = dp 2 x tp 2' '^speculative +14 +4 ' 'acceptance by depth' \
  'P\(n>=i\|n>=i-1\)' 'speedup \(speculative vs baseline\): [0-9.]+x +\[95% CI' \
  'greedy outputs identical: 14 / 14' 'speculative verify ' 'by category'; do
  grep -qE -- "$want" report.txt || fail "report lacks /$want/"
done
if grep -q 'did not finish' report.txt; then fail "a finished job reported as unfinished"; fi
"$SPECRUN_BIN" report out.h5 --json >report.json
"$PY" "$E2E_DIR/check_run_result.py" out.h5 --prompts 14 --world 4 --tp 2 --draft-len 4 \
  --report-json report.json

# Bad input to report: exit 2 with a message naming the file.
expect_exit 2 'missing.h5: no such file' bad1.log -- "$SPECRUN_BIN" report missing.h5
expect_exit 2 'prompts.h5.*not a specrun result file' bad2.log -- "$SPECRUN_BIN" report prompts.h5
echo "run_demo: all checks passed"
