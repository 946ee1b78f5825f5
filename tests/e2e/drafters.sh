#!/usr/bin/env bash
# The drafters end to end on a synthetic 4-layer pair and its EAGLE-3 head (make-model):
#  1. EAGLE-3 trees (4/5/15) on 4 ranks (dp 2 x tp 2), the head replicated and sharded, and
#     n-gram chains on 2 ranks: greedy
#     outputs equal baseline's, the result file (schema 2: steps/depth, bonus, emitted) read
#     with h5py satisfies every identity, and `report --json` agrees with numbers recomputed
#     from the raw datasets (check_run_result.py); the text report shows the tree metrics.
#  2. Bad drafter keys and heads exit 2 naming the key or file, never hang a rank, and leave an
#     existing result file untouched.
#  3. A result file of schema 1 (tests/golden, written by specrun 836c867) still opens in report
#     and compare.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

"$SPECRUN_BIN" make-model models --hidden 64 --layers 4 --heads 4 --kv-heads 2 \
  --intermediate 128 --vocab 256 >make.log
grep -q 'models/eagle3 (an EAGLE-3 head)' make.log || fail "make-model wrote no head: $(cat make.log)"
make_prompt_file prompts.h5 10 --categories code,chat
write_job job.toml out.h5 prompts.h5

run() {  # run NAME NP [--set ...]
  local name=$1 np=$2
  shift 2
  timeout 300 "${MPIRUN[@]}" -np "$np" "$SPECRUN_BIN" run job.toml --set job.output=$name.h5 "$@" \
    >$name.log 2>&1 || fail "run $name failed: $(tail -5 $name.log)"
  grep -q 'greedy outputs identical: 10 / 10 prompts' $name.log || fail "$name: $(tail -30 $name.log)"
  "$SPECRUN_BIN" report $name.h5 >$name.txt
  "$SPECRUN_BIN" report $name.h5 --json >$name.json
}

# 1. EAGLE-3 tree, dp 2 x tp 2 (the head replicated on every rank).
run eagle3 4 --set draft.kind=eagle3 --set draft.path=models/eagle3 --set decode.tree_top_k=4 \
  --set decode.tree_depth=5 --set decode.tree_nodes=15
cat eagle3.txt
"$PY" "$E2E_DIR/check_run_result.py" eagle3.h5 --prompts 10 --world 4 --tp 2 --draft-len 5 \
  --report-json eagle3.json
for want in 'acceptance by depth' 'tree size \(nodes: steps\) +(1?[0-9]:[0-9]+ )*15:[0-9]+' \
  'accepted length \(n: steps\) 0:' 'bonus token in [0-9.]+% of steps'; do
  grep -qE -- "$want" eagle3.txt || fail "eagle3 report lacks /$want/"
done
"$PY" - eagle3.json <<'PY' || fail "eagle3: the synthetic head does not draft usefully"
import json, sys
m = json.load(open(sys.argv[1]))["modes"]["speculative"]
print(f"eagle3 tree: tau {m['tau']:.3f}, mean nodes {m['mean_nodes']:.2f}")
assert m["tau"] > 1.5 and 10 <= m["mean_nodes"] <= 15, m
PY

# The same head sharded like the target (draft.placement = "sharded"): the same greedy tokens.
run eagle3_sharded 4 --set draft.kind=eagle3 --set draft.path=models/eagle3 \
  --set draft.placement=sharded --set decode.tree_top_k=4 --set decode.tree_depth=5 \
  --set decode.tree_nodes=15
"$PY" "$E2E_DIR/check_run_result.py" eagle3_sharded.h5 --prompts 10 --world 4 --tp 2 \
  --draft-len 5 --report-json eagle3_sharded.json

# n-gram chains of up to 4 (the prompts repeat no text, but generated text does).
run ngram 2 --set draft.kind=ngram --set draft.ngram_max=3 --set draft.ngram_min=1
"$PY" "$E2E_DIR/check_run_result.py" ngram.h5 --prompts 10 --world 2 --tp 2 --draft-len 4 \
  --report-json ngram.json

# 2. Bad keys: exit 2, the key named, no rank left waiting (expect_exit's timeout).
RUN=("${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=bad.h5)
expect_exit 2 'draft\.kind = "eagle3" needs draft\.path' e1.log -- "${RUN[@]}" \
  --set draft.kind=eagle3 --set draft.path=
expect_exit 2 'draft\.kind = "ngram" proposes chains but decode\.tree_top_k = 4' e2.log -- \
  "${RUN[@]}" --set draft.kind=ngram --set decode.tree_top_k=4
expect_exit 2 'draft\.ngram_min = 5 .* is larger than draft\.ngram_max = 4' e3.log -- \
  "${RUN[@]}" --set draft.kind=ngram --set draft.ngram_min=5
expect_exit 2 'draft\.kind = "medusa".*(model|eagle3|ngram)' e4.log -- "${RUN[@]}" \
  --set draft.kind=medusa
if [ -f "${SPECRUN_SHARED_DIR:-/nonexistent}/models/code-eagle3/config.json" ]; then
  expect_exit 2 'code-eagle3/config.json: "vocab_size" = 2048 but the target has 256 tokens' \
    e5.log -- "${RUN[@]}" --set draft.kind=eagle3 \
    --set draft.path="$SPECRUN_SHARED_DIR/models/code-eagle3"
fi
[ ! -e bad.h5 ] || fail "a refused job wrote bad.h5"
# A head that fails to load leaves an existing result file as it was, even with job.overwrite.
mkdir badhead && cp models/eagle3/* badhead/ && sed -i 's/"num_hidden_layers": 1/"num_hidden_layers": 2/' badhead/config.json
cp ngram.h5 keep.h5
before=$(sha256sum <keep.h5)
expect_exit 2 'badhead/config.json: "num_hidden_layers" = 2: heads with extra decoder layers' \
  e6.log -- "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=keep.h5 \
  --set job.overwrite=true --set draft.kind=eagle3 --set draft.path=badhead
[[ $(sha256sum <keep.h5) == "$before" ]] || fail "a job whose head failed to load changed keep.h5"

# 3. Schema 1 files still open.
OLD="$E2E_DIR/../golden/result-v1-836c867.h5"
"$SPECRUN_BIN" report "$OLD" >old.txt || fail "report of a schema-1 file: $(cat old.txt)"
grep -qE '^speculative +6 +2 +72 .* 3\.667 +1\.000' old.txt || fail "schema-1 report: $(cat old.txt)"
grep -q 'acceptance by depth' old.txt || fail "schema-1 report without acceptance: $(cat old.txt)"
"$SPECRUN_BIN" report "$OLD" --json >old.json
rc=0
"$SPECRUN_BIN" compare "$OLD" eagle3.h5 --threshold 1000 >cmp.txt 2>&1 || rc=$?
# Different models and configurations: two experiments (exit 3), compared all the same.
[[ $rc -eq 3 ]] || fail "compare of a schema-1 and a schema-2 file: exit $rc: $(tail -5 cmp.txt)"
grep -q 'provenance' cmp.txt || fail "compare printed no provenance: $(cat cmp.txt)"
echo "drafters: all checks passed"
