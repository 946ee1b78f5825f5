#!/usr/bin/env bash
# DeepSeek-V3-family targets (MLA attention, YaRN) against an independent float64 numpy
# implementation written from Hugging Face's modeling_deepseek_v3 semantics
# (deepseek_reference.py: RMSNorm, MLA in the naive form and in the absorbed form, which must
# agree, YaRN with its cos/sin magnitude and softmax scale, interleaved rope, dense SwiGLU):
# make-model's DeepseekV3ForCausalLM (q_lora_rank set; and a second with q_lora_rank null, a
# plain q_proj, and rope_interleave false) and KimiK25ForConditionalGeneration (the outer config
# with text_config, tensors "language_model.*", YaRN mscale 0.9 / mscale_all_dim 0.7 so that the
# cos/sin magnitude is not 1), YaRN factor > 1, every layer dense (first_k_dense_replace =
# num_hidden_layers), then with mixture-of-experts layers (DeepSeek-V3's noaux_tc router with
# groups and a nonzero float32 bias, a shared expert; tp 2 with the experts split and with every
# expert cut by tp give the tp 1 tokens), a 48-token prompt and 17 generated tokens: the logits at
# every position of the 64-token sequence agree with the reference to a relative L2 error below
# 1e-5 with F32 weights (and BF16 weights, which the reference widens) and every argmax (the
# greedy tokens) is the same.
# Then, on the F32 DeepSeek-V3 model: tp 2 and 4 (mpirun) generate the same greedy tokens as
# tp 1, and a job (tp 2, baseline and speculative decoding with the truncated draft) logs the
# target's KV cache as kv_lora_rank + qk_rope_head_dim floats per token and layer, and its
# greedy speculative output equals the baseline's; a Kimi-K2.5 job (tp 1) says that the vision
# tower was ignored and its speculative output equals its baseline's.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf deepseek && mkdir deepseek && cd deepseek

shape=(--hidden 128 --heads 4 --layers 3 --intermediate 192 --vocab 512
  --kv-lora-rank 48 --qk-nope-head-dim 24 --qk-rope-head-dim 16 --v-head-dim 32)
prompt=$("$PY" -c "import random; r = random.Random(1); print(','.join(str(r.randrange(3, 512)) for _ in range(48)))")

check() { # check NAME MAKE-MODEL-OPTIONS...: make it, generate, compare with the reference
  local name=$1
  shift
  "$SPECRUN_BIN" make-model "$name" "${shape[@]}" "$@" >/dev/null
  "$SPECRUN_BIN" generate "$name/target" --tokens "$prompt" --max-new-tokens 17 --threads 2 \
    --dump-logits "$name.bin" >"$name.txt"
  local generated
  generated=$(head -n 1 "$name.txt" | tr ' ' ',')
  "$PY" "$E2E_DIR/deepseek_reference.py" "$name/target" "$name.bin" "$prompt,$generated" \
    --tolerance 1e-5 || fail "$name differs from the independent reference"
}

check deepseek_v3 --arch deepseek_v3 --first-k-dense 3 --q-lora-rank 64 --rope-factor 4 --seed 3 --dtype f32
grep -q '"DeepseekV3ForCausalLM"' deepseek_v3/target/config.json || fail "not DeepSeek-V3"
check deepseek_v3_q_proj --arch deepseek_v3 --first-k-dense 3 --q-lora-rank 0 --rope-factor 8 --seed 5 --dtype f32 \
  --rope-interleave 0
grep -q '"q_lora_rank": null' deepseek_v3_q_proj/target/config.json || fail "q_lora_rank not null"
grep -q '"rope_interleave": false' deepseek_v3_q_proj/target/config.json || fail "rope_interleave"
check kimi_k25 --arch kimi_k25 --first-k-dense 3 --q-lora-rank 64 --rope-factor 4 --yarn-mscale 0.9 \
  --yarn-mscale-all-dim 0.7 --seed 7 --dtype f32
