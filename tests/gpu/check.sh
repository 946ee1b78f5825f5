#!/usr/bin/env bash
# The GPU check, in one script: everything specrun claims about its CUDA backend, checked and
# measured on the GPU it runs on.
#
#   tests/gpu/check.sh                 configure and build with CUDA here (-j16, build-gpucheck/),
#                                      on a machine with specrun's build dependencies
#   tests/gpu/check.sh --kit KIT       a bare CUDA machine: the programs, libraries and models of
#                                      the GPU kit (scripts/gpu-kit.sh; KIT is its directory or
#                                      its .tar.xz, unpacked to /tmp), nothing built or installed
#
# Stages (correctness first, in parallel; then the measurements, alone on the GPU):
#   unit     every gpu-labelled GoogleTest program: each CUDA op against the CPU reference
#            (test_cuda_ops) and a float64 one (test_cuda_kernels, test_cuda_attention, with
#            the fused ops against their compositions), the device token decisions (test_cuda_sampling,
#            test_cuda_tree_sampling), the model
#            graph on CUDA against the CPU and step graphs against launch by launch
#            (test_cuda_transformer), the device self-test (test_cuda)
#   memcheck compute-sanitizer --tool memcheck over test_cuda_kernels, test_cuda_attention and
#            the step-graph tests
#            (when installed)
#   e2e      tests/gpu/e2e_greedy.sh: speculative == baseline greedy on the GPU for the synthetic
#            pair, the trained code pair (chain, tree) and its EAGLE-3 head (chain, trees of 15
#            and 32 nodes); GPU greedy == CPU greedy
#   oracle   tests/gpu/hf_oracle.py: Hugging Face transformers' LlamaForCausalLM on the same
#            weights (float32): greedy tokens equal, logits within 1e-3 relative L2; after the
#            benchmark, the same on its ~1.1B model, and that model's GPU greedy tokens against
#            the CPU backend's (tests/gpu/gpu_vs_cpu.sh)
#   bench    test_cuda_bench: decode, verify (k+1 = 5) and a 32-node tree verify of a ~1.1B BF16
#            model against the measured copy bandwidth; CUDA graphs on and off; host launch time
#            and device time; the cost of the phase instrumentation
#   peer     tests/gpu/peer.sh: specrun run vs transformers' generate and assisted generation on
#            the same weights and prompts (tokens/s)
# Results go to $OUT (default BUILD/check-out): check.log (this output), summary.json, logs.tar.gz
# (every stage's log, the GoogleTest XML), bench.json, bench.png, oracle.json, peer.json; each
# stage's log is in the archive as soon as the stage ends, so a run cut short still returns them.
# SPECRUN_RUN_SETS="parallel.cuda_pdl=false" adds --set values to every e2e run (e.g. to tell
# whether a failure follows the dependent launches; parallel.cuda_fused_ops=false: the fused
# RoPE, RMSNorm and residual adds). STAGES="unit e2e" runs a subset; CHECK_DEADLINE_S=N shortens stage limits so that the whole
# check ends within N seconds (a stage that would start too late is recorded as not run). Exit status: 0 when every stage passed, 77 when no GPU is
# visible (the test programs start and skip), else 1.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
KIT_ARG=""
if [[ ${1:-} == --kit ]]; then
  KIT_ARG=${2:?--kit needs the kit directory or its .tar.xz}
fi
T_START=$SECONDS

if [[ -n $KIT_ARG ]]; then
  if [[ -f $KIT_ARG ]]; then  # the archive: unpacked with python3 (no zstd or xz needed)
    KIT=/tmp/specrun-gpu-kit
    rm -rf "$KIT" && mkdir -p "$KIT"
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
      "$KIT_ARG" "$KIT" || { echo "cannot unpack $KIT_ARG"; exit 1; }
  else
    KIT=$(cd "$KIT_ARG" && pwd)
  fi
  # shellcheck disable=SC1091
  source "$KIT/kit-env.sh"
  BIN=$KIT/bin
  TESTS=$KIT/bin
  WORK=${WORK_DIR:-/tmp/specrun-gpu-check}
else
  BUILD=${BUILD_DIR:-$SRC/build-gpucheck}
  BIN=$BUILD
  TESTS=$BUILD/tests
  WORK=${WORK_DIR:-$BUILD/check-work}
