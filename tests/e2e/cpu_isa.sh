#!/usr/bin/env bash
# One binary, every CPU kernel variant: the job runs with each variant this CPU supports forced
# through SPECRUN_CPU_ISA (4 ranks, dp 2 x tp 2; greedy outputs identical in both modes, every
# rank's provenance naming the variant), and the variants it lacks, an unknown name, or a bad
# value are refused at start on every rank: exit 2 within the timeout, a message naming the
# value and what is missing, and an existing result file left as it was. Which variants the CPU
# supports is read from CPUID by tests/cpuid_variants (tests/unit/cpuid_reading.h), independently
# of the program's own detection (not from /proc/cpuinfo, whose flags a kernel may leave out).
# `specrun compare` shows the variant when it differs between two runs.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w
unset SPECRUN_CPU_ISA

CPUID_VARIANTS=$(dirname "$SPECRUN_BIN")/tests/cpuid_variants
[[ -x $CPUID_VARIANTS ]] || fail "$CPUID_VARIANTS is missing (built with the tests)"
read -r -a supported < <("$CPUID_VARIANTS")
[[ ${supported[0]:-} == baseline ]] || fail "cpuid_variants printed '${supported[*]}'"
best=${supported[-1]}
supported_list=$(printf '%s, ' "${supported[@]}")
supported_list=${supported_list%, }
echo "this CPU supports: $supported_list"

"$SPECRUN_BIN" --version >version.txt
grep -q "CPU kernels: baseline, avx2, avx512" version.txt || fail "--version: $(cat version.txt)"
grep -q "in use: $best (best for this CPU)" version.txt || fail "--version: $(cat version.txt)"

make_models models
make_prompt_file prompts.h5 6
isa_of() { # RESULT.h5 -> the distinct (cpu_isa, cpu_isa_forced) of its ranks
  "$PY" - "$1" <<'PYEOF'
import json, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    recs = [json.loads(t) for t in f["provenance/ranks"].asstr()[:]]
print(" ".join(sorted({f"{r['cpu_isa']}:{str(r['cpu_isa_forced']).lower()}" for r in recs})))
PYEOF
}

# Each supported variant, forced; then the default (the best, not forced).
for v in "${supported[@]}" auto; do
  write_job "job-$v.toml" "out-$v.h5" prompts.h5
  if [[ $v == auto ]]; then
    "${MPIRUN[@]}" -np 4 "$SPECRUN_BIN" run "job-$v.toml" >"run-$v.log" 2>&1 ||
      fail "run (auto) failed: $(tail -5 "run-$v.log")"
    want="$best:false"
  else
    SPECRUN_CPU_ISA=$v "${MPIRUN[@]}" -np 4 "$SPECRUN_BIN" run "job-$v.toml" >"run-$v.log" 2>&1 ||
      fail "run with SPECRUN_CPU_ISA=$v failed: $(tail -5 "run-$v.log")"
    want="$v:true"
  fi
  grep -q 'greedy outputs identical: 6 / 6 prompts' "run-$v.log" ||
    fail "$v: $(tail -20 "run-$v.log")"
  got=$(isa_of "out-$v.h5")
  [[ $got == "$want" ]] || fail "$v: provenance says $got, expected $want on every rank"
  echo "variant $v: ok ($got)"
done

# compare names the variant when it changed (baseline against the best).
if [[ $best != baseline ]]; then
  "$SPECRUN_BIN" compare out-baseline.h5 "out-$best.h5" >compare.txt 2>&1 || true
  grep -qE "cpu_isa.*baseline.*$best" compare.txt || fail "compare: $(cat compare.txt)"
fi

# Refusals: each leaves the existing result file as it was (overwrite = true in the job).
sum_before=$(sha256sum out-auto.h5)
write_job job-over.toml out-auto.h5 prompts.h5
sed -i 's/^name = "e2e"/name = "e2e"\noverwrite = true/' job-over.toml
for v in avx512 avx2; do
  [[ " ${supported[*]} " == *" $v "* ]] && continue
  SPECRUN_CPU_ISA=$v expect_exit 2 "SPECRUN_CPU_ISA=$v: this CPU .* lacks .*; it supports: $supported_list" \
    lacks-$v.log -- "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job-over.toml
  echo "variant $v refused: $(grep -m1 -o 'SPECRUN_CPU_ISA.*' lacks-$v.log)"
done
SPECRUN_CPU_ISA=avx9 expect_exit 2 'SPECRUN_CPU_ISA=avx9 is not a kernel variant of this build; use one of: baseline, avx2, avx512' \
  unknown.log -- "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job-over.toml
SPECRUN_CPU_ISA=AVX2 expect_exit 2 'SPECRUN_CPU_ISA=AVX2 is not a kernel variant' upper.log -- \
  "$SPECRUN_BIN" env
[[ $(sha256sum out-auto.h5) == "$sum_before" ]] || fail "a refused run changed out-auto.h5"
echo "cpu_isa: all checks passed"
