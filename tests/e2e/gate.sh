#!/usr/bin/env bash
# Golden acceptance curves and the gate on real runs: the shared trained pair (code-target and
# code-draft, docs in models/README.md) on 24 code prompts of two categories, 1 rank, sampled decoding at
# temperature 0.8, so that repeats of one job differ by job.seed:
#  1. `golden` from three repeats (seeds 1-3): a versioned JSON with the identity, every position
#     (unconditional and conditional), tau, tau per category, the between-run noise; its tau is
#     the mean of report's;
#  2. unchanged reruns (seeds 4-7) and a golden run itself pass: exit 0, one PASS line first;
#  3. a draft made worse (its layers' weights perturbed: a retrained-worse draft, the same drafter
#     identity, another fingerprint) is a drop: exit 1, the position named, the draft change noted;
#  4. another experiment exits 3 naming the field: a temperature change, the n-gram drafter,
#     fewer draft tokens;
#  5. missing statistics exit 2, never a pass: a baseline-only result, a job that did not finish,
#     a golden without a field the gate needs, a file that is not a result; `golden` refuses runs of two experiments,
#     naming the file and the field.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
SHARED=${SPECRUN_SHARED_DIR:-/nonexistent}
[ -f "$SHARED/models/code-target/config.json" ] && [ -f "$SHARED/prompts/code_prompts.jsonl" ] || {
  echo "SKIP: the shared trained pair is not in $SHARED"
  exit 77
}
rm -rf w && mkdir w && cd w

# 12 prompts of each category (the file holds 200 "python", then 50 "python-docstring").
{ sed -n 1,12p "$SHARED/prompts/code_prompts.jsonl"; sed -n 201,212p "$SHARED/prompts/code_prompts.jsonl"; } >prompts.jsonl
"$SPECRUN_BIN" prepare prompts.jsonl prompts.h5 >/dev/null
cp -r "$SHARED/models/code-draft" draft  # the draft, and below a worse copy of it
cat >job.toml <<TOML
[job]
name = "gate"
output = "out.h5"
[target]
path = "$SHARED/models/code-target"
[draft]
kind = "model"
path = "draft"
[parallel]
tp = 1
threads = 1
[data]
prompts = "prompts.h5"
batch_size = 8
[decode]
modes = ["speculative"]
max_new_tokens = 32
draft_len = 4
temperature = 0.8
stop_at_eos = false
TOML

run() {  # run NAME SETTINGS...: a finished run, NAME.h5
  local name=$1
  shift
  timeout 120 "${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml --set job.output=$name.h5 "$@" \
    >$name.log 2>&1 || fail "run $name failed: $(tail -5 $name.log)"
}
gate() {  # gate NAME EXPECTED_RC [options]: gate NAME.h5 against golden.json, output NAME.gate
  local name=$1 want=$2 rc=0
  shift 2
  timeout 60 "$SPECRUN_BIN" gate $name.h5 --golden golden.json "$@" >$name.gate 2>$name.gerr ||
    rc=$?
  [[ $rc -eq $want ]] || fail "gate $name: exit $rc, expected $want: $(cat $name.gate $name.gerr)"
}

# 1. The golden from three repeats.
for s in 1 2 3; do run g$s --set job.seed=$s; done
"$SPECRUN_BIN" golden g1.h5 g2.h5 g3.h5 --out golden.json >golden.log ||
  fail "golden: $(cat golden.log)"
grep -q 'wrote golden.json: 10 metrics from 3 runs, noise: between-run' golden.log ||
  fail "golden: $(cat golden.log)"
"$PY" - golden.json <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
assert g["format"] == "specrun-golden" and g["version"] == 1, g
assert g["noise_rule"] == "between-run" and len(g["runs"]) == 3, g
assert g["identity"]["decode.temperature"] == "0.8", g["identity"]
assert g["identity"]["target model"].startswith("xxh3:"), g["identity"]
assert g["draft_model"].startswith("xxh3:"), g
names = [m["name"] for m in g["metrics"]]
assert names == ["unconditional@1", "unconditional@2", "unconditional@3", "unconditional@4",
                 "conditional@2", "conditional@3", "conditional@4", "tau", "tau[python]",
                 "tau[python-docstring]"], names
for m in g["metrics"]:
    assert len(m["runs"]) == 3 and m["noise_variance"] > 0, m
    v = m["runs"]; mean = sum(v) / 3
    assert abs(m["value"] - mean) < 1e-12, m
    between = sum((x - mean) ** 2 for x in v) / 2
    assert abs(m["between_variance"] - between) < 1e-12, m
u1 = g["metrics"][0]["value"]
print(f"golden: unconditional@1 {u1:.3f}, tau {g['metrics'][7]['value']:.3f}")
assert 0.2 < u1 < 0.99, "the synthetic draft should accept sometimes, not always"
PY
# The golden's values are report's: the mean of the runs' tau.
"$PY" - golden.json g1.h5 g2.h5 g3.h5 "$SPECRUN_BIN" <<'PY'
import json, subprocess, sys
g = json.load(open(sys.argv[1]))
taus = [json.loads(subprocess.check_output([sys.argv[5], "report", f, "--json"]))["modes"]
        ["speculative"]["tau"] for f in sys.argv[2:5]]
