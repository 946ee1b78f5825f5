#!/usr/bin/env bash
# End to end on one GPU (label "gpu"): `specrun run` with parallel.backend = "cuda" on one rank,
# baseline and speculative greedy decoding of the same prompts. Checks, with h5py:
#   - speculative output == baseline output, token for token, for every prompt: the core
#     invariant of speculative decoding, on the device, for each drafter and shape (each verify
#     pass within the tokens of the batch-invariant kernels: batch x window <= 64, or 512 on the
#     tensor cores):
#       synthetic pair (BF16 and F32 weights), chain k = 4;
#       the trained code-target / code-draft pair: chain k = 4 and a draft-model tree 4/5/15;
#       code-target with its trained EAGLE-3 head (code-eagle3): chain k = 4, trees 4/5/15 and
#       8/6/32 (the shapes of SGLang's --speculative-topk/num-steps/num-draft-tokens);
#       with the projections on the tensor cores (parallel.cuda_tensor_cores = true): the code
#       pair's chain, and trees 4/5/15 (draft model) and 8/6/32 (EAGLE-3, the head in BF16 when
#       the kit has it) at batch 6: verify passes of 96 and 198 tokens;
#   - speculation accepted something (tau > 1) and every phase timing is finite and >= 0;
#   - every batch's host snapshot holds the GPU's NVML readings (SM clock, temperature, power);
#   - every step's device passes are recorded (result schema 6), and `specrun compare` of the
#     code pair's chain against the same job with parallel.cuda_graphs = false names the verify
#     passes that no longer ran as CUDA graphs (the story specrun exists for, on the device);
#   - the GPU's greedy outputs equal the CPU backend's for at least 90% of the prompts (synthetic
#     F32 weights, the trained BF16 code-target (CUDA and tensor cores), and code-target-f32 when
#     present; both backends keep the weights' dtype and compute in float32, so only a reordering
#     may flip a near-tie).
# One rank: under `mpirun -np 1`, or started directly as a singleton MPI process when
# SPECRUN_LAUNCH=direct (the GPU kit, scripts/gpu-kit.sh, has no mpirun).
# Exits 77 (ctest: skipped) when no GPU is visible or the binary was built without CUDA.
set -euo pipefail

: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
PY=${SPECRUN_PYTHON:-/usr/bin/python3}
SHARED=${SPECRUN_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/../shared}
if [[ ${SPECRUN_LAUNCH:-mpirun} == direct ]]; then
  LAUNCH=()
else
  LAUNCH=(mpirun --oversubscribe -np 1)
fi
if ! nvidia-smi -L 2>/dev/null | grep -q "GPU"; then
  echo "SKIPPED: no GPU visible (nvidia-smi -L)"
  exit 77
fi
env_out=$("$SPECRUN_BIN" env 2>/dev/null || true)
if ! grep -Eq "^NCCL: +[0-9]" <<<"$env_out"; then
  echo "SKIPPED: $SPECRUN_BIN reports no CUDA in its provenance (built without CUDA?)"
  exit 77
fi

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# prompts NAME N VOCAB: N prompts of random ids (seeded), 8..90 tokens (some prefills above 64
# tokens take the cuBLAS path).
prompts() {
  "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, random, sys
name, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(5)
with open(name + ".jsonl", "w") as f:
    for i in range(n):
        k = random.randint(8, 90)
        toks = [1] + [random.randint(3, vocab - 1) for _ in range(k - 1)]
        f.write(json.dumps({"id": f"g{i}", "category": ["short", "long"][k > 40], "tokens": toks}) + "\n")
PYEOF
  "$SPECRUN_BIN" prepare "$1.jsonl" "$1.h5" --overwrite >/dev/null
}

