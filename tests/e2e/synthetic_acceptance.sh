#!/usr/bin/env bash
# decode.acceptance (issue 17): with a fixed accepted length L every verify step emits L + 1
# tokens, so tau = L + 1 exactly; the step's verify cost stays that of a real run with the same
# chain shape (the same proposals are verified); rates give the per-position acceptance asked for.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

make_models models
make_prompt_file prompts.h5 16
write_job job.toml out.h5 prompts.h5
# 1 + 10 x 3 tokens: with L = 2 every step, including the last, emits exactly 3.
COMMON=(--set decode.draft_len=4 --set decode.max_new_tokens=31 --set decode.stop_at_eos=false)
for acc in real fixed:2 rates:0.9,0.6; do
  name=${acc//[:,.]/_}
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set job.output=$name.h5 "${COMMON[@]}" \
    --set decode.acceptance=$acc >$name.log 2>&1 || fail "run $acc failed: $(tail -5 $name.log)"
  "$SPECRUN_BIN" report $name.h5 --json >$name.json
done
"$PY" - <<'PY'
import json
real = json.load(open("real.json"))["modes"]["speculative"]
fixed = json.load(open("fixed_2.json"))["modes"]["speculative"]
rates = json.load(open("rates_0_9_0_6.json"))["modes"]["speculative"]
assert fixed["tau"] == 3.0, fixed["tau"]  # exactly L + 1
assert fixed["acceptance_unconditional"][:2] == [1.0, 1.0] and fixed["acceptance_unconditional"][2:] == [0.0, 0.0], fixed["acceptance_unconditional"]
# The same chain of 4 verified per step: the verify cost per step is the same within noise.
rv, fv = real["phases_ms"]["verify"]["mean"], fixed["phases_ms"]["verify"]["mean"]
print(f"verify ms/step: real {rv:.4f}, fixed:2 {fv:.4f} (ratio {fv / rv:.2f}); tau real {real['tau']:.3f}, fixed {fixed['tau']:.3f}")
assert 0.5 < fv / rv < 2.0, (rv, fv)
# rates 0.9, 0.6 (then 0.6): P(accept >= i) = 0.9, 0.54, 0.324, 0.194.
got = rates["acceptance_unconditional"]
for g, want in zip(got, [0.9, 0.54, 0.324, 0.1944]):
    assert abs(g - want) < 0.08, (got, want)
print("acceptance per position with rates 0.9,0.6:", [round(x, 3) for x in got])
PY
expect_exit 2 'decode.acceptance = "fixed:x": .x. is not a number \(set by --set' bad.log -- \
  "$SPECRUN_BIN" run job.toml --set decode.acceptance=fixed:x
echo "synthetic_acceptance: OK"
