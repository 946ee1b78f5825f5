#!/usr/bin/env bash
# The expert accounting end to end on a synthetic Qwen3-MoE pair (make-model --arch qwen3_moe):
# a job of baseline and speculative decoding (chain, then tree) at tp 2 writes the experts each
# target pass read, and the draft model's apart, and the file read with h5py holds counts that
# agree with each other, with config.json and with the step rows:
#   per pass and MoE layer: pairs == tokens x top_k, unique <= min(experts, top_k x tokens),
#   bytes == unique x expert_bytes (expert_bytes from config.json: gate, up and down of
#   moe_intermediate_size x hidden), the EP ranks' pairs sum to pairs, kept <= all;
#   the MoE layers are those config.json makes sparse (mlp_only_layers, decoder_sparse_step);
#   one prefill per batch and one decode or verify per step; a verify sequence's tokens minus its
#   kept tokens are its rejected nodes (drafted - accepted: verify computes every node);
#   per rank weight memory in the file and the job log.
# `report` prints and `report --json` holds the figures recomputed here; `compare` of a copy
# whose verify passes read twice the expert bytes is a regression naming them; `bench` sweeps verify
# widths beside their unique experts (a prefix of tokens never reads fewer experts).
# Needs the mixture-of-experts model (make-model --arch qwen3_moe): fails without it.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf moe && mkdir moe && cd moe

"$SPECRUN_BIN" make-model models --arch qwen3_moe --hidden 64 --heads 4 --kv-heads 2 \
  --intermediate 128 --vocab 256 --layers 3 --draft-layers 2 --dtype f32 --seed 3 >make.log 2>&1 ||
  fail "make-model --arch qwen3_moe: $(tail -3 make.log)"
grep -q '"Qwen3MoeForCausalLM"' models/target/config.json || fail "the target is not Qwen3-MoE"
make_prompt_file prompts.h5 10
write_job chain.toml chain.h5 prompts.h5
write_job tree.toml tree.h5 prompts.h5 'tree_top_k = 2' 'tree_depth = 3' 'tree_nodes = 6'
for job in chain tree; do
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run $job.toml >$job.log 2>&1 ||
    fail "the $job job failed: $(tail -5 $job.log)"
  grep -q 'greedy outputs identical: 10 / 10 prompts' $job.log ||
    fail "$job: speculative output differs from baseline: $(grep greedy $job.log)"
  grep -qE 'target weights: [0-9.]+ [KM]iB per rank' $job.log ||
    fail "$job: no weight memory in the job log"
done

"$PY" - chain.h5 tree.h5 <<'PYEOF'
import json, sys
import h5py
import numpy as np

def moe_shape(path):
    c = json.load(open(path))
    E, k = c["num_experts"], c["num_experts_per_tok"]
    step, dense = c.get("decoder_sparse_step", 1), set(c.get("mlp_only_layers", []))
    layers = [l for l in range(c["num_hidden_layers"]) if l not in dense and (l + 1) % step == 0]
    # One routed expert: gate and up [moe_intermediate, hidden], down [hidden, moe_intermediate].
    expert_bytes = 3 * c["hidden_size"] * c["moe_intermediate_size"] * 4  # f32
    return E, k, layers, expert_bytes

def committed(g):
    nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()])
    return nb

