#!/usr/bin/env bash
# The trained mixture-of-experts code target (models/code-moe, Qwen3-MoE 16 experts top-2) with
# real drafters on held-out code prompts (../shared/prompts), tp 2 with the experts split over the
# ranks: greedy speculative output equals baseline token for token with its trained EAGLE-3 head
# (models/code-moe-eagle3; a 5-token chain and a 4/5/15 tree), the dense code draft model sharing
# its tokenizer (chain and tree) and n-gram lookup; the trained head is accepted as trained (tau
# well above a chain's 1), so the loop verified real proposals. Skipped (77) without ../shared.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
SHARED=${SPECRUN_SHARED_DIR:-/nonexistent}
MODELS=$(realpath "$E2E_DIR/../../models")
[ -f "$SHARED/prompts/code_prompts.jsonl" ] && [ -d "$SHARED/models/code-draft" ] || {
  echo "SKIP: $SHARED/prompts/code_prompts.jsonl or $SHARED/models/code-draft not found"
  exit 77
}
rm -rf w && mkdir w && cd w
"$SPECRUN_BIN" prepare "$SHARED/prompts/code_prompts.jsonl" code.h5 >/dev/null
write_job job.toml out.h5 code.h5

run() {  # run NAME [--set ...]: greedy baseline and speculative, tp 2, 16 prompts
  local name=$1
  shift
  timeout 600 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$name.h5 \
    --set target.path="$MODELS/code-moe" --set data.max_prompts=16 --set data.batch_size=4 \
    --set decode.max_new_tokens=48 --set decode.stop_at_eos=false "$@" >$name.log 2>&1 ||
    fail "run $name failed: $(tail -5 $name.log)"
  grep -q 'greedy outputs identical: 16 / 16 prompts' $name.log || fail "$name: $(tail -30 $name.log)"
  "$SPECRUN_BIN" report $name.h5 --json >$name.json
  echo "$name: greedy speculative == baseline, tau $("$PY" -c \
    "import json; print('%.3f' % json.load(open('$name.json'))['modes']['speculative']['tau'])")"
}
tau_above() {  # tau_above NAME MIN
  "$PY" -c "import json, sys; sys.exit(0 if json.load(open('$1.json'))['modes']['speculative']['tau'] > $2 else 1)" ||
    fail "$1: tau not above $2: the trained head is not drafting as trained"
}

head=(--set draft.kind=eagle3 --set draft.path="$MODELS/code-moe-eagle3")
tree=(--set decode.tree_top_k=4 --set decode.tree_depth=5 --set decode.tree_nodes=15)
run eagle3_chain5 "${head[@]}" --set decode.draft_len=5
run eagle3_tree "${head[@]}" "${tree[@]}"
run model_chain4 --set draft.kind=model --set draft.path="$SHARED/models/code-draft" \
  --set decode.draft_len=4
run model_tree --set draft.kind=model --set draft.path="$SHARED/models/code-draft" "${tree[@]}"
run ngram --set draft.kind=ngram
tau_above eagle3_chain5 2.5
tau_above eagle3_tree 2.5
echo "code_moe_spec: the trained MoE target, greedy speculative == baseline with every drafter"
