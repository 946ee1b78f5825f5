#!/usr/bin/env bash
# specrun against its peer on the same weights and prompts (tests/gpu/check.sh's peer stage):
# Hugging Face transformers' generate (greedy, batch 1) and its assisted generation with the
# same draft, against `specrun run` baseline and speculative (greedy, batch 1, k = 4, CUDA).
#   usage: peer.sh PEER.json   (in a scratch directory; SPECRUN_BIN the specrun executable)
# The model: a ~1.1B-parameter BF16 synthetic Llama (hidden 2048, 16 layers, GQA 32/8,
# intermediate 8192, vocab 32000) and its 1-layer draft (the target truncated; deep-scale 0.2, so
# that the draft agrees with the target often: tau ~3.8 at k = 4 on a smaller analogue), from
# $SPECRUN_BENCH_DIR when test_cuda_bench made it there, else made here. Tokens/s = new tokens /
# wall time per prompt, prefill included, summed over the prompts, for both tools.
set -euo pipefail
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
OUT_JSON=${1:?usage: peer.sh PEER.json}
PY=${SPECRUN_PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${SPECRUN_BENCH_DIR:-$PWD/model-1b}
NEW=${PEER_NEW_TOKENS:-128}
N_PROMPTS=${PEER_PROMPTS:-8}
if [[ ${SPECRUN_LAUNCH:-mpirun} == direct ]]; then LAUNCH=(); else LAUNCH=(mpirun -np 1); fi

if [[ ! -f $MODEL/target/config.json ]]; then
  "$SPECRUN_BIN" make-model "$MODEL" --hidden 2048 --layers 16 --heads 32 --kv-heads 8 \
    --intermediate 8192 --vocab 32000 --max-pos 4096 --draft-layers 1 --deep-scale 0.2 --dtype bf16
fi
"$PY" - "$N_PROMPTS" <<'PYEOF'
import json, random, sys
random.seed(17)
with open("peer.jsonl", "w") as f:
    for i in range(int(sys.argv[1])):
        n = random.randint(64, 128)
        f.write(json.dumps({"id": f"p{i}", "tokens": [1] + [random.randint(3, 31999) for _ in range(n - 1)]}) + "\n")
PYEOF
"$SPECRUN_BIN" prepare peer.jsonl peer.h5 --overwrite >/dev/null
cat >peer.toml <<TOML
[job]
name = "peer"
output = "peer_run.h5"
overwrite = true
[target]
path = "$MODEL/target"
[draft]
kind = "model"
path = "$MODEL/draft"
placement = "replicated"
[parallel]
tp = 1
backend = "cuda"
[data]
prompts = "peer.h5"
batch_size = 1
[decode]
modes = ["baseline", "speculative"]
max_new_tokens = $NEW
draft_len = 4
temperature = 0.0
stop_at_eos = false
TOML
echo "specrun run (CUDA, batch 1, $NEW new tokens, k = 4)"
"${LAUNCH[@]}" "$SPECRUN_BIN" run peer.toml >peer_run.log 2>&1 || { tail -30 peer_run.log; exit 1; }
grep -A3 "^mode" peer_run.log || true
"$SPECRUN_BIN" report peer_run.h5 --json >peer_report.json
echo "transformers generate / assisted generation"
"$PY" "$HERE/peer_bench.py" --target "$MODEL/target" --draft "$MODEL/draft" --prompts peer.jsonl \
  --out hf.json --new-tokens "$NEW" --draft-len 4 --max-prompts "$N_PROMPTS" || echo "(peer_bench.py failed; see hf.json)"
"$PY" - "$OUT_JSON" <<'PYEOF'
import json, sys
import h5py
rep = json.load(open("peer_report.json"))
try:
    hf = json.load(open("hf.json"))
except Exception as e:
    hf = {"error": f"hf.json unreadable: {e}"}
modes = rep["modes"]
out = {"specrun": {m: {"tokens_per_s": modes[m]["tokens_per_s"], "tau": modes[m]["tau"],
                       "generated": modes[m]["generated"]} for m in modes},
       "specrun_speedup": rep.get("speedup"), "transformers": hf}
def hf_tps(key):
    v = hf.get(key) if isinstance(hf, dict) else None
    return v.get("tokens_per_s") if isinstance(v, dict) else None
ratios = {}
g, a = hf_tps("greedy"), hf_tps("assisted")
if g:
    ratios["specrun_baseline_over_hf_greedy"] = modes["baseline"]["tokens_per_s"] / g
    ratios["specrun_speculative_over_hf_greedy"] = modes["speculative"]["tokens_per_s"] / g
if a:
    ratios["specrun_speculative_over_hf_assisted"] = modes["speculative"]["tokens_per_s"] / a
if g and a:
    ratios["hf_assisted_over_hf_greedy"] = a / g
out["ratios"] = ratios
# Greedy tokens of the first prompts, specrun baseline vs transformers greedy (BF16 activations
# in transformers, float32 in specrun: equal up to near-ties).
try:
    with h5py.File("peer_run.h5", "r") as f:
        g5 = f["baseline/sequences"]
        off, tok, idx = g5["output_offsets"][:], g5["output_tokens"][:], g5["prompt_index"][:]
        ours = {int(idx[i]): tok[off[i]:off[i + 1]].tolist() for i in range(len(idx))}
    theirs = hf.get("greedy", {}).get("ids", []) if isinstance(hf, dict) else []
    cmp = []
    for i, ids in enumerate(theirs):
        mine = ours.get(i, [])
        same = next((j for j, (x, y) in enumerate(zip(mine, ids)) if x != y), min(len(mine), len(ids)))
        cmp.append({"prompt": i, "equal_prefix": same, "of": len(ids)})
    out["greedy_prefix_agreement"] = cmp
except Exception as e:
    out["greedy_prefix_agreement"] = f"error: {e}"
json.dump(out, open(sys.argv[1], "w"), indent=2)
print(json.dumps({"specrun": out["specrun"], "ratios": ratios}, indent=1))
PYEOF
