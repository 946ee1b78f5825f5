#!/usr/bin/env bash
# The speculative loop unchanged on mixture-of-experts targets (make-model --arch qwen3_moe and
# mixtral, 8 experts, top-2, tp 2): greedy speculative outputs equal the baseline's, token for
# token, with every drafter: the draft model (chains and trees; Qwen3-MoE's draft is its dense
# first layer, Mixtral's an MoE layer with the target's experts), the EAGLE-3 head make-model
# writes for the target (chains and 4/5/15 trees) and n-gram chains; with the experts split over
# the ranks (parallel.ep = tp, the default) and with every expert on every rank (ep = 1). The job
# log gives the weights per rank and the experts each rank holds; `specrun bench` runs on an MoE
# target. parallel.ep values other than 1
# and tp, and expert counts the ranks cannot split, exit 2 naming the key or the config.json
# field, with no rank left waiting.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

shape=(--hidden 64 --layers 4 --heads 4 --kv-heads 2 --vocab 256 --experts 8 --experts-per-tok 2)
"$SPECRUN_BIN" make-model qwen3moe --arch qwen3_moe "${shape[@]}" --intermediate 128 \
  --moe-intermediate 64 --mlp-only-layers 0 >make.log
"$SPECRUN_BIN" make-model mixtral --arch mixtral "${shape[@]}" --intermediate 64 --seed 3 >>make.log
grep -q 'qwen3moe/eagle3 (an EAGLE-3 head)' make.log || fail "no EAGLE-3 head: $(cat make.log)"
make_prompt_file prompts.h5 10 --categories code,chat
write_job job.toml out.h5 prompts.h5

run() {  # run NAME MODELS [--set ...]: greedy baseline and speculative, tp 2
  local name=$1 models=$2
  shift 2
  timeout 300 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$name.h5 \
    --set target.path=$models/target "$@" >$name.log 2>&1 || fail "run $name failed: $(tail -5 $name.log)"
  grep -q 'greedy outputs identical: 10 / 10 prompts' $name.log || fail "$name: $(tail -30 $name.log)"
  echo "$name: greedy speculative == baseline ($(grep -o 'target weights: .*' $name.log))"
}

tree=(--set decode.tree_top_k=4 --set decode.tree_depth=5 --set decode.tree_nodes=15)
run q_model_chain qwen3moe --set draft.path=qwen3moe/draft
run q_model_tree qwen3moe --set draft.path=qwen3moe/draft --set decode.tree_top_k=2 \
  --set decode.tree_depth=4 --set decode.tree_nodes=8
run q_eagle3_chain qwen3moe --set draft.kind=eagle3 --set draft.path=qwen3moe/eagle3 \
  --set decode.draft_len=5
run q_eagle3_tree qwen3moe --set draft.kind=eagle3 --set draft.path=qwen3moe/eagle3 "${tree[@]}"
run q_ngram qwen3moe --set draft.kind=ngram --set draft.ngram_max=3 --set draft.ngram_min=1
run q_eagle3_tree_ep1 qwen3moe --set parallel.ep=1 --set draft.kind=eagle3 \
  --set draft.path=qwen3moe/eagle3 "${tree[@]}"
run m_model_chain mixtral --set draft.path=mixtral/draft
run m_model_tree_ep1 mixtral --set parallel.ep=1 --set draft.path=mixtral/draft \
  --set decode.tree_top_k=2 --set decode.tree_depth=4 --set decode.tree_nodes=8
run m_eagle3_tree mixtral --set draft.kind=eagle3 --set draft.path=mixtral/eagle3 "${tree[@]}"
# The drafts are accepted (verify passes commit drafted tokens, not only their corrections).
for name in q_model_tree q_eagle3_tree m_model_chain m_eagle3_tree; do
  "$SPECRUN_BIN" report $name.h5 --json >$name.json
  "$PY" -c "import json, sys; t = json.load(open('$name.json'))['modes']['speculative']['tau']; \
print('$name: tau %.3f' % t); sys.exit(0 if t > 2 else 1)" || fail "$name: drafts barely accepted"
done
grep -q 'target weights: .* per rank (tp 2, ep 2: 4 of 8 experts per rank' q_model_chain.log ||
  fail "no weights per rank in the job log: $(grep 'target weights' q_model_chain.log)"
grep -q 'ep 1: 8 of 8 experts per rank, each cut by tp' q_eagle3_tree_ep1.log ||
  fail "ep = 1 not in the job log: $(grep 'target weights' q_eagle3_tree_ep1.log)"
# The expert-parallel run and the ep = 1 run agree on every token and step.
"$PY" "$E2E_DIR/same_results.py" q_eagle3_tree.h5 q_eagle3_tree_ep1.h5 ||
  fail "parallel.ep = tp and ep = 1 give different outputs"

# bench runs on an MoE target (its figures count every expert's bytes as read: the accounting
# of the experts a pass reads is bench's to add).
"$SPECRUN_BIN" bench --model-dir mixtral/target --cases decode,verify --repeats 1 --steps 2 \
  --threads 1 >bench.log 2>&1 || fail "bench on an MoE target: $(tail -3 bench.log)"

# Bad expert parallelism: the key or the field named, exit 2, no rank waiting.
expect_exit 2 'parallel\.ep = 3 .* is not supported with parallel\.tp = 2' e1.log -- \
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=bad.h5 \
  --set target.path=qwen3moe/target --set parallel.ep=3
"$SPECRUN_BIN" make-model six --arch mixtral --hidden 64 --layers 4 --heads 4 --kv-heads 2 \
  --vocab 256 --experts 6 --experts-per-tok 2 --intermediate 64 >/dev/null
expect_exit 2 'six/target/config.json: num_local_experts = 6 is not divisible by parallel.ep = 4' \
  e2.log -- "${MPIRUN[@]}" -np 4 "$SPECRUN_BIN" run job.toml --set job.output=bad.h5 \
  --set target.path=six/target --set draft.path=six/draft --set parallel.tp=4
[ ! -e bad.h5 ] || fail "a refused job wrote bad.h5"
echo "moe_drafters: all checks passed"