# run NAME BACKEND TARGET DRAFT_KIND DRAFT_PATH PROMPTS [extra --set ...]
run() {
  local name=$1 backend=$2 target=$3 kind=$4 draft=$5 prompts=$6
  shift 6
  cat >"$name.toml" <<TOML
[job]
name = "$name"
output = "$name.h5"
overwrite = true
[target]
path = "$target"
[draft]
kind = "$kind"
path = "$draft"
placement = "replicated"
[parallel]
tp = 1
backend = "$backend"
threads = 2
comm_timeout_s = 120.0
[data]
prompts = "$prompts.h5"
batch_size = 6
[decode]
modes = ["baseline", "speculative"]
max_new_tokens = 40
draft_len = 4
temperature = 0.0
stop_at_eos = false
TOML
  local sets=()
  # SPECRUN_RUN_SETS: extra key=value settings for every run, space-separated (e.g.
  # "parallel.cuda_pdl=false" to rerun the cases without dependent launches,
  # "parallel.cuda_fused_ops=false" without the fused RoPE, RMSNorm and residual adds).
  for s in "$@" ${SPECRUN_RUN_SETS:-}; do sets+=(--set "$s"); done
  local t0=$SECONDS
  "${LAUNCH[@]}" "$SPECRUN_BIN" run "$name.toml" "${sets[@]}" >"$name.log" 2>&1 ||
    fail "specrun run $name ($backend) failed: $(tail -20 "$name.log")"
  echo "$name: $(grep -E 'greedy outputs identical' "$name.log" || echo 'no equality line') ($((SECONDS - t0)) s)"
  grep -E "step graphs" "$name.log" | sed "s/^/  /" || true
}

prompts rand512 24 512
for dtype in bf16 f32; do
  [[ -f models_$dtype/target/config.json ]] ||
    "$SPECRUN_BIN" make-model models_$dtype --dtype $dtype --layers 4 --draft-layers 1 >/dev/null
  run syn_$dtype cuda models_$dtype/target model models_$dtype/draft rand512
done
run syn_f32_cpu cpu models_f32/target model models_f32/draft rand512
cases=(syn_bf16 syn_f32)
pairs=("syn_f32 syn_f32_cpu")

if [[ -f $SHARED/models/code-target/config.json ]]; then
  "$PY" - "$SHARED/prompts/code_prompts.jsonl" <<'PYEOF' || prompts code 24 2048
import json, sys
src = sys.argv[1]
with open(src) as f, open("code.jsonl", "w") as out:
    for i, line in enumerate(f):
        if i == 24:
            break
        rec = json.loads(line)
        out.write(json.dumps({"id": rec.get("id", f"c{i}"), "tokens": rec["tokens"][:200]}) + "\n")
PYEOF
  [[ -f code.h5 ]] || "$SPECRUN_BIN" prepare code.jsonl code.h5 --overwrite >/dev/null
  M=$SHARED/models
  run code_chain cuda "$M/code-target" model "$M/code-draft" code
  # The same job with the step graphs off: every pass launched kernel by kernel (compared below).
  run code_chain_nographs cuda "$M/code-target" model "$M/code-draft" code parallel.cuda_graphs=false
  cases+=(code_chain_nographs)
  # Trees at batch 4 and 1: every verify pass stays within the 64 tokens the batch-invariant
  # kernels take (4 x 16 and 1 x 33; see docs/gpu.md).
  run code_tree cuda "$M/code-target" model "$M/code-draft" code decode.tree_top_k=4 \
    decode.tree_depth=5 decode.tree_nodes=15 data.batch_size=4
  # The same BF16 weights on the CPU: both backends compute in float32.
  run code_chain_cpu cpu "$M/code-target" model "$M/code-draft" code
  cases+=(code_chain code_tree)
  pairs+=("code_chain code_chain_cpu")
  # Past 256 positions (prompts of up to 200 tokens, 100 new): attention splits each token's
  # positions over blocks in decode and verify passes (kernels/cuda/attention.cu); a chain and
  # a tree (its nodes reading their ancestors' slots across a chunk boundary) stay equal.
  run code_chain_long cuda "$M/code-target" model "$M/code-draft" code decode.max_new_tokens=100
  run code_tree_long cuda "$M/code-target" model "$M/code-draft" code decode.tree_top_k=4 \
    decode.tree_depth=5 decode.tree_nodes=15 data.batch_size=4 decode.max_new_tokens=100
  cases+=(code_chain_long code_tree_long)
  if [[ -f $M/code-eagle3/config.json ]]; then
    run eagle3_chain cuda "$M/code-target" eagle3 "$M/code-eagle3" code
    run eagle3_tree15 cuda "$M/code-target" eagle3 "$M/code-eagle3" code decode.tree_top_k=4 \
      decode.tree_depth=5 decode.tree_nodes=15 data.batch_size=4
    run eagle3_tree32 cuda "$M/code-target" eagle3 "$M/code-eagle3" code decode.tree_top_k=8 \
      decode.tree_depth=6 decode.tree_nodes=32 data.batch_size=1
    cases+=(eagle3_chain eagle3_tree15 eagle3_tree32)
  fi
  # The projections on the tensor cores (parallel.cuda_tensor_cores; kernels/cuda/gemv_mma.cu):
  # speculative == baseline with that kernel in every pass, and its greedy tokens against the CPU.
  # The trees at batch 6 (verify passes of 96 and 198 tokens, where the CUDA-core kernels' 64
  # end and run 2 saw a near-tie flip): the tensor cores keep passes of up to 512 invariant.
  run code_chain_tc cuda "$M/code-target" model "$M/code-draft" code parallel.cuda_tensor_cores=true
  run code_tree_tc cuda "$M/code-target" model "$M/code-draft" code decode.tree_top_k=4 \
    decode.tree_depth=5 decode.tree_nodes=15 data.batch_size=6 parallel.cuda_tensor_cores=true
  cases+=(code_chain_tc code_tree_tc)
  pairs+=("code_chain_tc code_chain_cpu")
  # The head in BF16 (code-eagle3-bf16) puts its projections on the tensor cores too.
  E3=$M/code-eagle3-bf16
  [[ -f $E3/config.json ]] || E3=$M/code-eagle3
  if [[ -f $E3/config.json ]]; then
    run eagle3_tree32_tc cuda "$M/code-target" eagle3 "$E3" code decode.tree_top_k=8 \
      decode.tree_depth=6 decode.tree_nodes=32 data.batch_size=6 parallel.cuda_tensor_cores=true
    cases+=(eagle3_tree32_tc)
  fi
  if [[ -f $M/code-target-f32/config.json ]]; then
    run code_f32 cuda "$M/code-target-f32" model "$M/code-draft" code
    run code_f32_cpu cpu "$M/code-target-f32" model "$M/code-draft" code
    cases+=(code_f32)
    pairs+=("code_f32 code_f32_cpu")
  fi
