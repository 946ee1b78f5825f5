#!/usr/bin/env bash
# Lossless sampling end to end, on a tiny vocabulary (8 tokens) where token frequencies can be
# compared cell by cell: a synthetic 4-layer target with its draft model and EAGLE-3 head
# (make-model), 10000 prompts, 3 new tokens each, temperature 1 (and top-k/top-p for one case).
# Baseline sampling and speculative sampling run as separate jobs with different seeds
# (independent samples); for every drafter (draft-model chains: the rule with the draft's q;
# EAGLE-3 trees and chains, n-gram chains: the target-only tree rule) the frequencies of each
# generated position and of the pair (token 1, token 2) must match baseline's by a two-sample
# chi-square test at p = 0.001 (Bonferroni over all tests). Power check: baseline at
# temperature 0.7 must fail the same test against baseline at 1.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

"$SPECRUN_BIN" make-model models --hidden 64 --layers 4 --heads 4 --kv-heads 2 \
  --intermediate 128 --vocab 8 --lm-head-std 0.3 >/dev/null
[ -f models/eagle3/config.json ] || fail "make-model wrote no EAGLE-3 head"
make_prompt_file prompts.h5 10000 --vocab 8 --min-len 2 --max-len 5
write_job job.toml out.h5 prompts.h5
cat >>job.toml <<'TOML'
stop_at_eos = false
TOML
sed -i 's/^max_new_tokens = 16/max_new_tokens = 3/; s/^temperature = 0.0/temperature = 1.0/' job.toml
sed -i 's/^batch_size = .*/batch_size = 100/' job.toml

run() {  # run NAME MODE SEED [--set ...]
  local name=$1 mode=$2 seed=$3
  shift 3
  timeout 600 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set parallel.tp=1 \
    --set job.output=$name.h5 --set decode.modes=$mode --set job.seed=$seed "$@" >$name.log 2>&1 ||
    fail "run $name failed: $(tail -5 $name.log)"
}
run base baseline 11
run base2 baseline 12
run cold baseline 13 --set decode.temperature=0.7
run model speculative 21 --set decode.draft_len=3
run eagle3_tree speculative 22 --set draft.kind=eagle3 --set draft.path=models/eagle3 \
  --set decode.tree_top_k=3 --set decode.tree_depth=3 --set decode.tree_nodes=8
run eagle3_chain speculative 23 --set draft.kind=eagle3 --set draft.path=models/eagle3 \
  --set decode.draft_len=2
run ngram speculative 24 --set draft.kind=ngram --set decode.draft_len=3
run base_topk baseline 15 --set decode.top_k=5 --set decode.top_p=0.9
run model_topk speculative 25 --set decode.draft_len=3 --set decode.top_k=5 --set decode.top_p=0.9
run tree_topk speculative 26 --set draft.kind=eagle3 --set draft.path=models/eagle3 \
  --set decode.tree_top_k=2 --set decode.tree_depth=3 --set decode.tree_nodes=6 \
  --set decode.top_k=5 --set decode.top_p=0.9

"$PY" - <<'PY'
import statistics
import sys

import h5py
import numpy as np

V, NEW = 8, 3


def outputs(name, mode):
    with h5py.File(f"{name}.h5", "r") as f:
        g = f[mode]["sequences"]
        off = g["output_offsets"][:]
        tok = g["output_tokens"][:]
        rows = [tok[off[i]:off[i + 1]] for i in range(len(off) - 1)]
        steps = f[mode]["steps"]
        accepted = int(steps["accepted"][:].sum())
    assert all(len(r) == NEW for r in rows), name
    return np.array(rows), accepted


def tables(rows):
    out = {f"token {p + 1}": np.bincount(rows[:, p], minlength=V) for p in range(NEW)}
    out["tokens 2-3"] = np.bincount(rows[:, 1] * V + rows[:, 2], minlength=V * V)
    return out


def chi2_homogeneity(a, b):
    """Two samples of equal size: sum (a - b)^2 / (a + b) over cells with a + b >= 10 (the
    rest pooled into one cell), df = cells - 1."""
    keep = a + b >= 10
    aa = list(a[keep]) + [a[~keep].sum()]
    bb = list(b[keep]) + [b[~keep].sum()]
    cells = [(x, y) for x, y in zip(aa, bb) if x + y > 0]
    stat = sum((x - y) ** 2 / (x + y) for x, y in cells)
    return stat, len(cells) - 1


def critical(df, p):
    z = statistics.NormalDist().inv_cdf(1 - p)  # Wilson-Hilferty
    h = 2.0 / (9.0 * df)
    return df * (1 - h + z * h ** 0.5) ** 3


cases = [("model", "base"), ("eagle3_tree", "base"), ("eagle3_chain", "base"), ("ngram", "base"),
         ("model_topk", "base_topk"), ("tree_topk", "base_topk"), ("base2", "base")]
n_tests = len(cases) * (NEW + 1)
p_each = 0.001 / n_tests
bad = []
for spec, ref in cases:
    mode = "baseline" if spec.startswith("base") else "speculative"
    rows_s, accepted = outputs(spec, mode)
    rows_b, _ = outputs(ref, "baseline")
    if mode == "speculative" and accepted == 0:
        bad.append(f"{spec}: no draft token was ever accepted (the test would not cover it)")
    for what, (ts, tb) in zip(tables(rows_s), zip(tables(rows_s).values(), tables(rows_b).values())):
        stat, df = chi2_homogeneity(ts, tb)
        crit = critical(df, p_each)
        ok = stat < crit
        print(f"  {spec:13s} vs {ref:9s} {what:10s} chi2 {stat:7.2f} df {df:2d} "
              f"critical {crit:6.2f} {'ok' if ok else 'DIFFERS'}  (accepted {accepted})")
        if not ok:
            bad.append(f"{spec} {what}")
# Power: temperature 0.7 against 1.0 must differ, far beyond the critical value.
rows_c, _ = outputs("cold", "baseline")
rows_b, _ = outputs("base", "baseline")
stat, df = chi2_homogeneity(tables(rows_c)["token 2"], tables(rows_b)["token 2"])
crit = critical(df, p_each)
print(f"  power check: T=0.7 vs T=1 token 2 chi2 {stat:.1f} df {df} critical {crit:.2f}")
if stat < 3 * crit:
    bad.append(f"power: temperature 0.7 vs 1.0 gives chi2 {stat:.1f} < 3 x {crit:.2f}")
if bad:
    print("FAIL:", "; ".join(bad))
    sys.exit(1)
PY
echo "lossless_sampling: all checks passed"