grep -q '"KimiK25ForConditionalGeneration"' kimi_k25/target/config.json || fail "not Kimi-K2.5"
# BF16 weights: the reference widens the same BF16 values (specrun's activations are float32).
check kimi_k25_bf16 --arch kimi_k25 --first-k-dense 3 --q-lora-rank 64 --rope-factor 4 --seed 9 --dtype bf16

# Mixture-of-experts layers (layers 1 and 2: first_k_dense_replace 1): DeepSeek-V3's noaux_tc
# router (n_group 2, topk_group 1, a nonzero float32 e_score_correction_bias) and a shared expert.
check deepseek_v3_moe --arch deepseek_v3 --first-k-dense 1 --q-lora-rank 64 --rope-factor 4 \
  --experts 8 --n-group 2 --topk-group 1 --router-std 0.3 --seed 3 --dtype f32
check kimi_k25_moe --arch kimi_k25 --first-k-dense 1 --q-lora-rank 64 --rope-factor 4 \
  --experts 8 --experts-per-tok 3 --n-group 4 --topk-group 2 --router-std 0.3 --seed 14 \
  --dtype f32
want=$(head -n 1 deepseek_v3_moe.txt)
for ep in 0 1; do  # ep 0: the experts split over the 2 ranks; 1: every expert cut by tp
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" generate deepseek_v3_moe/target --tokens "$prompt" \
    --max-new-tokens 17 --threads 1 --ep $ep >moe_tp2_ep$ep.txt
  [[ "$(head -n 1 moe_tp2_ep$ep.txt)" == "$want" ]] || fail "MoE tp 2 ep $ep: greedy tokens differ"
done

# Tensor parallelism: the heads split (q_b, kv_b, o_proj), the latent path replicated.
want=$(head -n 1 deepseek_v3.txt)
for np in 2 4; do
  "${MPIRUN[@]}" -np $np "$SPECRUN_BIN" generate deepseek_v3/target --tokens "$prompt" \
    --max-new-tokens 17 --threads 1 >tp$np.txt
  [[ "$(head -n 1 tp$np.txt)" == "$want" ]] || fail "tp $np: greedy tokens differ from tp 1"
done

# The latent cache's size from the job log, and speculative == baseline on the MLA target.
mkdir -p models && ln -sfn ../deepseek_v3/target models/target && ln -sfn ../deepseek_v3/draft models/draft
make_prompt_file prompts.h5 6 --vocab 512
write_job job.toml job.h5 prompts.h5
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml >job.log 2>&1 || fail "the job failed: $(tail -5 job.log)"
# 3 layers x (kv_lora_rank 48 + qk_rope_head_dim 16) floats x 4 bytes.
grep -q 'target KV cache: 768 bytes per token per rank (3 layers)' job.log ||
  fail "the KV cache is not kv_lora_rank + qk_rope_head_dim floats per token and layer: $(grep 'KV cache' job.log)"
grep -q 'greedy outputs identical: 6 / 6 prompts' job.log ||
  fail "speculative output differs from baseline: $(grep greedy job.log)"
# Kimi-K2.5: the job runs its text model and says the vision tower was ignored.
rm -rf models && mkdir models && ln -sfn ../kimi_k25/target models/target &&
  ln -sfn ../kimi_k25/draft models/draft
E2E_TP=1 write_job kimi.toml kimi.h5 prompts.h5
"$SPECRUN_BIN" run kimi.toml >kimi.log 2>&1 || fail "the Kimi-K2.5 job failed: $(tail -5 kimi.log)"
grep -q 'KimiK25ForConditionalGeneration: its text model (text_config) runs; the vision tower is ignored' kimi.log ||
  fail "the Kimi-K2.5 job does not say that the vision tower was ignored"
grep -q 'greedy outputs identical: 6 / 6 prompts' kimi.log ||
  fail "Kimi-K2.5: speculative output differs from baseline: $(grep greedy kimi.log)"
echo "deepseek_reference: ok"