tau = next(m for m in g["metrics"] if m["name"] == "tau")
assert abs(tau["value"] - sum(taus) / 3) < 1e-9 and tau["runs"] == taus, (tau, taus)
PY

# 2. Unchanged reruns pass, with one PASS line first.
for s in 4 5 6 7; do
  run r$s --set job.seed=$s
  gate r$s 0
  head -1 r$s.gate | grep -qE '^PASS: no significant drop \[10 one-sided tests, Holm, alpha 0.05\]; smallest margin: .* p [0-9.e-]+ \(Holm-adjusted [0-9.e-]+ > 0.05\)$' ||
    fail "r$s: $(head -3 r$s.gate)"
done
gate g1 0
gate r4 0 --json
"$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["verdict"] == "PASS" and j["exit_code"] == 0 and j["correction"] == "holm", j
assert len(j["tests"]) == 10 and not any(t["significant"] for t in j["tests"]), j' r4.gate

# 3. A draft made worse: the same drafter kind and shape, other weights (its fingerprint changes):
#    noise of 0.6 standard deviations added to its layers' weights (position 1: 0.69 -> 0.56).
cp -r draft worse
"$PY" - worse/model.safetensors <<'PY'
import json, struct, sys
import numpy as np
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
rng = np.random.default_rng(3)
for name, t in header.items():
    if name == "__metadata__" or ".layers." not in name or t["dtype"] not in ("F32", "BF16"):
        continue
    a, b = t["data_offsets"]
    at = 8 + n + a
    if t["dtype"] == "F32":
        w = np.frombuffer(bytes(data[at:8 + n + b]), dtype="<f4").copy()
        w += rng.normal(0, 0.6 * w.std() + 1e-3, w.shape).astype(np.float32)
        data[at:8 + n + b] = w.astype("<f4").tobytes()
    else:
        bits = np.frombuffer(bytes(data[at:8 + n + b]), dtype="<u2").astype(np.uint32) << 16
        w = bits.view(np.float32)
        w = w + rng.normal(0, 0.6 * w.std() + 1e-3, w.shape).astype(np.float32)
        data[at:8 + n + b] = (w.view(np.uint32) >> 16).astype("<u2").tobytes()
open(path, "wb").write(bytes(data))
PY
run worse --set draft.path=worse --set job.seed=4
gate worse 1
head -1 worse.gate | grep -qE '^DROP: position [1-4] \((un)?conditional acceptance\) [0-9.]+ vs golden [0-9.]+ \(-[0-9.]+, -[0-9.]+%\), p [0-9.e+-]+ under noise' ||
  fail "worse: $(head -3 worse.gate)"
grep -q '^note: the draft model changed: golden xxh3:' worse.gate || fail "worse: $(cat worse.gate)"

# 4. Another experiment: exit 3 naming the field.
run hot --set decode.temperature=0.5 --set job.seed=4
gate hot 3
grep -q '^EXPERIMENT: hot.h5 is not the experiment of golden.json: decode.temperature: golden 0.8, run 0.5$' \
  hot.gate || fail "hot: $(cat hot.gate)"
run ngram --set draft.kind=ngram --set job.seed=4
gate ngram 3
grep -q '^EXPERIMENT: .*draft.kind: golden model, run ngram' ngram.gate || fail "ngram: $(cat ngram.gate)"
run short --set decode.draft_len=2 --set job.seed=4
gate short 3
grep -q '^EXPERIMENT: .*decode.draft_len: golden 4, run 2' short.gate || fail "short: $(cat short.gate)"

# 5. Missing statistics: exit 2, the verdict first.
run base --set 'decode.modes=["baseline"]'
gate base 2
grep -q '^MISSING: cannot gate base.h5 against golden.json: base.h5: no speculative mode' base.gate ||
  fail "base: $(cat base.gate)"
# A job stopped after its first batch (decode.min_tau above any tau): unfinished, part of the
# workload only.
rc=0
timeout 120 "${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml --set job.output=stopped.h5 \
  --set decode.alarm_steps=1 --set decode.min_tau=9 >stopped.log 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "the stopped job: exit $rc: $(tail -3 stopped.log)"
gate stopped 2
grep -q '^MISSING: .*stopped.h5: the job did not finish' stopped.gate || fail "stopped: $(cat stopped.gate)"
"$PY" -c '
import json, sys
g = json.load(open("golden.json"))
del g["metrics"][2]["noise_variance"]
json.dump(g, open("golden_broken.json", "w"))'
rc=0
"$SPECRUN_BIN" gate r4.h5 --golden golden_broken.json >broken.gate 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q 'metric unconditional@3 has no "noise_variance"' broken.gate ||
  fail "broken golden: exit $rc: $(cat broken.gate)"
echo "not a result" >text.h5
rc=0
"$SPECRUN_BIN" gate text.h5 --golden golden.json --json >text.gate 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q '"verdict": "MISSING"' text.gate || fail "text.h5: exit $rc: $(cat text.gate)"
expect_exit 2 'g1.h5 has 0.8' mixed.log -- "$SPECRUN_BIN" golden g1.h5 hot.h5 --out mixed.json
grep -q 'hot.h5: decode.temperature = 0.5 but g1.h5 has 0.8' mixed.log || fail "$(cat mixed.log)"
[ ! -e mixed.json ] || fail "a refused golden was written"
echo "gate: OK"