else
  echo "NOTE: $SHARED/models/code-target not found: the trained pair and EAGLE-3 cases are not run"
fi

"$PY" - "${#cases[@]}" "${cases[@]}" "${pairs[@]}" <<'PYEOF'
import sys
import h5py, numpy as np

n_cases = int(sys.argv[1])
cases = sys.argv[2:2 + n_cases]
pairs = [p.split() for p in sys.argv[2 + n_cases:]]

def outputs(path, mode):
    with h5py.File(path, "r") as f:
        g = f[mode]
        nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()])
        n = int(g["batches/sequences_end"][nb - 1]) if nb else 0
        off = g["sequences/output_offsets"][: n + 1]
        tok = g["sequences/output_tokens"][:]
        idx = g["sequences/prompt_index"][:n]
        out = {int(idx[i]): tok[off[i]:off[i + 1]].tolist() for i in range(n)}
        tau = None
        if mode == "speculative":
            tau = g["sequences/generated"][:n].sum() / max(1, g["sequences/verify_steps"][:n].sum())
        rows = int(g["batches/timing_rows_end"][nb - 1]) if nb else 0
        t = g["timings"][:rows]
        d = g["device_timings"][:rows]
        passes = g["device_passes"][:rows]
        return out, tau, (t, d, passes)

