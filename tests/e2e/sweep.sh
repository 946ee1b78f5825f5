#!/usr/bin/env bash
# `specrun sweep` (issue 17): the code pair (../shared/models) over decode.draft_len 1,2,4,8 runs
# locally, one mpirun and one result file per point; `specrun report` over the files prints one
# row per point with draft_len as the column that differs, --json with each phase's cost per token,
# and scripts/plot_sweep.py draws speedup, tau and cost per token against draft_len; running the
# sweep again skips the finished points; a bad grid is a usage error naming it. Without
# ../shared, the synthetic pair.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
SHARED=${SPECRUN_SHARED_DIR:-$E2E_DIR/../../../shared}
rm -rf w && mkdir w && cd w

if [[ -f $SHARED/prompts/code_prompts.jsonl && -d $SHARED/models/code-target ]]; then
  "$SPECRUN_BIN" prepare "$SHARED/prompts/code_prompts.jsonl" prompts.h5 >/dev/null
  TARGET=$SHARED/models/code-target DRAFT=$SHARED/models/code-draft
else
  echo "NOTE: no ../shared code pair; sweeping the synthetic pair"
  make_models models
  make_prompt_file prompts.h5 8
  TARGET=models/target DRAFT=models/draft
fi
cat >job.toml <<TOML
[job]
name = "sweep-e2e"
output = "unused.h5"
[target]
path = "$TARGET"
[draft]
kind = "model"
path = "$DRAFT"
[parallel]
tp = 2
threads = 1
[data]
prompts = "prompts.h5"
batch_size = 4
max_prompts = 8
[decode]
max_new_tokens = 24
TOML

[[ $("$SPECRUN_BIN" sweep job.toml --grid decode.draft_len=1,2,4,8 --count) == 4 ]] || fail "--count"
"$SPECRUN_BIN" sweep job.toml --grid decode.draft_len=1,2,4,8 --out sw --np 2 \
  --mpirun-args "--oversubscribe" >sweep.txt 2>&1 || fail "sweep failed: $(cat sweep.txt)"
cat sweep.txt
for k in 1 2 4 8; do
  [[ -f sw/draft_len=$k.h5 ]] || fail "sw/draft_len=$k.h5 missing"
  "$PY" - "sw/draft_len=$k.h5" "$k" <<'PY'
import h5py, json, sys
f = h5py.File(sys.argv[1], "r")
assert f.attrs["finished"], "not finished"
cfg = json.loads(f["job"].attrs["resolved"])
assert cfg["decode"]["draft_len"] == int(sys.argv[2]), cfg["decode"]
assert f["speculative"].attrs["draft_len"] == int(sys.argv[2])
PY
done
grep -q 'sweep: 4 points, 4 run, 0 already finished, 0 failed' sweep.txt || fail "summary line"

"$SPECRUN_BIN" report sw/*.h5 >table.txt || fail "report over the sweep failed"
cat table.txt
head -1 table.txt | grep -qE '^file +decode.draft_len +tau +alpha +tokens/s +speedup \[95% CI\]' ||
  fail "the table's header: $(head -1 table.txt)"
for k in 1 2 4 8; do
  grep -qE "^draft_len=$k.h5 +$k +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x \[" table.txt || fail "no row for draft_len $k"
done
"$SPECRUN_BIN" report sw/*.h5 --json >table.json
"$PY" - <<'PY'
import json
t = json.load(open("table.json"))
assert t["keys"] == ["decode.draft_len"], t["keys"]
assert [r["config"]["decode.draft_len"] for r in t["runs"]] == ["1", "2", "4", "8"], t["runs"]
taus = [r["tau"] for r in t["runs"]]
assert all(1.0 <= x <= k + 1 for x, k in zip(taus, [1, 2, 4, 8])), taus
# Per-token phase costs: every phase of both modes, and the phases add up to the total.
for r in t["runs"]:
    for mode in ("baseline", "speculative"):
        c = r["ms_per_token"][mode]
        parts = sum(c[p] for p in ("draft", "verify", "comm", "sample", "other"))
        assert c["total"] > 0 and abs(parts - c["total"]) <= 1e-3 * c["total"], (mode, c)
    assert r["ms_per_token"]["baseline"]["draft"] == 0, r["ms_per_token"]
print("report --json over the sweep ok:", taus)
PY
PLOT_SWEEP="${SPECRUN_SOURCE_DIR:-$E2E_DIR/../..}/scripts/plot_sweep.py"
# Plots against the swept key: three real PNGs with drawn content; a one-run table is refused.
"$PY" "$PLOT_SWEEP" table.json plots >plots.txt || fail "plot_sweep failed"
"$PY" - plots <<'PY'
import os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image as mpimg
import numpy as np
for name in ("speedup.png", "tau.png", "cost_per_token.png"):
    path = os.path.join(sys.argv[1], name)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    img = mpimg.imread(path)
    colours = len(np.unique(img.reshape(-1, img.shape[2]), axis=0))
    assert img.shape[0] >= 400 and img.shape[1] >= 600 and colours > 50, (path, img.shape, colours)
    print(f"{name}: {img.shape[1]}x{img.shape[0]}, {colours} colours")
PY
"$SPECRUN_BIN" report sw/draft_len=1.h5 sw/draft_len=1.h5 --json >same.json
rc=0
"$PY" "$PLOT_SWEEP" same.json bad >bad_plot.txt 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -q 'do not differ' bad_plot.txt || fail "a table without a swept key was plotted: $(cat bad_plot.txt)"

# Again: every point is finished, nothing runs.
"$SPECRUN_BIN" sweep job.toml --grid decode.draft_len=1,2,4,8 --out sw --np 2 \
  --mpirun-args "--oversubscribe" >again.txt 2>&1 || fail "second sweep failed: $(cat again.txt)"
grep -q 'sweep: 4 points, 0 run, 4 already finished, 0 failed' again.txt || fail "rerun: $(cat again.txt)"
# Coupled keys and --print-sets (what slurm/sweep.sbatch runs per array task).
sets=$("$SPECRUN_BIN" sweep job.toml --grid decode.tree_top_k+decode.tree_depth+decode.tree_nodes=1/4/4,4/5/15 \
  --grid decode.temperature=0,0.7 --out o --point 3 --print-sets)
[[ $sets == "decode.tree_top_k=4 decode.tree_depth=5 decode.tree_nodes=15 decode.temperature=0.7 job.output=o/tree_top_k+tree_depth+tree_nodes=4-5-15_temperature=0.7.h5" ]] ||
  fail "--print-sets: $sets"
expect_exit 2 "--grid decode.draft_len: expected KEY=V1,V2" bad.log -- "$SPECRUN_BIN" sweep job.toml --grid decode.draft_len
expect_exit 2 "value '4/5' has 2 part\(s\) for 3 coupled keys" bad2.log -- \
  "$SPECRUN_BIN" sweep job.toml --grid decode.tree_top_k+decode.tree_depth+decode.tree_nodes=4/5
echo "sweep: OK"
