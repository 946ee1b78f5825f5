#!/usr/bin/env bash
# Two specrun binaries must give bitwise the same outputs on the CPU backend: the greedy tokens
# and every logit of `specrun generate --dump-logits` (code-target, code-target-f32 at tp 1 and
# tp 2, stories260K), and the output tokens of jobs/demo.toml and jobs/code-pair.toml in both
# modes, greedy and at temperature 0.8. This is how a refactoring of the model or the engine is
# shown to change nothing (e.g. OLD = a build of the commit before it).
#   usage: scripts/check-same-outputs.sh OLD_SPECRUN NEW_SPECRUN [WORKDIR, default same-outputs]
#   env:   VARIANTS  CPU kernel variants to force on both sides, space-separated (default: none
#                    forced, each binary's own choice; OLD binaries that predate SPECRUN_CPU_ISA
#                    ignore it, so force only variants that equal their -march=native build)
#          SHARED    the shared folder (default ../shared)
#          NP        ranks of the job runs (default 4: dp 2 x tp 2)
# Exits 0 when everything is identical, 1 naming each difference.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(realpath "$1")
NEW=$(realpath "$2")
WORK=${3:-same-outputs}
SHARED=$(realpath "${SHARED:-../shared}")
NP=${NP:-4}
read -r -a variants <<<"${VARIANTS:-default}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
WORK=$(realpath "$WORK")

# Inputs made once, by NEW, read by both.
[ -f "$WORK/demo-models/target/config.json" ] || "$NEW" make-model "$WORK/demo-models" >/dev/null
[ -f "$WORK/stories260K/config.json" ] ||
  "$NEW" import-llama2c "$SHARED/models/stories260K/stories260K.bin" "$WORK/stories260K" >/dev/null
cp -f "$SHARED/models/stories260K/"tok*.bin "$WORK/stories260K/" 2>/dev/null || true
"$NEW" prepare data/demo_prompts.jsonl "$WORK/demo_prompts.h5" --overwrite >/dev/null
"$NEW" prepare "$SHARED/prompts/code_prompts.jsonl" "$WORK/code_prompts.h5" --overwrite >/dev/null
PROMPT=$(/usr/bin/python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompts'][0]['tokens'])))" "$SHARED/models/reference.json")

failures=0
same() {  # same LABEL FILE_A FILE_B
  if cmp -s "$2" "$3"; then
    echo "same       $1"
  else
    echo "DIFFERENT  $1 ($2 vs $3)"
    failures=$((failures + 1))
  fi
}

for v in "${variants[@]}"; do
  envs=()
  [ "$v" = default ] || envs=("SPECRUN_CPU_ISA=$v")
  for side in OLD NEW; do
    bin=${!side}
    out="$WORK/$v/$side"
    mkdir -p "$out"
    for model in code-target code-target-f32; do
      for np in 1 2; do
        env "${envs[@]}" mpirun -np "$np" "$bin" generate "$SHARED/models/$model" --tokens "$PROMPT" \
          --max-new-tokens 24 --threads 1 --dump-logits "$out/$model-tp$np.logits" \
          >"$out/$model-tp$np.tokens"
      done
    done
    env "${envs[@]}" "$bin" generate "$WORK/stories260K" --tokens 1 --max-new-tokens 60 --threads 2 \
      --dump-logits "$out/stories260K.logits" >"$out/stories260K.tokens"
    for job in demo code-pair; do
      if [ "$job" = demo ]; then
        paths=(--set "target.path=$WORK/demo-models/target" --set "draft.path=$WORK/demo-models/draft"
          --set "data.prompts=$WORK/demo_prompts.h5")
      else
        paths=(--set "data.prompts=$WORK/code_prompts.h5" --set "data.max_prompts=16")
      fi
      for temp in 0 0.8; do
        env "${envs[@]}" mpirun -np "$NP" "$bin" run "jobs/$job.toml" "${paths[@]}" \
          --set "decode.temperature=$temp" --set "job.output=$out/$job-T$temp.h5" >/dev/null 2>&1 ||
          { echo "FAILED     $side $job T=$temp (variant $v)"; failures=$((failures + 1)); }
        /usr/bin/python3 - "$out/$job-T$temp.h5" "$out/$job-T$temp.tokens" <<'PYEOF'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f, open(sys.argv[2], "w") as out:
    for mode in ("baseline", "speculative"):
        s = f[mode]["sequences"]
        idx, offs, toks = s["prompt_index"][:], s["output_offsets"][:], s["output_tokens"][:]
        for row in sorted(range(len(idx)), key=lambda r: idx[r]):
            out.write(f"{mode} {idx[row]}: {' '.join(map(str, toks[offs[row]:offs[row + 1]]))}\n")
PYEOF
      done
    done
  done
  for f in "$WORK/$v/OLD/"*.tokens "$WORK/$v/OLD/"*.logits; do
    same "$v $(basename "$f")" "$f" "$WORK/$v/NEW/$(basename "$f")"
  done
done
if [ "$failures" -gt 0 ]; then
  echo "$failures difference(s)"
  exit 1
fi
echo "all outputs identical"
