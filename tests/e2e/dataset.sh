#!/usr/bin/env bash
# Dataset generation (decode.modes = ["dataset"]) end to end:
#  1. A synthetic target, prompts of mixed lengths, EOS on, f32 storage: batch 1 and batch 8
#     (continuous batching) store bit-identical hidden states and tokens for every prompt, and
#     `verify-data --tolerance 0` (a tp-1 single-sequence forward of each sequence) passes on
#     both: the stored states equal a plain forward exactly. In bf16 they are exact after
#     rounding.
#  2. ../shared/models/code-target over the 250 code prompts (128 new tokens, EAGLE-3 capture
#     layers, bf16, gzip) under mpirun -np 4 as dp 2 x tp 2 and as dp 4 x tp 1: the top-level file
#     reads with h5py (virtual datasets over the shards), every prompt exactly once, its tokens
#     starting with the prompt; verify-data passes on a sample.
#  3. verify-data fails, naming the sequence, on a copy whose hidden states were altered.
#  4. Refusals (exit 2, nothing written): a file system without the space, bad keys.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

"$SPECRUN_BIN" make-model models --hidden 64 --layers 4 --heads 4 --kv-heads 2 \
  --intermediate 128 --vocab 256 >/dev/null
make_prompt_file prompts.h5 24 --min-len 3 --max-len 40
cat >job.toml <<'TOML'
[job]
name = "dataset-e2e"
output = "out/data.h5"
overwrite = true
[target]
path = "models/target"
[parallel]
tp = 1
threads = 1
[data]
prompts = "prompts.h5"
batch_size = 8
[decode]
modes = ["dataset"]
max_new_tokens = 24
stop_at_eos = true
[dataset]
hidden_layers = "eagle3,final"
dtype = "f32"
topk = 4
chunk_rows = 32
TOML
mkdir -p out b1 b8 bf
gen() {  # gen NAME NP [--set ...]
  local name=$1 np=$2
  shift 2
  timeout 300 "${MPIRUN[@]}" -np "$np" "$SPECRUN_BIN" run job.toml --set job.output=$name/data.h5 \
    "$@" >$name.log 2>&1 || fail "generation $name failed: $(tail -5 $name.log)"
}
gen b1 1 --set data.batch_size=1
gen b8 2 --set data.batch_size=8 --set dataset.commit_s=0  # a part per sequence
gen bf 1 --set dataset.dtype=bf16
grep -q 'dataset summary: 24 sequences' b8.log || fail "b8 summary: $(tail -8 b8.log)"
"$PY" - <<'PY' || fail "batch 1 and batch 8 stored different data"
import h5py, numpy as np
def load(p):
    f = h5py.File(p, "r")
    s = f["sequences"]
    out = {}
    for i, pi in enumerate(s["prompt_index"][:]):
        t0, r0, n = s["token_offset"][i], s["row_offset"][i], s["n_rows"][i]
        L = s["prompt_len"][i] + s["generated"][i]
        out[int(pi)] = (f["tokens"][t0:t0 + L], f["hidden"][r0:r0 + n], f["topk_ids"][r0:r0 + n])
    return out
a, b = load("b1/data.h5"), load("b8/data.h5")
assert sorted(a) == list(range(24)) and sorted(b) == list(range(24)), (sorted(a), sorted(b))
eos = 0
for p in a:
    ta, ha, ka = a[p]
    tb, hb, kb = b[p]
    assert np.array_equal(ta, tb), f"prompt {p}: tokens differ"
    assert ha.shape == (len(ta) - 1, 4, 64), ha.shape
    assert np.array_equal(ha.view(np.uint32), hb.view(np.uint32)), f"prompt {p}: hidden differ"
    assert np.array_equal(ka, kb), f"prompt {p}: top-k differ"
    eos += int(ta[-1] == 2)
print(f"batch 1 == batch 8 bit for bit on 24 prompts ({eos} ended at EOS)")
PY
for d in b1 b8; do
  "$SPECRUN_BIN" verify-data $d/data.h5 --sample 0 --tolerance 0 >verify-$d.txt ||
    fail "verify-data $d: $(cat verify-$d.txt)"
  grep -q '^OK' verify-$d.txt || fail "verify-data $d: $(cat verify-$d.txt)"
done
cat verify-b8.txt
"$SPECRUN_BIN" verify-data bf/data.h5 --sample 0 --tolerance 0 >verify-bf.txt ||
  fail "bf16 not exact after rounding: $(cat verify-bf.txt)"
# verify-data builds its model through ModelFactory, as `run` does: --backend cuda re-runs the
# target on a GPU (the CPU-made data must pass there within the default tolerance); without one,
# the backend's own refusal, naming the option.
# (env's whole output first: grep -q stops reading at its match, and under pipefail the writer's
# SIGPIPE would fail the test.)
env_out=$("$SPECRUN_BIN" env 2>/dev/null || true)
if grep -aq '^CUDA: *not built' <<<"$env_out"; then
  expect_exit 2 '^error: --backend = "cuda" but this specrun was built without CUDA' \
    verify-cuda.txt -- "$SPECRUN_BIN" verify-data b8/data.h5 --backend cuda
elif nvidia-smi -L 2>/dev/null | grep -q GPU; then
  "$SPECRUN_BIN" verify-data b8/data.h5 --sample 0 --backend cuda >verify-cuda.txt ||
    fail "verify-data --backend cuda: $(cat verify-cuda.txt)"
  grep -q '^OK' verify-cuda.txt || fail "verify-data --backend cuda: $(cat verify-cuda.txt)"