ok = True
for name in cases:
    base, _, tb = outputs(f"{name}.h5", "baseline")
    spec, tau, ts = outputs(f"{name}.h5", "speculative")
    if len(base) == 0 or set(base) != set(spec):
        print(f"FAIL {name}: prompts missing ({len(base)} baseline, {len(spec)} speculative)")
        ok = False
        continue
    bad = [i for i in base if base[i] != spec[i]]
    print(f"{name}: {len(base)} prompts, speculative == baseline for {len(base) - len(bad)}, tau {tau:.2f}")
    if bad:
        i = bad[0]
        first = next((j for j, (a, b) in enumerate(zip(base[i], spec[i])) if a != b), min(len(base[i]), len(spec[i])))
        print(f"FAIL {name}: prompt {i} differs first at token {first}: baseline {base[i][first:first + 3]}, speculative {spec[i][first:first + 3]}")
        ok = False
    if not tau > 1.0:
        print(f"FAIL {name}: tau {tau} <= 1: the draft's tokens were never accepted")
        ok = False
    for mode, (t, d, passes) in [("baseline", tb), ("speculative", ts)]:
        # Pass rows (schema 6): every step issues at least one verify pass on the device, counted
        # as replayed, captured, eager or unrecorded; the share run as CUDA graphs printed per phase.
        verify = passes[:, 0, 4:8].sum(axis=1) if passes.size else passes
        if verify.size == 0 or not np.all(np.isfinite(verify)) or np.any(verify < 1):
            print(f"FAIL {name} {mode}: device pass rows empty, not finite or a step without a verify pass")
            ok = False
        else:
            shares = []
            for phase, c in (("draft", 0), ("verify", 4)):
                n = passes[:, 0, c:c + 4].sum(axis=0)
                if n.sum() > 0:
                    shares.append(f"{phase} {n.sum():.0f} ({100 * (n[0] + n[1]) / n.sum():.0f}% as graphs)")
            print(f"{name} {mode}: device passes " + ", ".join(shares))
        if t.size == 0 or not np.all(np.isfinite(t)) or np.any(t < 0):
            print(f"FAIL {name} {mode}: phase timings empty, negative or not finite")
            ok = False
        # Device rows (schema 5): finite, >= 0, the phases adding up to the total, the verify
        # phase on the device in every step; their means beside the host's.
        parts = d[:, 0, :4].astype(np.float64).sum(axis=1)
        if (d.size == 0 or not np.all(np.isfinite(d)) or np.any(d < 0) or
                not np.allclose(parts, d[:, 0, 4], rtol=1e-4, atol=1e-3) or
                not np.all(d[:, 0, 1] > 0)):
            print(f"FAIL {name} {mode}: device rows empty, negative, not finite, not adding up "
                  f"or without verify time")
            ok = False
        else:
            host = {p: t[:, 0, i].mean() for i, p in enumerate(["draft", "verify", "comm", "sample", "other", "total"])}
            dev = {p: d[:, 0, i].mean() for i, p in enumerate(["draft", "verify", "sample", "other", "total"])}
            print(f"{name} {mode}: ms per step host / device: " +
                  ", ".join(f"{p} {host[p]:.3f}/{dev[p]:.3f}" for p in dev))
    # The GPU's conditions after every batch (NVML through the host snapshots, schema 4).
    with h5py.File(f"{name}.h5", "r") as f:
        h = f["speculative/batches/host"]
        fields = [str(x) for x in h.attrs["fields"]]
        gpu = h[:, 0, fields.index("gpu_sm_mhz"):]
        sm, temp, power = gpu[:, 0], gpu[:, 2], gpu[:, 3]
        if not (np.all(sm > 100) and np.all((temp > 0) & (temp < 120)) and np.all(power > 1)):
            print(f"FAIL {name}: GPU snapshots missing or implausible (sm {sm}, temp {temp}, power {power})")
            ok = False
        else:
            print(f"{name}: GPU sm {sm.mean():.0f} MHz, {temp.mean():.0f} C, {power.mean():.0f} W, "
                  f"slowdown bits {sorted(set(int(x) for x in gpu[:, 4] if np.isfinite(x)))}, "
                  f"ECC {np.nanmax(gpu[:, 5])}, XID {np.nansum(gpu[:, 6])}")
for gpu_name, cpu_name in pairs:
    gpu, _, _ = outputs(f"{gpu_name}.h5", "baseline")
    cpu, _, _ = outputs(f"{cpu_name}.h5", "baseline")
    same = sum(gpu.get(i) == cpu[i] for i in cpu)
    print(f"{gpu_name}: GPU greedy == CPU greedy for {same} of {len(cpu)} prompts")
    if same < 0.9 * len(cpu):
        print(f"FAIL {gpu_name}: GPU and CPU greedy outputs differ for more than 10% of the prompts")
        ok = False
sys.exit(0 if ok else 1)
PYEOF
if [[ -f code_chain_nographs.h5 ]]; then
  # Graphs on (BASE) against off (NEW): two experiments (exit 3), and the verify passes' share
  # run as CUDA graphs fallen to 0% in the verdict and the table.
  rc=0
  "$SPECRUN_BIN" compare code_chain.h5 code_chain_nographs.h5 >compare_nographs.txt 2>&1 || rc=$?
  head -1 compare_nographs.txt
  grep -A3 '^device forward passes' compare_nographs.txt || true
  [[ $rc -eq 3 ]] || fail "compare graphs on vs off: exit $rc, expected 3: $(head -3 compare_nographs.txt)"
  grep -qE '^  speculative verify +[0-9]+% +0% .*FELL \(launched kernel by kernel, unrecorded' compare_nographs.txt ||
    fail "compare graphs on vs off does not show the verify passes' graphs fallen"
  head -1 compare_nographs.txt | grep -q 'passes as CUDA graphs: .*verify [0-9]*% -> 0%' ||
    fail "compare graphs on vs off: the verdict does not name the fallen graphs"
fi
echo "PASS: GPU greedy speculative == baseline (${cases[*]})"
