#!/usr/bin/env bash
# The default demo: a synthetic target/draft pair, 64 prompts, baseline and speculative decoding
# on 8 MPI ranks (dp 4 x tp 2), then the report; then the same prompts drafted by the synthetic
# EAGLE-3 head (a 4/5/15 tree), one line. Writes everything under demo-out/.
#   usage: scripts/demo.sh [number of ranks, default 8]
set -euo pipefail
cd "$(dirname "$0")/.."
SPECRUN=${SPECRUN:-build/specrun}
NP=${1:-8}
[ -x "$SPECRUN" ] || { echo "build first: cmake -S . -B build && cmake --build build -j2" >&2; exit 2; }

# Open MPI as root, and more ranks than cores, need these (harmless otherwise).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1

mkdir -p demo-out
[ -f demo-out/models/eagle3/config.json ] || "$SPECRUN" make-model demo-out/models
"$SPECRUN" prepare data/demo_prompts.jsonl demo-out/demo_prompts.h5 --overwrite
mpirun -np "$NP" "$SPECRUN" run jobs/demo.toml
echo "the same summary again, from the file: $SPECRUN report demo-out/demo.h5 (--json for scripts)"

# EAGLE-3: the head make-model wrote for the synthetic target, drafting 4/5/15 trees.
mpirun -np "$NP" "$SPECRUN" run jobs/demo.toml --set draft.kind=eagle3 \
  --set draft.path=demo-out/models/eagle3 --set decode.tree_top_k=4 --set decode.tree_depth=5 \
  --set decode.tree_nodes=15 --set decode.modes=speculative --set job.output=demo-out/demo-eagle3.h5 \
  >demo-out/demo-eagle3.log 2>&1 || { tail -20 demo-out/demo-eagle3.log >&2; exit 1; }
echo
echo "EAGLE-3 head (synthetic, tree 4/5/15) on the same prompts (log: demo-out/demo-eagle3.log):"
"$SPECRUN" report demo-out/demo-eagle3.h5 | grep -E '^(mode|speculative) '
