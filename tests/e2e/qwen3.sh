#!/usr/bin/env bash
# Qwen3 (the seam's proof: one graph change plus config and schema rows) end to end: a synthetic
# Qwen3ForCausalLM from make-model (q/k norms that are not the identity, head_dim 48 while
# hidden / heads = 40, GQA 4/2) decodes to the same greedy tokens at tensor parallelism 1, 2
# and 4 (kv heads replicated at 4), with logits within float32 round-off of each other, and its
# logits match an independent numpy implementation (qwen3_reference.py, float64) within 1e-3 at
# every position, argmax included. The tp = 1 run is also repeated for the BF16 checkpoint.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf qwen3 qwen3-bf16 ./*.bin # a rerun starts clean: outputs are never silently replaced

"$SPECRUN_BIN" make-model qwen3 --arch qwen3 --hidden 160 --head-dim 48 --heads 4 --kv-heads 2 \
  --intermediate 256 --vocab 512 --layers 3 --dtype f32 --seed 5 >/dev/null
"$SPECRUN_BIN" make-model qwen3-bf16 --arch qwen3 --hidden 160 --head-dim 48 --heads 4 \
  --kv-heads 2 --intermediate 256 --vocab 512 --layers 3 --dtype bf16 --seed 5 >/dev/null
grep -q '"Qwen3ForCausalLM"' qwen3/target/config.json || fail "config.json is not Qwen3"
prompt=1,17,300,42,9,250,7,511,3,64,128
for np in 1 2 4; do
  "${MPIRUN[@]}" -np $np "$SPECRUN_BIN" generate qwen3/target --tokens $prompt --max-new-tokens 16 \
    --threads 1 --dump-logits tp$np.bin >tp$np.txt
done
for np in 2 4; do
  cmp -s <(head -n 1 tp1.txt) <(head -n 1 tp$np.txt) ||
    fail "greedy tokens differ between tp 1 and tp $np: $(head -n 1 tp1.txt) / $(head -n 1 tp$np.txt)"
done
echo "tokens at tp 1, 2, 4: $(head -n 1 tp1.txt)"
"$PY" - <<'PYEOF'
import numpy as np
def read(p):
    raw = open(p, "rb").read()
    return np.frombuffer(raw[16:], dtype="<f4")
one = read("tp1.bin")
for np_ in (2, 4):
    d = np.abs(read(f"tp{np_}.bin") - one).max()
    print(f"max |logit tp {np_} - tp 1| = {d:.3g}")
    assert d < 1e-4, d
PYEOF
generated=$(head -n 1 tp1.txt | tr ' ' ',')
"$PY" "$E2E_DIR/qwen3_reference.py" qwen3/target tp1.bin "$prompt,$generated" --tolerance 1e-3 ||
  fail "the Qwen3 graph differs from the independent reference"
# BF16 weights: the reference widens the same BF16 values; activations stay float32 in specrun.
"$SPECRUN_BIN" generate qwen3-bf16/target --tokens $prompt --max-new-tokens 16 --threads 1 \
  --dump-logits bf16.bin >bf16.txt
generated=$(head -n 1 bf16.txt | tr ' ' ',')
"$PY" "$E2E_DIR/qwen3_reference.py" qwen3-bf16/target bf16.bin "$prompt,$generated" \
  --tolerance 1e-3 || fail "the BF16 Qwen3 model differs from the independent reference"
echo "qwen3: ok"
