#!/usr/bin/env bash
# Greedy continuations of one model on the GPU and on the CPU backend, token for token
# (tests/gpu/check.sh runs it on the ~1.1B benchmark model): `specrun generate` of a few seeded
# random prompts on each backend. Both keep the weights' dtype and compute in float32; only a
# summation order differs, so a near-tie may rarely flip a token: the check asks that every
# prompt agree on at least its first half, and reports how many agree entirely.
#   usage: gpu_vs_cpu.sh MODEL_DIR [PROMPTS=3] [NEW_TOKENS=24]
set -euo pipefail
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
MODEL=${1:?usage: gpu_vs_cpu.sh MODEL_DIR [PROMPTS] [NEW_TOKENS]}
N=${2:-3}
NEW=${3:-24}
PY=${SPECRUN_PYTHON:-python3}
vocab=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$MODEL/config.json")
full=0
half=0
for i in $(seq 1 "$N"); do
  prompt=$("$PY" -c "import random, sys; random.seed(int(sys.argv[1])); print(','.join(['1'] + [str(random.randint(3, int(sys.argv[2]) - 1)) for _ in range(20 + 9 * int(sys.argv[1]))]))" "$i" "$vocab")
  gpu=$("$SPECRUN_BIN" generate "$MODEL" --tokens "$prompt" --max-new-tokens "$NEW" --backend cuda | head -1)
  cpu=$("$SPECRUN_BIN" generate "$MODEL" --tokens "$prompt" --max-new-tokens "$NEW" --backend cpu --threads "$(nproc)" | head -1)
  same=$("$PY" -c "
import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
print(next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))" "$gpu" "$cpu")
  echo "prompt $i: GPU and CPU agree on the first $same of $NEW tokens"
  [[ $same -eq $NEW ]] && full=$((full + 1))
  [[ $same -ge $((NEW / 2)) ]] && half=$((half + 1))
done
echo "GPU greedy == CPU greedy for $full of $N prompts ($half agree on at least the first half)"
[[ $half -eq $N ]]
