#!/usr/bin/env bash
# EAGLE-3 acceptance against the figures ../shared/models/code-eagle3/README.md reports for its
# head on code-target (F32 weights, greedy, first 50 code prompts, 64 new tokens, no EOS): every
# row of its table (chains k = 1, 2, 4, 6; trees; the draft model) is run with specrun and
# counted as the README says (scripts/eagle3_tau.py: max_new_tokens 71, only the verify steps
# that begin while fewer than 64 new tokens exist). Mean and pooled tau must be within 2% of the
# README's, and the greedy output identical to baseline; the BF16 head within 5% (chain k=4 and
# the first tree). Skipped (77) without ../shared.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
SHARED=${SPECRUN_SHARED_DIR:-/nonexistent}
README=$SHARED/models/code-eagle3/README.md
[ -f "$README" ] && [ -f "$SHARED/prompts/code_prompts.jsonl" ] || {
  echo "SKIP: $README not found"
  exit 77
}
rm -rf w && mkdir w && cd w
"$SPECRUN_BIN" prepare "$SHARED/prompts/code_prompts.jsonl" code.h5 >/dev/null

# The README's rows: name mean_tau pooled_tau (e.g. "chain_k4 2.245 2.113").
"$PY" - "$README" >rows.txt <<'PY'
import re, sys
for line in open(sys.argv[1]):
    m = re.match(r"\|\s*((?:chain_k\d+)|(?:tree_k\d+_d\d+_t\d+)|(?:draft_model_k\d+))\s*\|"
                 r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", line)
    if m:
        print(m.group(1), m.group(2), m.group(3))
PY
[[ $(wc -l <rows.txt) -ge 6 ]] || fail "could not read the figures table of $README"
cat rows.txt

run() {  # run NAME HEAD_DIR ROW
  local name=$1 head=$2 row=$3 args=()
  if [[ $row =~ ^chain_k([0-9]+)$ ]]; then
    args=(--set draft.kind=eagle3 --set "draft.path=$head" --set "decode.draft_len=${BASH_REMATCH[1]}")
  elif [[ $row =~ ^tree_k([0-9]+)_d([0-9]+)_t([0-9]+)$ ]]; then
    # EAGLE's (top_k, depth, total_token) = ours (top_k, depth + 1, total_token - 1).
    args=(--set draft.kind=eagle3 --set "draft.path=$head"
      --set "decode.tree_top_k=${BASH_REMATCH[1]}" --set "decode.tree_depth=$((BASH_REMATCH[2] + 1))"
      --set "decode.tree_nodes=$((BASH_REMATCH[3] - 1))")
  elif [[ $row =~ ^draft_model_k([0-9]+)$ ]]; then
    args=(--set draft.kind=model --set "draft.path=$SHARED/models/code-draft-f32"
      --set "decode.draft_len=${BASH_REMATCH[1]}")
  else
    fail "unknown setting $row"
  fi
  timeout 600 "${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run "$E2E_DIR/../../jobs/code-pair.toml" \
    --set parallel.tp=1 --set data.prompts=code.h5 --set data.max_prompts=50 \
    --set data.batch_size=8 --set decode.max_new_tokens=71 --set decode.stop_at_eos=false \
    --set decode.temperature=0 --set "target.path=$SHARED/models/code-target-f32" \
    --set job.output=$name.h5 "${args[@]}" </dev/null >$name.log 2>&1 || fail "$name: $(tail -5 $name.log)"
  grep -q 'greedy outputs identical: 50 / 50 prompts' $name.log || fail "$name: outputs differ"
  "$PY" "$E2E_DIR/../../scripts/eagle3_tau.py" $name.h5 --new 64 --json >$name.json
}

check() {  # check NAME ROW MEAN POOLED TOLERANCE
  "$PY" - "$@" <<'PY' || fail "$1: tau off the README's $3 / $4 by more than $5"
import json, sys
name, row, mean, pooled, tol = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
r = json.load(open(f"{name}.json"))
dm, dp = r["mean_tau"] / mean - 1, r["pooled_tau"] / pooled - 1
print(f"  {name:28s} mean tau {r['mean_tau']:.3f} (README {mean:.3f}, {100 * dm:+.2f}%)  "
      f"pooled {r['pooled_tau']:.3f} (README {pooled:.3f}, {100 * dp:+.2f}%)  S {r['S']} A {r['A']}")
sys.exit(0 if abs(dm) <= tol and abs(dp) <= tol else 1)
PY
}

first_tree=""
while read -r row mean pooled; do
  run "$row" "$SHARED/models/code-eagle3" "$row"
  check "$row" "$row" "$mean" "$pooled" 0.02
  [[ -n $first_tree || ! $row =~ ^tree ]] || first_tree="$row $mean $pooled"
done <rows.txt
# The BF16 head against the F32 figures.
grep -q '^chain_k4 ' rows.txt || fail "no chain_k4 row in $README"
for line in "$(grep '^chain_k4 ' rows.txt)" "$first_tree"; do
  read -r row mean pooled <<<"$line"
  run "bf16_$row" "$SHARED/models/code-eagle3-bf16" "$row"
  check "bf16_$row" "$row" "$mean" "$pooled" 0.05
done
echo "eagle3_tau: all settings within tolerance"
