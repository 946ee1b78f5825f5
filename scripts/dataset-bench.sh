#!/usr/bin/env bash
# Continuous against static batching, side by side in one run: the same dataset job (batch 8,
# EOS on, sampled at temperature 1, 96 prompts whose continuations end anywhere from 2 to 250
# tokens) with dataset.continuous = true and false, alternated three times; prints generated
# tokens/s of each, the slots' use and the ratio.
#
# The target is a synthetic 180M-parameter bf16 model (specrun make-model: hidden 2048, 4 layers,
# vocabulary 64 with a flat lm_head, so EOS comes at about 1 step in 40): big enough that a
# decoding step costs about the same for 1 and for 8 rows (its weights are read once per step),
# the regime of real targets on GPUs and of large ones on CPUs. On a tiny CPU model, where a
# step's cost is proportional to its rows, continuous batching cannot gain much: the script also
# prints stories260K (../shared/models) for comparison.
#   usage: scripts/dataset-bench.sh [work dir]   (a quiet machine; about 4 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
SPECRUN=${SPECRUN:-$PWD/build/specrun}
SHARED=${SPECRUN_SHARED_DIR:-../shared}
WORK=${1:-demo-out/dataset-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
[ -f "$WORK/big/target/config.json" ] ||
  "$SPECRUN" make-model "$WORK/big" --hidden 2048 --layers 4 --heads 16 --kv-heads 8 \
    --intermediate 5632 --vocab 64 --lm-head-std 0.02 >/dev/null
/usr/bin/python3 - "$WORK" <<'PY'
import json, random, sys
r = random.Random(3)
with open(f"{sys.argv[1]}/big.jsonl", "w") as f:
    for i in range(96):
        tokens = [1] + [r.randrange(3, 64) for _ in range(r.randint(4, 16))]
        f.write(json.dumps({"id": f"b{i}", "tokens": tokens}) + "\n")
with open(f"{sys.argv[1]}/stories.jsonl", "w") as f:
    for i in range(96):
        f.write(json.dumps({"id": f"s{i}", "tokens": [1]}) + "\n")
PY
"$SPECRUN" prepare "$WORK/big.jsonl" "$WORK/big.h5" --overwrite >/dev/null
"$SPECRUN" prepare "$WORK/stories.jsonl" "$WORK/stories.h5" --overwrite >/dev/null
if [ ! -f "$WORK/stories/config.json" ]; then
  "$SPECRUN" import-llama2c "$SHARED/models/stories260K/stories260K.bin" "$WORK/stories" >/dev/null
  # llama2.c's TinyStories data separates stories with BOS (1), not EOS: a story ends at BOS.
  sed -i 's/"eos_token_id": 2/"eos_token_id": 1/' "$WORK/stories/config.json"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
run() {  # run MODEL PROMPTS MAX_NEW continuous|static -> "tokens/s slot-use"
  local model=$1 prompts=$2 max_new=$3 c=$4 flag=true
  [ "$c" = static ] && flag=false
  mpirun -np 1 "$SPECRUN" run jobs/code-dataset.toml --set data.prompts="$prompts" \
    --set target.path="$model" --set data.max_prompts=96 --set data.batch_size=8 \
    --set decode.max_new_tokens="$max_new" --set decode.temperature=1.0 \
    --set decode.stop_at_eos=true --set dataset.hidden_layers=eagle3 \
    --set dataset.continuous=$flag --set job.output="$WORK/$c.h5" >"$WORK/$c.log" 2>&1 ||
    { tail -5 "$WORK/$c.log" >&2; exit 1; }
  awk '/^ +0 +[0-9]+ +[0-9]+ +[0-9.]+/ {print $4, $5}' "$WORK/$c.log"
}
lengths() {
  /usr/bin/python3 -c "
import h5py, numpy as np
s = h5py.File('$WORK/static.h5', 'r')['sequences']
g = s['generated'][:]
print(f'{int((s[\"finish_reason\"][:] == 1).sum())} of {len(g)} ended at EOS; generated tokens '
      f'min {g.min()}, median {int(np.median(g))}, max {g.max()}')"
}
compare() {  # compare NAME MODEL PROMPTS MAX_NEW ROUNDS
  local name=$1 model=$2 prompts=$3 max_new=$4 rounds=$5
  for i in $(seq 1 "$rounds"); do
    read -r c_tps c_use <<<"$(run "$model" "$prompts" "$max_new" continuous)"
    read -r s_tps s_use <<<"$(run "$model" "$prompts" "$max_new" static)"
    echo "$name round $i: continuous $c_tps tokens/s (slot use $c_use), static $s_tps tokens/s" \
      "(slot use $s_use), ratio $(echo "scale=3; $c_tps / $s_tps" | bc)"
  done
  echo "$name: $(lengths)"
}
compare "synthetic 180M bf16" "$WORK/big/target" "$WORK/big.h5" 256 3
compare "stories260K" "$WORK/stories" "$WORK/stories.h5" 500 1
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
