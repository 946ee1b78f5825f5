#!/usr/bin/env bash
# Trains models/code-moe-eagle3, the EAGLE-3 head of the trained mixture-of-experts code target
# models/code-moe, through specrun's own loop: prompts from the target's TRAINING split
# (make_train_prompts.py: the Python 3.11 standard library, files held out by crc32 never used),
# a dataset job keeping EAGLE-3's capture layers and the final norm (jobs/code-moe-dataset.toml,
# dp 2), then scripts/train_eagle3.py for MINUTES (default 15) of wall time on one thread.
#   scripts/train-code-moe-eagle3.sh [OUT_DIR] [MINUTES]      (default OUT_DIR: demo-out/code-moe-eagle3)
# Needs a built specrun (build/specrun), mpirun, /usr/bin/python3 with torch and sentencepiece,
# and ../shared/models/tokenizer (the code models' tokenizer).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-demo-out/code-moe-eagle3}
MINUTES=${2:-15}
SPECRUN=${SPECRUN_BIN:-build/specrun}
mkdir -p demo-out
/usr/bin/python3 scripts/make_train_prompts.py demo-out/train_prompts.jsonl --n 2400
"$SPECRUN" prepare demo-out/train_prompts.jsonl demo-out/train_prompts.h5 --overwrite
mpirun -np 2 --oversubscribe "$SPECRUN" run jobs/code-moe-dataset.toml
/usr/bin/python3 scripts/train_eagle3.py demo-out/code-moe-dataset.h5 models/code-moe "$OUT" \
  --minutes "$MINUTES" --threads 1
echo "train-code-moe-eagle3: wrote $OUT"
