#!/usr/bin/env bash
# Bitwise the same outputs on the CPU backend: the greedy tokens and every logit of
# `specrun generate --dump-logits` (code-target and code-target-f32 at tp 1 and tp 2,
# stories260K), and the output tokens of jobs/demo.toml and jobs/code-pair.toml in both modes,
# greedy and at temperature 0.8. This is how a refactoring of the model or the engine is shown
# to change nothing. Two forms:
#   scripts/check-same-outputs.sh OLD_SPECRUN NEW_SPECRUN [WORKDIR]
#       runs both binaries side by side and compares every file;
#   scripts/check-same-outputs.sh --golden FILE NEW_SPECRUN [WORKDIR]
#       compares NEW's outputs with the SHA-256 sums recorded in FILE (tests/golden/*.sha256,
#       made with --record), for every kernel variant FILE has that this CPU supports;
#   scripts/check-same-outputs.sh --record FILE SPECRUN [WORKDIR]
#       writes those sums for SPECRUN, for every kernel variant this CPU supports.
#   env: VARIANTS  kernel variants to force (SPECRUN_CPU_ISA), space-separated; default: for
#                  OLD/NEW "default" (each binary's own choice: binaries that predate
#                  SPECRUN_CPU_ISA ignore it), for --golden/--record every variant this CPU has
#        SHARED    the shared folder (default ../shared);  NP  ranks of the job runs (default 4)
# Exits 0 when everything is identical, 1 naming each difference (77: nothing to compare).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=pair
if [ "${1:-}" = --golden ] || [ "${1:-}" = --record ]; then
  MODE=${1#--}
  GOLDEN=$(realpath -m "$2")
  NEW=$(realpath "$3")
  WORK=${4:-same-outputs}
else
  OLD=$(realpath "$1")
  NEW=$(realpath "$2")
  WORK=${3:-same-outputs}
fi
SHARED=$(realpath "${SHARED:-../shared}")
NP=${NP:-4}
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
WORK=$(realpath "$WORK")
if [ ! -f "$SHARED/models/reference.json" ]; then
  echo "shared models not found at $SHARED: nothing to compare"
  exit 77
fi

# Kernel variants: what the caller asked for, else (golden/record) every one this CPU runs: the
# variants up to the best that NEW finds (`--version`: "in use: avx512 (best for this CPU)"), not
# /proc/cpuinfo's flags, which need not match what the CPU and its OS support.
if [ -n "${VARIANTS:-}" ]; then
  read -r -a variants <<<"$VARIANTS"
elif [ "$MODE" = pair ]; then
  variants=(default)
else
  best=$(env -u SPECRUN_CPU_ISA "$NEW" --version | sed -n 's/.*in use: \([a-z0-9]*\) (best.*/\1/p')
  case $best in
    avx512) variants=(baseline avx2 avx512) ;;
    avx2) variants=(baseline avx2) ;;
    *) variants=(baseline) ;;
  esac
fi

# Inputs made once, by NEW, read by every run.
[ -f "$WORK/demo-models/target/config.json" ] || "$NEW" make-model "$WORK/demo-models" >/dev/null
[ -f "$WORK/stories260K/config.json" ] ||
  "$NEW" import-llama2c "$SHARED/models/stories260K/stories260K.bin" "$WORK/stories260K" >/dev/null
"$NEW" prepare data/demo_prompts.jsonl "$WORK/demo_prompts.h5" --overwrite >/dev/null
"$NEW" prepare "$SHARED/prompts/code_prompts.jsonl" "$WORK/code_prompts.h5" --overwrite >/dev/null
PROMPT=$($PY -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompts'][0]['tokens'])))" "$SHARED/models/reference.json")

failures=0
# run_cases BIN OUTDIR VARIANT: every output file of one binary under one forced variant.
run_cases() {
  local bin=$1 out=$2 v=$3 envs=()
  [ "$v" = default ] || envs=("SPECRUN_CPU_ISA=$v")
  rm -rf "$out" && mkdir -p "$out" # --dump-logits replaces no file unless told (--overwrite)
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
    local paths
    if [ "$job" = demo ]; then
      paths=(--set "target.path=$WORK/demo-models/target" --set "draft.path=$WORK/demo-models/draft"
        --set "data.prompts=$WORK/demo_prompts.h5")
    else
      paths=(--set "data.prompts=$WORK/code_prompts.h5" --set "data.max_prompts=16")
    fi
    for temp in 0 0.8; do
      env "${envs[@]}" mpirun -np "$NP" "$bin" run "jobs/$job.toml" "${paths[@]}" \
        --set "decode.temperature=$temp" --set "job.output=$out/$job-T$temp.h5" >/dev/null 2>&1 ||
        { echo "FAILED     $bin $job T=$temp (variant $v)"; failures=$((failures + 1)); }
      $PY - "$out/$job-T$temp.h5" "$out/$job-T$temp.tokens" <<'PYEOF'
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
}

# Sums of one run's outputs, as "variant file sha256" lines.
sums() {
  local dir=$1 v=$2
  (cd "$dir" && sha256sum -- *.tokens *.logits) | awk -v v="$v" '{print v, $2, $1}'
}

for v in "${variants[@]}"; do
  case $MODE in
    pair)
      run_cases "$OLD" "$WORK/$v/OLD" "$v"
      run_cases "$NEW" "$WORK/$v/NEW" "$v"
      for f in "$WORK/$v/OLD/"*.tokens "$WORK/$v/OLD/"*.logits; do
        if cmp -s "$f" "$WORK/$v/NEW/$(basename "$f")"; then
          echo "same       $v $(basename "$f")"
        else
          echo "DIFFERENT  $v $(basename "$f")"
          failures=$((failures + 1))
        fi
      done
      ;;
    record)
      run_cases "$NEW" "$WORK/$v/rec" "$v"
      sums "$WORK/$v/rec" "$v" >>"$WORK/record.tmp"
      ;;
    golden)
      if ! grep -q "^$v " "$GOLDEN"; then
        echo "no recorded sums for variant $v in $GOLDEN"
        continue
      fi
      run_cases "$NEW" "$WORK/$v/new" "$v"
      while read -r gv file want; do
        [ "$gv" = "$v" ] || continue
        got=$(sha256sum "$WORK/$v/new/$file" | cut -d' ' -f1)
        if [ "$got" = "$want" ]; then
          echo "same       $v $file"
        else
          echo "DIFFERENT  $v $file (recorded $want, now $got)"
          failures=$((failures + 1))
        fi
      done <"$GOLDEN"
      ;;
  esac
done
if [ "$MODE" = record ]; then
  mkdir -p "$(dirname "$GOLDEN")"
  {
    echo "# SHA-256 of scripts/check-same-outputs.sh's outputs, by kernel variant and file."
    echo "# Recorded with: scripts/check-same-outputs.sh --record $(basename "$GOLDEN") <specrun>"
    echo "# by $("$NEW" --version | head -n 1)"
    cat "$WORK/record.tmp"
  } >"$GOLDEN"
  rm -f "$WORK/record.tmp"
  echo "recorded $(grep -vc '^#' "$GOLDEN") sums in $GOLDEN"
  exit 0
fi
if [ "$failures" -gt 0 ]; then
  echo "$failures difference(s)"
  exit 1
fi
echo "all outputs identical"