def check_model(g, model, shape, ep):
    E, k, layers, expert_bytes = shape
    e = g["experts/" + model]
    assert int(e.attrs["n_experts"]) == E and int(e.attrs["top_k"]) == k, (model, dict(e.attrs))
    assert int(e.attrs["expert_bytes"]) == expert_bytes, (model, e.attrs["expert_bytes"], expert_bytes)
    assert list(e["layers"][:]) == layers, (model, e["layers"][:], layers)
    assert ep is None or int(e.attrs["ep"]) == ep, (model, e.attrs["ep"])  # parallel.ep = tp
    nb = committed(g)
    P, R = int(e["commits/passes_end"][nb - 1]), int(e["commits/rows_end"][nb - 1])
    p = {c: e["passes/" + c][:P] for c in e["passes"]}
    s = {c: e["sequences/" + c][:R] for c in e["sequences"]}
    tok = p["tokens"][:, None]
    assert (p["pairs"] == tok * k).all(), model
    assert (p["unique"] <= np.minimum(E, k * tok)).all(), model
    assert (p["unique"] >= k).all(), model
    assert (p["bytes"] == p["unique"].astype(np.int64) * expert_bytes).all(), model
    assert (p["kept_bytes"] == p["kept_unique"].astype(np.int64) * expert_bytes).all(), model
    assert (p["rank_pairs"].sum(axis=2) == p["pairs"]).all(), model
    assert (p["kept_unique"] <= p["unique"]).all() and (p["kept_tokens"] <= p["tokens"]).all()
    assert (p["max_load"] <= tok).all() and (p["max_load"] >= 1).all(), model
    assert p["sequences"].sum() == R, model
    starts = np.r_[0, np.cumsum(p["sequences"])[:-1]]
    assert (np.add.reduceat(s["tokens"], starts) == p["tokens"]).all(), model
    assert (s["unique"] <= np.minimum(p["unique"].repeat(p["sequences"], axis=0),
                                      k * s["tokens"][:, None])).all(), model
    return e, p, s, P

for path in sys.argv[1:]:
    with h5py.File(path, "r") as f:
        world = int(f.attrs["world_size"])
        w = f["provenance/target_weight_bytes"][:]
        assert w.dtype == np.int64 and w.shape == (world,) and (w > 0).all(), w
        target = moe_shape("models/target/config.json")
        draft_cfg = json.load(open("models/draft/config.json"))
        for mode in ("baseline", "speculative"):
            g = f[mode]
            e, p, s, P = check_model(g, "target", target, ep=2)
            kinds = list(e.attrs["kinds"])
            kind = np.array(kinds)[p["kind"]]
            nb = committed(g)
            ns = int(g["batches/steps_end"][nb - 1])
            st = {c: g["steps/" + c][:ns] for c in ("batch", "step", "prompt_index", "drafted",
                                                     "accepted", "emitted")}
            want = "verify" if mode == "speculative" else "decode"
            assert set(kind) == {"prefill", want}, (mode, set(kind))
            assert (kind == "prefill").sum() == nb, (mode, (kind == "prefill").sum(), nb)
            steps = set(zip(st["batch"].tolist(), st["step"].tolist()))
            passes = list(zip(p["batch"][kind == want].tolist(), p["step"][kind == want].tolist()))
            assert len(passes) == len(set(passes)) and set(passes) == steps, mode
            # Every verify sequence: computed - kept = rejected nodes = drafted - accepted.
            row = {(b, t, q): i for i, (b, t, q) in
                   enumerate(zip(st["batch"].tolist(), st["step"].tolist(), st["prompt_index"].tolist()))}
            r = 0
            for i in range(P):
                for j in range(int(p["sequences"][i])):
                    if kind[i] == want:
                        x = row[(int(p["batch"][i]), int(p["step"][i]), int(s["prompt_index"][r]))]
                        computed, kept = int(s["tokens"][r]), int(s["kept_tokens"][r])
                        assert computed - kept == st["drafted"][x] - st["accepted"][x], (path, i)
                        assert kept >= 1 + st["accepted"][x], (path, i)  # the root and the path
                    r += 1
            if mode == "speculative" and "num_experts" in draft_cfg:
                # The draft's ep follows its placement (sharded or replicated): not asserted.
                d, dp, _, _ = check_model(g, "draft", moe_shape("models/draft/config.json"), None)
                dk = set(np.array(list(d.attrs["kinds"]))[dp["kind"]])
                assert {"draft_prefill", "propose"} <= dk <= {"draft_prefill", "propose", "accepted"}, dk
            else:
                assert "draft" not in g["experts"], mode
print("moe_accounting: the stored counts are consistent")
PYEOF

# report: the figures, recomputed here from the raw datasets.
"$SPECRUN_BIN" report chain.h5 >report.txt
cat report.txt
grep -q '^experts (target: ' report.txt || fail "report prints no expert section"
grep -qE '^experts, verify / decode \(target\): [0-9.]+x unique experts per layer' report.txt ||
  fail "report prints no verify / decode ratio"