else
  expect_exit 2 'the CUDA backend was asked for but rank 0 sees no CUDA device' verify-cuda.txt \
    -- "$SPECRUN_BIN" verify-data b8/data.h5 --backend cuda
fi

# 3. An altered copy fails, naming the sequence.
mkdir -p altered && cp b8/data*.h5 altered/
"$PY" - <<'PY'
import h5py
f = h5py.File("altered/data.shard-1-of-2.part-00002.h5", "r+")  # a part per sequence (b8)
s = f["sequences"]
r0, n = int(s["row_offset"][0]), int(s["n_rows"][0])
f["hidden"][r0 + n // 2] = f["hidden"][r0 + n // 2] * 1.5
print("altered prompt", int(s["prompt_index"][0]))
PY
rc=0
"$SPECRUN_BIN" verify-data altered/data.h5 --sample 0 >verify-altered.txt || rc=$?
cat verify-altered.txt
[[ $rc -eq 1 ]] || fail "verify-data on an altered file: exit $rc, expected 1"
grep -qE '^MISMATCH prompt [0-9]+ .*hidden state of token' verify-altered.txt ||
  fail "verify-data did not name the altered sequence"
[[ $(grep -c '^MISMATCH' verify-altered.txt) -eq 1 ]] || fail "more than one sequence flagged"

# 4. Refusals. A 1 MB file system: the space estimate refuses before anything is written.
mkdir -p small
if mount -t tmpfs -o size=1M tmpfs small 2>/dev/null; then
  trap 'umount small 2>/dev/null || true; cleanup_shm' EXIT
  expect_exit 2 'would write about .* but .*small has .* free' space.log -- \
    "${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml --set job.output=small/data.h5
  [[ -z $(ls small) ]] || fail "the refused job wrote into small/: $(ls small)"
  umount small
  trap cleanup_shm EXIT
else
  echo "NOT RUN: the free-space refusal (mounting a tmpfs needs root)"
fi
expect_exit 2 "dataset.hidden_layers = \"2,x\".*'x' is not a layer id" keys1.log -- \
  "${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml --set dataset.hidden_layers=2,x
expect_exit 2 'layer ids must ascend within 0..4' keys2.log -- \
  "${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml --set dataset.hidden_layers=1,7 \
  --set job.output=out/k2.h5
expect_exit 2 'combines "dataset" with other modes' keys3.log -- \
  "${MPIRUN[@]}" -np 1 "$SPECRUN_BIN" run job.toml --set 'decode.modes=["baseline","dataset"]'
[[ ! -e out/k2.h5 ]] || fail "a refused job wrote out/k2.h5"

# 2. The trained code target, 250 prompts, two layouts of 4 ranks.
SHARED=${SPECRUN_SHARED_DIR:-/nonexistent}
if [ -f "$SHARED/prompts/code_prompts.jsonl" ]; then
  "$SPECRUN_BIN" prepare "$SHARED/prompts/code_prompts.jsonl" code.h5 >/dev/null
  for layout in "2 2" "4 1"; do
    read -r dp tp <<<"$layout"
    name=code-dp${dp}tp${tp}
    mkdir -p $name
    timeout 600 "${MPIRUN[@]}" -np 4 "$SPECRUN_BIN" run job.toml --set parallel.tp=$tp \
      --set target.path="$SHARED/models/code-target" --set data.prompts=code.h5 \
      --set decode.max_new_tokens=128 --set dataset.hidden_layers=eagle3 \
      --set dataset.dtype=bf16 --set dataset.topk=0 --set dataset.chunk_rows=256 \
      --set job.output=$name/data.h5 >$name.log 2>&1 || fail "$name: $(tail -5 $name.log)"
    grep -A8 'dataset summary' $name.log
    "$PY" - $name/data.h5 $dp code.h5 <<'PY' || fail "$name: the top-level file is wrong"
import sys, h5py, numpy as np
path, dp, prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3]
f, p = h5py.File(path, "r"), h5py.File(prompts, "r")
assert f.attrs["kind"] == "index", dict(f.attrs)
assert sorted(set(f["sequences/shard"][:].tolist())) == list(range(dp))
assert all(".shard-" in n and ".part-" in n for n in f.attrs["parts"])
assert list(f["layout/layers"][:]) == [2, 3, 4]
s = f["sequences"]
idx = s["prompt_index"][:]
assert sorted(idx.tolist()) == list(range(250)), "prompts missing or repeated"
assert f["hidden"].shape == (int(s["n_rows"][:].sum()), 3, 256), f["hidden"].shape
off = p["prompts/offsets"][:]
toks = p["prompts/tokens"][:]
for i in range(0, 250, 7):
    pi = int(idx[i])
    prompt = toks[off[pi]:off[pi + 1]]
    t0 = int(s["token_offset"][i])
    got = f["tokens"][t0:t0 + len(prompt)]
    assert np.array_equal(got, prompt), f"prompt {pi}: stored tokens do not start with it"
    r0, n = int(s["row_offset"][i]), int(s["n_rows"][i])
    h = f["hidden"][r0:r0 + n]
    assert n == len(prompt) + int(s["generated"][i]) - 1 and np.isfinite(h).all()
print(f"{path}: 250 sequences through the top-level file, {f['hidden'].shape[0]} rows")
PY
    "$SPECRUN_BIN" verify-data $name/data.h5 --sample 6 >verify-$name.txt ||
      fail "verify-data $name: $(cat verify-$name.txt)"
    tail -2 verify-$name.txt
  done
else
  echo "NOT RUN: the code-target part (no ../shared)"
fi
echo "dataset: all checks passed"