fi
OUT=${OUT:-${BUILD:-$WORK}/check-out}
PY=${SPECRUN_PYTHON:-$(command -v python3)}
export SPECRUN_PYTHON=$PY
LOGS=$WORK/logs
rm -rf "$WORK" && mkdir -p "$WORK" "$LOGS" "$OUT"
exec > >(tee -a "$OUT/check.log") 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
STAGES=${STAGES:-unit memcheck e2e oracle bench peer}
HAVE_GPU=1
if ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  HAVE_GPU=0
  STAGES=unit  # the test programs start and skip visibly; nothing else can run
  echo "no GPU visible (nvidia-smi -L): only the test programs run, and they skip"
fi

wants() { [[ " $STAGES " == *" $1 "* ]]; }
# The logs as one archive in $OUT (results come back as a few files); replaced atomically, so a
# run cut short leaves the last complete one.
pack_logs() {
  local tmp=$WORK/.logs.$BASHPID.tar.gz
  tar -C "$WORK" -czf "$tmp" logs 2>/dev/null && mv -f "$tmp" "$OUT/logs.tar.gz"
}
# stage NAME TIMEOUT_S COMMAND...: runs with a time limit, logs to $LOGS/NAME.log, records
# NAME rc seconds in $LOGS/stages.txt.
stage() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  if [[ -n ${CHECK_DEADLINE_S:-} ]]; then  # the whole check must end by then (a device lease)
    local left=$((CHECK_DEADLINE_S - (SECONDS - T_START) - 20))
    ((left < limit)) && limit=$left
    if ((limit < 5)); then
      echo "== $name: not run (CHECK_DEADLINE_S=$CHECK_DEADLINE_S reached)"
      echo "$name 124 0" >>"$LOGS/stages.txt"
      return 124
    fi
  fi
  echo "== $name (limit ${limit} s): $*"
  timeout --kill-after=15 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name $rc $((SECONDS - t0))" >>"$LOGS/stages.txt"
  echo "   $name: exit $rc after $((SECONDS - t0)) s"
  [[ $rc -eq 0 ]] || tail -n 25 "$LOGS/$name.log" | sed "s/^/   $name| /"
  pack_logs
  return $rc
}

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "host: $(hostname), $(nproc) CPUs, $(uname -r)"
  [[ -f /etc/os-release ]] && (. /etc/os-release && echo "os: $PRETTY_NAME")
  nvidia-smi --query-gpu=name,uuid,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,memory.used,memory.total,clocks_throttle_reasons.active --format=csv 2>&1
  git -C "$SRC" log -1 --format="commit: %H %s" 2>/dev/null
  [[ -n ${KIT:-} ]] && sed -n '1,6p' "$KIT/MANIFEST"
  echo "python: $PY $("$PY" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
} | tee "$LOGS/environment.txt"

if [[ -z ${KIT:-} ]]; then
  stage configure 600 cmake -S "$SRC" -B "$BUILD" -DSPECRUN_CUDA=ON -DSPECRUN_WERROR=ON \
    -DCMAKE_BUILD_TYPE=Release || exit 1
  stage build 1800 cmake --build "$BUILD" -j"${JOBS:-16}" --target specrun test_cuda test_cuda_ops test_cuda_kernels test_cuda_attention \
    test_cuda_sampling test_cuda_tree_sampling test_cuda_transformer test_cuda_deepseek test_cuda_quant test_cuda_bench || exit 1
fi
"$BIN/specrun" --version >"$LOGS/specrun_version.txt" 2>&1
"$BIN/specrun" env >"$LOGS/specrun_env.txt" 2>&1
echo "specrun: $(head -3 "$LOGS/specrun_version.txt" | tr '\n' ' ')"
if [[ -n ${KIT:-} ]]; then
  ldd "$BIN/specrun" >"$LOGS/ldd_specrun.txt" 2>&1
  if grep -q "not found" "$LOGS/ldd_specrun.txt"; then
    echo "the kit's specrun misses libraries on this machine:"
    grep "not found" "$LOGS/ldd_specrun.txt"
  fi
fi

