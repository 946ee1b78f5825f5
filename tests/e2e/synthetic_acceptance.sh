#!/usr/bin/env bash
# decode.acceptance: with a fixed accepted length L every verify step emits L + 1 tokens, so
# tau = L + 1 exactly; the step still verifies the drafter's whole chain, as a real run does (so
# its verify cost is that of a real run with the same chain shape: the counts of verified nodes
# are asserted, the two runs' verify times only printed, since timings belong to benchmarks);
# rates give the per-position acceptance asked for.
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
# Every prompt gets its 31 tokens in each run.
for name, m in (("real", real), ("fixed:2", fixed), ("rates", rates)):
    assert m["prompts"] == 16 and m["generated"] == 16 * 31, (name, m["prompts"], m["generated"])
# fixed:2: 1 + 10 steps x 3 tokens per prompt, each step accepting exactly 2.
assert fixed["verify_steps"] == 16 * 10, fixed["verify_steps"]
assert fixed["accepted"] == 2 * fixed["verify_steps"], fixed["accepted"]
assert fixed["accepted_histogram"] == [0, 0, 160, 0, 0], fixed["accepted_histogram"]
# The whole chain of draft_len = 4 is verified in every step whose budget allows it (the
# synthetic rule cuts acceptance, not proposals): 9 steps of 4 nodes per prompt, then one of 2
# (3 tokens left: 2 drafted + 1 from the target).
assert fixed["nodes_histogram"] == {"4": 144, "2": 16}, fixed["nodes_histogram"]
assert fixed["drafted"] == 4 * 144 + 2 * 16, fixed["drafted"]
# The real run verifies the same shape: 4 nodes per step but for at most one shorter last step
# per prompt.
short = sum(n for k, n in real["nodes_histogram"].items() if k != "4")
assert set(real["nodes_histogram"]) <= {"0", "1", "2", "3", "4"}, real["nodes_histogram"]
assert short <= 16 and real["nodes_histogram"].get("4", 0) == real["verify_steps"] - short, real["nodes_histogram"]
rv, fv = real["phases_ms"]["verify"]["mean"], fixed["phases_ms"]["verify"]["mean"]
print(f"verified nodes/step: real {real['mean_nodes']:.3f}, fixed:2 {fixed['mean_nodes']:.3f}; "
      f"verify ms/step (printed, not asserted): real {rv:.4f}, fixed:2 {fv:.4f} (ratio {fv / rv:.2f}); "
      f"tau real {real['tau']:.3f}, fixed {fixed['tau']:.3f}")
# rates 0.9, 0.6 (then 0.6): P(accept >= i) = 0.9, 0.54, 0.324, 0.194.
got = rates["acceptance_unconditional"]
for g, want in zip(got, [0.9, 0.54, 0.324, 0.1944]):
    assert abs(g - want) < 0.08, (got, want)
print("acceptance per position with rates 0.9,0.6:", [round(x, 3) for x in got])
PY
expect_exit 2 'decode.acceptance = "fixed:x": .x. is not a number \(set by --set' bad.log -- \
  "$SPECRUN_BIN" run job.toml --set decode.acceptance=fixed:x
echo "synthetic_acceptance: OK"
