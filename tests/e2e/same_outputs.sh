#!/usr/bin/env bash
# The CPU backend's outputs are bitwise those of commit 836c867 (the code before the one-graph
# redesign; on AVX-512 it also equals a44fa19's -march=native build): greedy tokens and every
# logit of `specrun generate` on code-target, code-target-f32 (tp 1 and 2) and stories260K, and
# the output tokens of jobs/demo.toml and jobs/code-pair.toml, baseline and speculative, greedy
# and T = 0.8, for every kernel variant this CPU supports (tests/golden/outputs-836c867.sha256).
set -euo pipefail
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
: "${SPECRUN_SOURCE_DIR:?}"
SHARED=${SPECRUN_SHARED_DIR:-$SPECRUN_SOURCE_DIR/../shared} \
  exec "$SPECRUN_SOURCE_DIR/scripts/check-same-outputs.sh" --golden \
  "$SPECRUN_SOURCE_DIR/tests/golden/outputs-836c867.sha256" "$SPECRUN_BIN" "$PWD/work"
