#!/usr/bin/env bash
# models/code-moe, the trained Qwen3-MoE code model, and scripts/train_moe.py, which wrote it:
# 1. the committed checkpoint is within 25 MB, its config.json is a Qwen3MoeForCausalLM one, and
#    scripts/check_moe_numpy.py (an independent float64 numpy forward of the file) gives the
#    greedy tokens of the torch model and of metrics.json (recorded from the model in memory);
# 2. a checkpoint with a layout error (gate_proj and up_proj of every expert exchanged, the kind
#    of mistake a packed gate_up layout invites) is refused by that check;
# 3. a tiny train_moe.py run writes a checkpoint that passes the same check, and --init continues
#    it (metrics.json lists both runs).
# Skipped (77) without python3-torch, sentencepiece, the standard library or ../shared.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
MODEL="$ROOT/models/code-moe"
"$PY" -c "import torch, sentencepiece" 2>/dev/null || {
  echo "SKIP: python3-torch or python3-sentencepiece is not installed"
  exit 77
}
[[ -d /usr/lib/python3.11 && -f "$ROOT/../shared/models/tokenizer/tokenizer.model" ]] || {
  echo "SKIP: /usr/lib/python3.11 or ../shared/models is missing"
  exit 77
}
rm -rf w && mkdir w && cd w

size=$(stat -c %s "$MODEL/model.safetensors")
((size <= 25000000)) || fail "model.safetensors is $size bytes, over 25 MB"
"$PY" - "$MODEL" <<'PY' || fail "config.json"
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["architectures"] == ["Qwen3MoeForCausalLM"] and c["model_type"] == "qwen3_moe", c
assert c["torch_dtype"] == "bfloat16" and c["tie_word_embeddings"] is False, c
assert c["num_experts"] == 16 and c["num_experts_per_tok"] == 2 and c["norm_topk_prob"], c
PY

timeout 600 "$PY" "$ROOT/scripts/check_moe_numpy.py" "$MODEL" --prompts 2 --tokens 8 \
  >check.log 2>&1 || fail "check of models/code-moe: $(cat check.log)"
grep -q "== metrics.json: True" check.log || fail "metrics.json was not compared: $(cat check.log)"
cat check.log

# The planted layout error: exchange the names gate_proj <-> up_proj in the header.
mkdir swapped
cp "$MODEL"/{config.json,metrics.json} swapped/
"$PY" - "$MODEL/model.safetensors" swapped/model.safetensors <<'PY'
import json, struct, sys
src = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", src[:8])[0]
header = json.loads(src[8:8 + n])
swap = {"gate_proj": "up_proj", "up_proj": "gate_proj"}
out = {}
for name, meta in header.items():
    parts = name.split(".")
    out[".".join(swap.get(p, p) for p in parts)] = meta
text = json.dumps(out).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + src[8 + n:])
PY
if timeout 600 "$PY" "$ROOT/scripts/check_moe_numpy.py" swapped --prompts 2 --tokens 8 \
  >swapped.log 2>&1; then
  fail "a checkpoint with gate_proj and up_proj exchanged passed: $(cat swapped.log)"
fi
grep -q "MISMATCH" swapped.log || fail "no mismatch named: $(cat swapped.log)"

TINY=(--layers 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 --experts 4 --moe-intermediate 32)
timeout 600 "$PY" "$ROOT/scripts/train_moe.py" --steps 12 --warmup 4 "${TINY[@]}" --eval-every 6 \
  --eval-limit 2 --out tiny --f32-out tiny-f32 >train.log 2>&1 ||
  fail "train_moe.py: $(tail -20 train.log)"
grep -q "check_moe_numpy: all agree" train.log || fail "train_moe.py: $(tail -8 train.log)"
for f in config.json model.safetensors generation_config.json tokenizer.model \
  tokenizer_config.json metrics.json README.md; do
  [[ -s tiny/$f ]] || fail "train_moe.py did not write tiny/$f"
done
grep -q '"torch_dtype": "float32"' tiny-f32/config.json || fail "tiny-f32 is not float32"
# --init continues that run (a fresh schedule); metrics.json lists both runs.
timeout 600 "$PY" "$ROOT/scripts/train_moe.py" --init tiny-f32 --steps 4 --warmup 2 "${TINY[@]}" \
  --eval-limit 2 --out tiny2 --f32-out tiny2-f32 --no-check >train2.log 2>&1 ||
  fail "train_moe.py --init: $(tail -20 train2.log)"
"$PY" - <<'PY' || fail "metrics.json of the continuation"
import json
m = json.load(open("tiny2/metrics.json"))
assert [r["steps"] for r in m["training_runs"]] == [12, 4], m["training_runs"]
assert "In all: 16 steps" in open("tiny2/README.md").read()
PY
echo "code_moe: the committed checkpoint, a planted layout error and a tiny training run checked"
