#!/bin/bash
# `specrun prepare` end to end: JSONL -> prompt file, read back with h5py as a researcher would,
# checking the layout documented in docs/file-formats.md (dtypes, shapes, chunking, filters,
# attributes) and the contents; then overwrite refusal and bad-input reporting (exit code 2,
# every bad line named, nothing written).
set -euo pipefail
: "${SPECRUN_BIN:?}"
PY=/usr/bin/python3
CHECK="$(dirname "$0")/check_prompt_file.py"
# The working directory persists between runs: start from a clean slate.
rm -f in.jsonl out.h5 out.h5.tmp code.h5 bad.jsonl bad.h5 bad.h5.tmp ./*.err ./*.log

echo "== generated JSONL with every optional field"
"$PY" - <<'EOF'
import json, random
random.seed(5)
with open("in.jsonl", "w") as f:
    for i in range(300):
        rec = {"tokens": [random.randrange(0, 32000) for _ in range(1 + i % 40)],
               "id": i if i % 2 else f"s-{i}", "category": ["code", "chat", "math"][i % 3]}
        if i % 5 == 0:
            rec["text"] = f"prompt {i} \u00e9\u4e2d"
        f.write(json.dumps(rec) + "\n")
        if i % 50 == 0:
            f.write("\n")  # empty lines are skipped
EOF
"$SPECRUN_BIN" prepare in.jsonl out.h5 | tee prepare.log
grep -q "wrote out.h5: 300 prompts" prepare.log
"$PY" "$CHECK" out.h5 in.jsonl
test ! -e out.h5.tmp

echo "== the shared code prompt set"
if [ -f "${SPECRUN_SHARED_DIR:-/nonexistent}/prompts/code_prompts.jsonl" ]; then
  "$SPECRUN_BIN" prepare "$SPECRUN_SHARED_DIR/prompts/code_prompts.jsonl" code.h5
  "$PY" "$CHECK" code.h5 "$SPECRUN_SHARED_DIR/prompts/code_prompts.jsonl"
else
  echo "(skipped: no shared prompt set)"
fi

echo "== an existing output is refused without --overwrite"
before=$(md5sum out.h5)
set +e
"$SPECRUN_BIN" prepare in.jsonl out.h5 2> refuse.err
rc=$?
set -e
cat refuse.err
[ "$rc" -eq 2 ] || { echo "expected exit code 2, got $rc"; exit 1; }
grep -q "already exists" refuse.err
grep -q -- "--overwrite" refuse.err
[ "$(md5sum out.h5)" == "$before" ] || { echo "out.h5 changed"; exit 1; }
"$SPECRUN_BIN" prepare in.jsonl out.h5 --overwrite
"$PY" "$CHECK" out.h5 in.jsonl

echo "== bad lines are reported by number and nothing is written"
cat > bad.jsonl <<'EOF'
{"tokens": [1, 2, 3]}
{"tokens": [1, 2,
{"text": "no tokens"}

{"tokens": [5, -3]}
{"tokens": []}
{"tokens": [7]}
EOF
# Line 8: 100,000 nested lists (crashed the parser's error path before; issue 18).
"$PY" -c "print('{\"tokens\": ' + '[' * 100000 + ']' * 100000 + '}')" >> bad.jsonl
set +e
"$SPECRUN_BIN" prepare bad.jsonl bad.h5 2> bad.err
rc=$?
set -e
cut -c1-300 bad.err
[ "$rc" -eq 2 ] || { echo "expected exit code 2, got $rc"; exit 1; }
grep -q "5 bad lines" bad.err
grep -q "line 8: nested more than 64 levels deep" bad.err
for line in 2 3 5 6 8; do grep -q "line $line:" bad.err || { echo "line $line not reported"; exit 1; }; done
if grep -q "line 1:\|line 7:" bad.err; then echo "a good line was reported"; exit 1; fi
test ! -e bad.h5
test ! -e bad.h5.tmp

echo "== usage errors"
set +e
"$SPECRUN_BIN" prepare only-one-arg.jsonl 2> usage.err
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "expected exit code 2 for a missing argument, got $rc"; exit 1; }
grep -q "usage: specrun prepare" usage.err
echo "prepare_h5py: OK"
