#!/usr/bin/env bash
# The drafters side by side on the trained code pair (../shared/models): the small draft model
# (chain), the EAGLE-3 head (chain and two trees) and n-gram lookup, each as one job that
# decodes the same prompts with the target alone (baseline) and with speculation, one after the
# other in this one script, on one rank with one thread (CPU). Prints a Markdown table: tau,
# alpha, speculative tokens/s, baseline tokens/s and the paired speedup with its 95% interval.
#   usage: scripts/drafters-table.sh [WORKDIR] [PROMPTS] [MAX_NEW_TOKENS]   (defaults: demo-out/drafters 50 64)
# Benchmark on a quiet machine: the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
SPECRUN=${SPECRUN:-build/specrun}
SHARED=${SPECRUN_SHARED_DIR:-../shared}
WORK=${1:-demo-out/drafters}
N=${2:-50}
NEW=${3:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
"$SPECRUN" prepare "$SHARED/prompts/code_prompts.jsonl" "$WORK/code_prompts.h5" --overwrite >/dev/null
common=(--set parallel.tp=1 --set parallel.threads=1 --set data.batch_size=1
  --set "data.max_prompts=$N" --set "decode.max_new_tokens=$NEW" --set decode.stop_at_eos=false
  --set decode.temperature=0 --set "data.prompts=$WORK/code_prompts.h5"
  --set "target.path=$SHARED/models/code-target-f32")
declare -a names sets
names+=("draft model, chain k=4");  sets+=("draft.kind=model draft.path=$SHARED/models/code-draft-f32 decode.draft_len=4")
names+=("EAGLE-3, chain k=4");      sets+=("draft.kind=eagle3 draft.path=$SHARED/models/code-eagle3 decode.draft_len=4")
names+=("EAGLE-3, tree 4/5/15");    sets+=("draft.kind=eagle3 draft.path=$SHARED/models/code-eagle3 decode.tree_top_k=4 decode.tree_depth=5 decode.tree_nodes=15")
names+=("EAGLE-3, tree 8/6/31");    sets+=("draft.kind=eagle3 draft.path=$SHARED/models/code-eagle3 decode.tree_top_k=8 decode.tree_depth=6 decode.tree_nodes=31")
names+=("n-gram 4..1, chain k=4");  sets+=("draft.kind=ngram decode.draft_len=4")
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $N prompts, $NEW new tokens, greedy, F32"
for i in "${!names[@]}"; do
  args=()
  for kv in ${sets[$i]}; do args+=(--set "$kv"); done
  mpirun -np 1 "$SPECRUN" run jobs/code-pair.toml "${common[@]}" "${args[@]}" \
    --set "job.output=$WORK/run$i.h5" >"$WORK/run$i.log" 2>&1 ||
    { tail -5 "$WORK/run$i.log" >&2; exit 1; }
  "$SPECRUN" report "$WORK/run$i.h5" --json >"$WORK/run$i.json"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$WORK" "${names[@]}" <<'PY'
import json, sys
work, names = sys.argv[1], sys.argv[2:]
print("| drafter | tau | alpha | nodes/step | tokens/s | baseline tokens/s | speedup [95% CI] |")
print("|---|---|---|---|---|---|---|")
for i, name in enumerate(names):
    r = json.load(open(f"{work}/run{i}.json"))
    s, b, sp = r["modes"]["speculative"], r["modes"]["baseline"], r["speedup"]
    ok = "" if r["greedy_identical"] == r["paired_prompts"] else " (OUTPUTS DIFFER)"
    print(f"| {name}{ok} | {s['tau']:.3f} | {s['alpha']:.3f} | {s['mean_nodes']:.1f} | "
          f"{s['tokens_per_s']:.0f} | {b['tokens_per_s']:.0f} | "
          f"{sp['value']:.2f}x [{sp['low']:.2f}, {sp['high']:.2f}] |")
PY
