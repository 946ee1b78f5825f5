# shellcheck shell=bash
# Shared fixture of the Slurm and signal end-to-end tests (sourced, not run).
#
#   source "$SPECRUN_SOURCE_DIR/tests/e2e/slurm_fixture.sh"
#   make_fixture DIR PROMPTS BATCH_SIZE [INJECT_DELAY_MS]
#
# (re)creates DIR with: models/{target,draft} (a tiny synthetic pair), prompts.h5 (PROMPTS seeded
# random prompts of 4..12 tokens, two categories), job.toml (greedy baseline + speculative,
# tp 1, draft_len 3, 16 new tokens, result in DIR/out/result.h5) and an empty DIR/out.
# INJECT_DELAY_MS > 0 slows every verify step down (debug.inject_delay_ms), so that a job
# runs long enough to be signalled part-way; it changes timings only, never tokens.

: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
# shellcheck disable=SC2034 # used by the scripts that source this file
SLURM_CHECK=(/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/slurm_check.py")

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

make_fixture() {
  local d=$1 n=$2 bs=$3 delay=${4:-0}
  rm -rf "$d" # a rerun starts clean (logs are appended to, results are not overwritten)
  mkdir -p "$d/out"
  "$SPECRUN_BIN" make-model "$d/models" --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
    --intermediate 128 --vocab 256 >/dev/null
  /usr/bin/python3 - "$d/prompts.jsonl" "$n" <<'PY'
import json, random, sys
rng = random.Random(2024)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        tokens = [rng.randrange(3, 256) for _ in range(4 + i % 9)]
        f.write(json.dumps({"id": f"p{i}", "category": ("code", "chat")[i % 2],
                            "tokens": tokens}) + "\n")
PY
  "$SPECRUN_BIN" prepare "$d/prompts.jsonl" "$d/prompts.h5" --overwrite >/dev/null
  cat >"$d/job.toml" <<EOF
# Test job: tiny synthetic pair, greedy, one rank per tensor-parallel group.
[job]
name = "e2e-signal"
output = "out/result.h5"
[target]
path = "models/target"
[draft]
kind = "model"
path = "models/draft"
[parallel]
tp = 1
threads = 1
[data]
prompts = "prompts.h5"
batch_size = $bs
[decode]
modes = ["baseline", "speculative"]
max_new_tokens = 16
draft_len = 3
[debug]
inject_delay_ms = $delay
inject_phase = "$([[ $delay == 0 ]] && echo none || echo verify)"
EOF
}

# wait_for_line FILE PATTERN SECONDS: polls every 0.1 s until FILE has a line matching the
# extended regex PATTERN. Returns 1 on timeout.
wait_for_line() {
  local file=$1 pattern=$2 limit=$3 start=$SECONDS
  while ((SECONDS - start < limit)); do
    grep -qE -- "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
