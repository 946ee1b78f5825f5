#!/usr/bin/env bash
# `specrun bench` smoke run on a tiny synthetic model: one repeat, single rank and tp = 2 under
# mpirun. Checks the table and the JSON (every case present, positive times, consistent derived
# figures, communication time only at tp 2) and that a bad option exits 2. No assertion on speed: that is for scripts/bench.sh.
set -euo pipefail
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
PY=/usr/bin/python3
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
rm -f one.json two.json q.json # a rerun starts clean: outputs are never silently replaced
TINY=(--hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 --vocab 256
  --repeats 1 --warmup 1 --steps 2 --context 4 --verify-k 3 --prefill 16 --batch 3)

"$SPECRUN_BIN" bench "${TINY[@]}" --threads 2 --json one.json >one.txt
cat one.txt
grep -q "decode" one.txt || fail "no decode row in the table"
grep -qE "^phase timing: [0-9.]+ us per step .*% of a decode step" one.txt ||
  fail "no phase timing line in the table"
mpirun --oversubscribe -np 2 "$SPECRUN_BIN" bench "${TINY[@]}" --tp 2 --threads 1 \
  --cases decode,verify --json two.json >two.txt
cat two.txt

$PY - <<'PYEOF'
import json
def check(path, names, tp, verify_k):
    d = json.load(open(path))
    got = [c["name"] for c in d["cases"]]
    assert got == names, f"{path}: cases {got}, expected {names}"
    assert d["tp"] == tp, f"{path}: tp {d['tp']}"
    assert d["decode_weight_bytes"] > 0 and d["parameters"] > 0
    for c in d["cases"]:
        assert 0 < c["ms_min"] <= c["ms_median"] <= c["ms_max"], f"{path}: {c}"
        assert c["gb_per_s"] > 0, f"{path}: {c}"
        # Time inside collectives: none at tp 1; at tp 2 some for every forward, never more
        # than the step itself.
        if tp == 1 or c["name"] == "bandwidth":
            assert c["comm_ms"] == 0, f"{path}: {c}"
        else:
            assert 0 < c["comm_ms"] <= c["ms_max"], f"{path}: {c}"
    bw = d["cases"][0]
    assert abs(bw["pct_bandwidth"] - 100) < 1e-6
    dec = next(c for c in d["cases"] if c["name"] == "decode")
    assert dec["tokens_per_step"] == 1
    assert abs(dec["tokens_per_s"] * dec["ms_median"] / 1000 - 1) < 1e-6
    ver = next(c for c in d["cases"] if c["name"] == "verify")
    assert ver["tokens_per_step"] == verify_k + 1
    assert abs(d["verify_over_decode"] - ver["ms_median"] / dec["ms_median"]) < 1e-9
    return d
one = check("one.json", ["bandwidth", "decode", "verify", "prefill", "batch"], 1, 3)
two = check("two.json", ["bandwidth", "decode", "verify"], 2, 3)
# The phase timing case (default on; not asked for in two.json): microseconds per step, the
# threads whose run-queue wait it reads (this process has at least the main thread and 2 OpenMP
# threads), no device marks on the CPU.
t = one["timing"]
assert 0 < t["us_per_step_min"] <= t["us_per_step"] <= t["us_per_step_max"] < 10000, t
assert t["threads"] >= 2 and t["device_marks"] is False, t
assert two["timing"]["us_per_step"] == 0, two["timing"]
print("bench JSON ok")
PYEOF

# A quantized synthetic model (issue 44): the bytes a decode step reads are the packed ones
# (int4 group 32 with BF16 scales: 4.5 bits per weight where BF16 has 16), the parameters the
# unpacked shapes, the quantization named in the table and the JSON.
rm -f q.json
"$SPECRUN_BIN" bench "${TINY[@]}" --threads 2 --cases decode --quantize int4-g32 --quant-roles all \
  --json q.json >q.txt
grep -q '^quantized: compressed-tensors pack-quantized: group_0 int4 group 32' q.txt ||
  fail "the table does not name the quantization: $(head -3 q.txt)"
$PY - <<'PYEOF'
import json
one, q = json.load(open("one.json")), json.load(open("q.json"))
assert q["parameters"] == one["parameters"], (q["parameters"], one["parameters"])
assert one["quantization"] == "none" and q["quantization"].startswith("compressed-tensors"), q
# Only the embedding table (256 x 64, one row read) and the norms stay BF16: the rest reads
# 4.5 / 16 of its BF16 bytes.
ratio = q["decode_weight_bytes"] / one["decode_weight_bytes"]
assert 0.25 < ratio < 0.35, ratio
print(f"quantized bench ok: decode reads {ratio:.3f} of the BF16 bytes")
PYEOF
set +e
"$SPECRUN_BIN" bench --model-dir . --quantize int4-g32 >bad.txt 2>&1
code=$?
set -e
[[ $code -eq 2 ]] || fail "--quantize with --model-dir exited $code, expected 2"

set +e
"$SPECRUN_BIN" bench --dtype f16 >bad.txt 2>&1
code=$?
set -e
[[ $code -eq 2 ]] || fail "--dtype f16 exited $code, expected 2"
grep -q "dtype" bad.txt || fail "the --dtype error does not name the option"
echo "bench smoke ok"
