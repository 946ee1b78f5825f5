# Shared setup of the run_* end-to-end scripts (sourced, not run): a small synthetic model pair,
# prompt files, job files, and helpers that check exit codes and messages.
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY=/usr/bin/python3
MPIRUN=(mpirun --oversubscribe)
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
unset NCCL_PROTO  # the outer environment must not decide any outcome
# Open MPI's shared-memory segments go to a directory of this script's own, removed when it exits:
# a SIGKILLed rank cannot remove its segments, and they piled up in /dev/shm (issue 18).
SPECRUN_SHM_DIR=$(mktemp -d /dev/shm/specrun-e2e.XXXXXX 2>/dev/null || mktemp -d)
export OMPI_MCA_btl_vader_backing_directory=$SPECRUN_SHM_DIR
cleanup_shm() { rm -rf "$SPECRUN_SHM_DIR"; }
trap cleanup_shm EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# wait_batches LOG N: until rank 0 has logged N committed batches (both modes together).
wait_batches() {
  local i
  for i in $(seq 600); do
    [[ $(grep -c '\] batch [0-9]*/' "$1" || true) -ge $2 ]] && return 0
    sleep 0.1
  done
  fail "$1 never reached $2 batches: $(tail -3 "$1")"
}

# make_models DIR: the small target/draft pair (vocab 256) every run_* script uses.
make_models() {
  [ -f "$1/target/config.json" ] && return 0
  "$SPECRUN_BIN" make-model "$1" --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
    --intermediate 128 --vocab 256 >/dev/null
}

# make_prompt_file OUT.h5 N [make_prompts.py options...]
make_prompt_file() {
  local out=$1 n=$2
  shift 2
  "$PY" "$E2E_DIR/make_prompts.py" "${out%.h5}.jsonl" "$n" "$@"
  "$SPECRUN_BIN" prepare "${out%.h5}.jsonl" "$out" --overwrite >/dev/null
}

# write_job FILE OUTPUT PROMPTS [extra TOML lines...]: greedy, baseline + speculative, tp 2.
write_job() {
  local file=$1 output=$2 prompts=$3
  shift 3
  cat >"$file" <<TOML
[job]
name = "e2e"
output = "$output"
[target]
path = "models/target"
[draft]
kind = "model"
path = "models/draft"
[parallel]
tp = ${E2E_TP:-2}
threads = 1
[data]
prompts = "$prompts"
batch_size = ${E2E_BATCH:-4}
[decode]
max_new_tokens = 16
draft_len = 4
temperature = 0.0
TOML
  local line
  for line in "$@"; do echo "$line" >>"$file"; done
}

# write_dataset_job FILE NAME OUTPUT: a sampled dataset job (decode.modes = ["dataset"]) on
# models/target over prompts.h5, tp 1, batch 4, 96 new tokens at temperature 0.8 with EOS, seed 7,
# EAGLE-3's layers and the final norm in bf16, top-k 4, chunks of 64 rows, a part every 0.25 s.
write_dataset_job() {
  cat >"$1" <<TOML
[job]
name = "$2"
output = "$3"
seed = 7
[target]
path = "models/target"
[parallel]
tp = 1
threads = 1
[data]
prompts = "prompts.h5"
batch_size = 4
[decode]
modes = ["dataset"]
max_new_tokens = 96
temperature = 0.8
stop_at_eos = true
[dataset]
hidden_layers = "eagle3,final"
dtype = "bf16"
topk = 4
chunk_rows = 64
commit_s = 0.25
TOML
}

# rank_pid LAUNCHER RANK: the pid of world rank RANK among mpirun LAUNCHER's children (one node),
# found by its OMPI_COMM_WORLD_RANK; empty when it is not (or no longer) there.
rank_pid() {
  local child
  for child in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$child"
      return 0
    fi
  done
}

# expect_exit CODE PATTERN LOG -- command...: runs the command (stdout+stderr to LOG) under a
# 60 s timeout (124 = a rank hung), checks the exit code and that LOG matches the regex PATTERN.
expect_exit() {
  local want=$1 pattern=$2 log=$3
  shift 4
  local rc=0
  timeout 60 "$@" >"$log" 2>&1 || rc=$?
  [[ $rc -ne 124 ]] || fail "timed out (a rank hangs?): $*; log: $(tail -5 "$log")"
  [[ $rc -eq $want ]] || fail "exit $rc, expected $want: $*; log: $(tail -5 "$log")"
  grep -qE -- "$pattern" "$log" || fail "no /$pattern/ in the output of: $*; log: $(tail -5 "$log")"
}
