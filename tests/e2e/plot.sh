#!/usr/bin/env bash
# scripts/plot_results.py on a real result file (2 ranks, tp 2): writes acceptance.png,
# phases.png and tau.png; each must be a real PNG of the expected size with drawn content
# (many distinct colours, not a blank canvas). A file that is not a result file is refused.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 8
write_job job.toml out.h5 prompts.h5
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml >run.log 2>&1 || fail "run failed: $(tail -5 run.log)"
PLOT="${SPECRUN_SOURCE_DIR:-$E2E_DIR/../..}/scripts/plot_results.py"
"$PY" "$PLOT" out.h5 plots
"$PY" - plots <<'PY'
import os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image as mpimg
import numpy as np
for name in ("acceptance.png", "phases.png", "tau.png"):
    path = os.path.join(sys.argv[1], name)
    assert os.path.exists(path), f"{path} missing"
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    size = os.path.getsize(path)
    assert size > 10_000, f"{path}: only {size} bytes"
    img = mpimg.imread(path)
    assert img.shape[0] >= 400 and img.shape[1] >= 600, f"{path}: {img.shape}"
    colours = len(np.unique(img.reshape(-1, img.shape[2]), axis=0))
    assert colours > 50, f"{path}: {colours} colours: nothing drawn?"
    print(f"{name}: {img.shape[1]}x{img.shape[0]}, {size} bytes, {colours} colours")
PY
rc=0
"$PY" "$PLOT" prompts.h5 bad >bad.log 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -q 'not a specrun result file' bad.log || fail "a prompt file was plotted: $(cat bad.log)"
echo "plot: all checks passed"
