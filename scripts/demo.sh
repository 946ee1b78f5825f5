#!/usr/bin/env bash
# The default demo: a synthetic target/draft pair, 64 prompts, baseline and speculative decoding
# on 8 MPI ranks (dp 4 x tp 2), then the report. Writes everything under demo-out/.
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
[ -f demo-out/models/target/config.json ] || "$SPECRUN" make-model demo-out/models
"$SPECRUN" prepare data/demo_prompts.jsonl demo-out/demo_prompts.h5 --overwrite
mpirun -np "$NP" "$SPECRUN" run jobs/demo.toml
echo "the same summary again, from the file: $SPECRUN report demo-out/demo.h5 (--json for scripts)"
