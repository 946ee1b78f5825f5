#!/usr/bin/env bash
# The GPU check's reporting, on the CPU (no GPU needed): tests/gpu/check_summary.py and
# tests/gpu/plot_bench.py read what the H200 runs really wrote (docs/gpu-runs: bench.json files
# from before the configuration labels) and a copy of run 2's benchmark given the labels and the
# tensor-core configuration ("on-tc"), as test_cuda_bench now writes them. A crash here would lose
# the summary of a GPU run, which costs a device session; so:
#   - both scripts exit as they should (the summary 0 when every stage passed) and the plot is
#     written, for each file;
#   - the summary's targets hold the two speed targets for the default configuration, with run
#     2's figures (43.2% of the copy bandwidth, verify / decode 2.20), and, only when the file
#     has "on-tc", the same two for the tensor cores with that configuration's figures;
#   - a run whose memcheck and e2e stages failed (as run 2's did) exits 1 and keeps what their
#     logs say in summary.json: compute-sanitizer's report and ERROR SUMMARY, the e2e FAIL lines.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
RUNS=$SRC/docs/gpu-runs

mkdir -p logs
printf 'unit_test_cuda 0 1\nbench 0 51\n' >logs/stages.txt
echo '{"pass": true, "models": []}' >oracle.json
echo '{"ratios": {"specrun_baseline_over_hf_greedy": 10.4}}' >peer.json

# Run 2's benchmark with an "on-tc" copy of its "on" steps, 0.7x the device time (a made-up
# figure: only where each number lands is checked).
"$PY" - "$RUNS/h200-2026-12-04-run2-bench.json" tc-bench.json <<'PYEOF'
import copy, json, sys
r = json.load(open(sys.argv[1]))
for s in list(r["steps"]):
    s.setdefault("config", "on" if s["graphs"] else "off")
    if s["config"] == "on":
        t = copy.deepcopy(s)
        t["config"], t["tensor_cores"] = "on-tc", True
        t["device_ms"] *= 0.7
        t["fraction_of_copy"] /= 0.7
        r["steps"].append(t)
on = {(s["case"], s["batch"]): s["device_ms"] for s in r["steps"] if s.get("config") == "on-tc"}
r["verify_over_decode_batch1_tensor_cores"] = on[("verify5", 1)] / on[("decode", 1)]
json.dump(r, open(sys.argv[2], "w"))
PYEOF

for bench in "$RUNS/h200-2026-12-04-run1-bench.json" "$RUNS/h200-2026-12-04-run2-bench.json" \
  tc-bench.json; do
  name=$(basename "$bench" .json)
  mkdir -p "out-$name"
  cp "$bench" "out-$name/bench.json"
  cp oracle.json peer.json "out-$name/"
  "$PY" "$SRC/tests/gpu/check_summary.py" logs "out-$name" 100 >"summary-$name.log" ||
    { cat "summary-$name.log"; echo "FAIL: check_summary.py exited non-zero on $name"; exit 1; }
  "$PY" "$SRC/tests/gpu/plot_bench.py" "out-$name/bench.json" "out-$name/bench.png" >/dev/null ||
    { echo "FAIL: plot_bench.py failed on $name"; exit 1; }
  [[ -s out-$name/bench.png ]] || { echo "FAIL: no plot for $name"; exit 1; }
done

"$PY" - <<'PYEOF'
import json
def targets(name):
    s = json.load(open(f"out-{name}/summary.json"))
    assert s["pass"] is True, (name, s["failed_stages"], s["failed_tests"])
    return {t["target"]: t for t in s["targets"]}

run2 = targets("h200-2026-12-04-run2-bench")
d = run2["decode batch 1 achieved bandwidth / copy bandwidth"]
assert abs(d["value"] - 0.432) < 0.001 and d["met"] is False, d
v = run2["verify (k+1 = 5) / decode, batch 1"]
assert abs(v["value"] - 2.20) < 0.01 and v["met"] is False, v
assert not any("tensor cores" in t for t in run2), "tensor-core targets without on-tc steps"

tc = targets("tc-bench")
d_tc = tc["decode batch 1 achieved bandwidth / copy bandwidth, tensor cores"]
assert abs(d_tc["value"] - 0.432 / 0.7) < 0.001, d_tc
v_tc = tc["verify (k+1 = 5) / decode, batch 1, tensor cores"]
assert abs(v_tc["value"] - v["value"]) < 0.01, (v_tc, v)  # both scaled by 0.7
assert abs(tc["decode batch 1 achieved bandwidth / copy bandwidth"]["value"] - 0.432) < 0.001

run1 = targets("h200-2026-12-04-run1-bench")
assert abs(run1["decode batch 1 achieved bandwidth / copy bandwidth"]["value"] - 0.306) < 0.001
print("gpu summary: run 1, run 2 and a tensor-core benchmark summarised and plotted")
PYEOF

# A run with failed stages: the evidence stays in summary.json.
mkdir -p failed/logs failed/out
printf 'unit_test_cuda 0 1\nmemcheck_graphs 9 31\ne2e 1 20\nbench 0 51\n' >failed/logs/stages.txt
{
  echo "[ RUN      ] CudaTransformer.StepGraphsReplayBitwiseThePassesLaunchedOneByOne"
  echo "========= Invalid __global__ read of size 16 bytes"
  echo "=========     at attention_rope+0x1a0 in attention.cu:120"
  echo "=========     by thread (3,0,0) in block (7,0,0)"
  for i in $(seq 1 80); do echo "=========     frame $i"; done
  echo "[       OK ] CudaTransformer.StepGraphsReplayBitwiseThePassesLaunchedOneByOne"
  echo "========= ERROR SUMMARY: 4 errors"
} >failed/logs/memcheck_graphs.log
{
  echo "syn_bf16: 24 prompts, speculative == baseline for 24, tau 2.10"
  echo "FAIL code_tree_tc: prompt 3 differs first at token 17: baseline [5], speculative [6]"
  echo "trailing line"
} >failed/logs/e2e.log
cp out-h200-2026-12-04-run2-bench/bench.json oracle.json peer.json failed/out/
rc=0
"$PY" "$SRC/tests/gpu/check_summary.py" failed/logs failed/out 100 >failed/summary.log || rc=$?
[[ $rc -eq 1 ]] || { cat failed/summary.log; echo "FAIL: failed stages gave exit $rc, not 1"; exit 1; }
grep -q "memcheck_graphs failed; its log says:" failed/summary.log ||
  { cat failed/summary.log; echo "FAIL: the printed summary does not quote the failed stage"; exit 1; }
"$PY" - <<'PYEOF'
import json
s = json.load(open("failed/out/summary.json"))
assert s["pass"] is False and s["failed_stages"] == ["memcheck_graphs", "e2e"], s["failed_stages"]
mc = s["failure_logs"]["memcheck_graphs"]
assert mc[0] == "========= Invalid __global__ read of size 16 bytes", mc[:2]
assert mc[-1] == "========= ERROR SUMMARY: 4 errors" and len(mc) == 61, (len(mc), mc[-1])
assert not any("[ RUN" in l for l in mc), "GoogleTest lines in the sanitizer excerpt"
e2e = s["failure_logs"]["e2e"]
assert e2e[0].startswith("FAIL code_tree_tc: prompt 3") and e2e[-1] == "trailing line", e2e
print("gpu summary: failed stages keep their logs' evidence")
PYEOF