# Correctness, in parallel (three process groups on one GPU).
unit_tests() {
  local rc=0 t
  for t in test_cuda test_cuda_ops test_cuda_kernels test_cuda_attention test_cuda_sampling test_cuda_tree_sampling test_cuda_transformer test_cuda_deepseek test_cuda_quant; do
    stage "unit_$t" 180 "$TESTS/$t" --gtest_color=no "--gtest_output=xml:$LOGS/$t.xml" || rc=1
  done
  return $rc
}
e2e() {
  export SPECRUN_BIN=$BIN/specrun
  mkdir -p "$WORK/e2e" && cd "$WORK/e2e" && stage e2e 300 "$SRC/tests/gpu/e2e_greedy.sh"
}
oracle() {
  mkdir -p "$WORK/oracle" && cd "$WORK/oracle" || return 1
  local models=() shared=${SPECRUN_SHARED_DIR:-$SRC/../shared}
  "$BIN/specrun" make-model syn --dtype bf16 --layers 4 --draft-layers 1 >/dev/null
  models+=(--model syn/target)
  [[ -f $shared/models/code-target/config.json ]] && models+=(--model "$shared/models/code-target")
  stage oracle 240 "$PY" "$SRC/tests/gpu/hf_oracle.py" --specrun "$BIN/specrun" --backend cuda \
    --device cuda "${models[@]}" --out "$OUT/oracle.json"
}
# compute-sanitizer's memcheck over the kernel tests (out-of-bounds and misaligned accesses),
# where the machine has it. API errors are not counted: NCCL's initialisation probes kernels of
# other architectures (cudaErrorNoKernelImageForDevice, 8 of them on an H200).
sanitize() {
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) ||
    { echo "compute-sanitizer not found: memcheck skipped" >"$LOGS/memcheck.log"; return 0; }
  local memcheck=("$cs" --tool memcheck --report-api-errors no --error-exitcode 9)
  stage memcheck 240 "${memcheck[@]}" "$TESTS/test_cuda_kernels" --gtest_color=no
  stage memcheck_attention 120 "${memcheck[@]}" "$TESTS/test_cuda_attention" --gtest_color=no
  stage memcheck_graphs 240 "${memcheck[@]}" "$TESTS/test_cuda_transformer" --gtest_color=no \
    "--gtest_filter=*StepGraphs*:*VerifyWindowEqualsStepByStep*"
  stage memcheck_deepseek 240 "${memcheck[@]}" "$TESTS/test_cuda_deepseek" --gtest_color=no \
    "--gtest_filter=*VerifyWindowEqualsStepByStep*:*DeepseekTreeAndKeep*"
}
pids=()
wants unit && { unit_tests & pids+=($!); }
wants memcheck && { sanitize & pids+=($!); }
wants e2e && { e2e & pids+=($!); }
wants oracle && { oracle & pids+=($!); }
for p in "${pids[@]}"; do wait "$p"; done

# Measurements, one at a time.
if wants bench; then
  stage bench 240 env SPECRUN_GPU_BENCH=1 SPECRUN_BENCH_JSON="$OUT/bench.json" \
    SPECRUN_BENCH_DIR="$WORK/model-1b" "$TESTS/test_cuda_bench" --gtest_color=no \
    "--gtest_output=xml:$LOGS/test_cuda_bench.xml"
  sed -n '/^device:/,$p' "$LOGS/bench.log" | grep -v '^\[' | head -60
  [[ -f $OUT/bench.json ]] && "$PY" "$SRC/tests/gpu/plot_bench.py" "$OUT/bench.json" "$OUT/bench.png"
fi
# The ~1.1B model (made by the benchmark): GPU greedy against the CPU backend, and against
# transformers in float32 (a few short prompts: the CPU backend decodes it at ~20 tokens/s).
if wants oracle && [[ -f $WORK/model-1b/target/config.json ]]; then
  (mkdir -p "$WORK/model-1b-check" && cd "$WORK/model-1b-check" && export SPECRUN_BIN=$BIN/specrun &&
    stage gpu_vs_cpu_1b 180 "$SRC/tests/gpu/gpu_vs_cpu.sh" "$WORK/model-1b/target" 3 24)
  (cd "$WORK/model-1b-check" && stage oracle_1b 180 "$PY" "$SRC/tests/gpu/hf_oracle.py" \
    --specrun "$BIN/specrun" --backend cuda --device cuda --model "$WORK/model-1b/target" \
    --prompts 3 --new-tokens 16 --out "$WORK/logs/oracle_1b.json")
fi
if wants peer; then
  mkdir -p "$WORK/peer" && (cd "$WORK/peer" && export SPECRUN_BIN=$BIN/specrun \
    SPECRUN_BENCH_DIR="$WORK/model-1b" && stage peer 300 "$SRC/tests/gpu/peer.sh" "$OUT/peer.json")
  tail -n 12 "$LOGS/peer.log"
fi

nvidia-smi --query-gpu=pstate,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv >"$LOGS/nvidia_smi_end.txt" 2>&1
"$PY" "$SRC/tests/gpu/check_summary.py" "$LOGS" "$OUT" "$((SECONDS - T_START))"
status=$?
pack_logs
[[ $status -eq 0 && $HAVE_GPU -eq 0 ]] && status=77  # skipped, not passed
echo "== GPU check: exit $status after $((SECONDS - T_START)) s (outputs in $OUT)"
exit $status
