#!/usr/bin/env bash
# Mixture-of-experts targets against an independent float64 numpy implementation written from
# Hugging Face's semantics (moe_reference.py): make-model's Qwen3MoeForCausalLM (q/k norms, a
# dense layer among MoE ones through mlp_only_layers, norm_topk_prob true; and a second one with
# decoder_sparse_step 2 and norm_topk_prob false) and MixtralForCausalLM (every layer MoE, always
# renormalised), 8 experts, top-2, a 48-token prompt and 17 generated tokens: the logits at every
# position of the 64-token sequence (the prefill's rows, then each decode step's) agree with the
# reference to a relative L2 error below 1e-5 per position with F32 weights, and every argmax
# (the greedy tokens) is the same. BF16 weights: the reference widens the same BF16 values and
# the tolerance is the same, 1e-5 (specrun's activations are float32 either way). Each check
# asserts that no routing decision is a near tie (the smallest gap between a token's k-th and
# (k+1)-th router logit is above 1e-3), so that float32 round-off cannot pick another expert.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf qwen3moe* mixtral* ./*.bin ./*.txt # a rerun starts clean

shape=(--hidden 128 --heads 4 --kv-heads 2 --layers 4 --vocab 512 --experts 8 --experts-per-tok 2
  --router-std 0.3)
prompt=$("$PY" -c "import random; r = random.Random(1); print(','.join(str(r.randrange(3, 512)) for _ in range(48)))")

check() {  # check NAME MAKE-MODEL-OPTIONS...: make it, generate, compare with the reference
  local name=$1
  shift
  "$SPECRUN_BIN" make-model "$name" "${shape[@]}" "$@" >/dev/null
  "$SPECRUN_BIN" generate "$name/target" --tokens "$prompt" --max-new-tokens 17 --threads 2 \
    --dump-logits "$name.bin" >"$name.txt"
  local generated
  generated=$(head -n 1 "$name.txt" | tr ' ' ',')
  "$PY" "$E2E_DIR/moe_reference.py" "$name/target" "$name.bin" "$prompt,$generated" \
    --tolerance 1e-5 --min-margin 1e-3 || fail "$name differs from the independent reference"
}

for dtype in f32 bf16; do
  check qwen3moe-$dtype --arch qwen3_moe --head-dim 48 --intermediate 256 --moe-intermediate 96 \
    --mlp-only-layers 1 --seed 5 --dtype $dtype
  grep -q '"Qwen3MoeForCausalLM"' qwen3moe-$dtype/target/config.json || fail "not Qwen3-MoE"
  check qwen3moe-step2-$dtype --arch qwen3_moe --intermediate 192 --moe-intermediate 64 \
    --decoder-sparse-step 2 --norm-topk-prob 0 --seed 11 --dtype $dtype
  check mixtral-$dtype --arch mixtral --intermediate 96 --seed 5 --dtype $dtype
  grep -q '"MixtralForCausalLM"' mixtral-$dtype/target/config.json || fail "not Mixtral"
done
echo "moe_reference: ok"