"$SPECRUN_BIN" report chain.h5 --json >report.json
"$PY" - chain.h5 report.json <<'PYEOF'
import json, sys
import h5py
import numpy as np
j = json.load(open(sys.argv[2]))
with h5py.File(sys.argv[1], "r") as f:
    mb = {}
    for mode, kind in (("baseline", "decode"), ("speculative", "verify")):
        g = f[mode]
        e = g["experts/target"]
        nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()])
        P = int(e["commits/passes_end"][nb - 1])
        kinds = np.array(list(e.attrs["kinds"]))[e["passes/kind"][:P]]
        sel = kinds == kind
        ns = int(g["batches/steps_end"][nb - 1])
        emitted = int(g["steps/emitted"][:ns].sum())
        mb[mode] = e["passes/bytes"][:P][sel].sum() / 1e6 / emitted
        unique = e["passes/unique"][:P][sel].mean()
        got = j["modes"][mode]["experts"]["target"]["passes"][kind]
        assert abs(got["mb_per_emitted_token"] - mb[mode]) < 1e-9 * max(1, mb[mode]), (got, mb)
        assert abs(got["unique_per_layer"] - unique) < 1e-9, (got, unique)
    ratio = j["experts_verify_over_decode"]["mb_per_emitted_token"]
    assert abs(ratio - mb["speculative"] / mb["baseline"]) < 1e-9, ratio
print("report --json: expert figures agree")
PYEOF

# compare: the same file is SAME; a copy whose target experts are twice as large (every verify
# reads twice the expert bytes per emitted token; the counts kept consistent) is a regression that
# the verdict names, whatever the timings say.
rc=0
"$SPECRUN_BIN" compare chain.h5 chain.h5 >same.txt || rc=$?
[[ $rc -eq 0 ]] || fail "compare of a file with itself: exit $rc $(head -3 same.txt)"
grep -q '^SAME: no phase, throughput, speedup or expert bytes' same.txt || fail "$(head -1 same.txt)"
cp chain.h5 more.h5
"$PY" - more.h5 <<'PYEOF'
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    e = f["speculative/experts/target"]
    e.attrs["expert_bytes"] = np.int64(2 * int(e.attrs["expert_bytes"]))
    for name in ("bytes", "kept_bytes"):
        e["passes/" + name][:] = 2 * e["passes/" + name][:]
PYEOF
rc=0
"$SPECRUN_BIN" compare chain.h5 more.h5 --threshold 2 >more.txt || rc=$?
[[ $rc -eq 1 ]] || fail "more expert bytes per token: exit $rc, expected 1: $(head -3 more.txt)"
grep -q '^REGRESSION: speculative verify expert MB per emitted token +' more.txt ||
  fail "the verdict does not name the expert bytes: $(head -1 more.txt)"

# bench: verify widths 1..k+1 beside their unique experts.
"$SPECRUN_BIN" bench --model-dir models/target --cases decode,experts --repeats 1 --warmup 0 \
  --steps 2 --context 4 --verify-k 3 --threads 1 --json bench.json >bench.txt 2>bench.err ||
  fail "bench: $(tail -3 bench.err)"
grep -q 'T_verify(w)/T_decode' bench.txt || fail "bench prints no experts sweep: $(cat bench.txt)"
"$PY" - bench.json models/target/config.json <<'PYEOF'
import json, sys
b, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sweep = b["experts"]["verify_sweep"]
assert [p["w"] for p in sweep] == [1, 2, 3, 4], sweep
k = c["num_experts_per_tok"]
assert sweep[0]["unique_per_layer"] == k and sweep[0]["verify_over_decode"] == 1, sweep[0]
for a, z in zip(sweep, sweep[1:]):  # the passes' tokens are prefixes of each other
    assert a["unique_per_layer"] <= z["unique_per_layer"] <= min(c["num_experts"], k * z["w"]), sweep
print("bench: the experts sweep holds")
PYEOF
echo "moe_accounting: all checks passed"
