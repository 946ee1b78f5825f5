#!/usr/bin/env bash
# models/code-dsv3, the trained DeepSeek-V3-architecture code model with one MTP module
# (scripts/train_deepseek.py):
# 1. model.safetensors is within 25 MB; config.json is a DeepseekV3ForCausalLM one (MLA with
#    q_lora_rank, the noaux_tc sigmoid router with groups, one MTP layer); the MTP module is at
#    model.layers.{num_hidden_layers} (enorm, hnorm, eh_proj [H, 2H], a decoder layer with an
#    MoE MLP, shared_head.norm) without its own embed_tokens / shared_head.head (the main
#    model's are shared), and every e_score_correction_bias is F32 and nonzero (trained).
# 2. On held-out reference prompts (metrics.json's reference.prompt_ids), specrun's greedy
#    tokens equal metrics.json's reference.greedy_bf16_weights (recorded by the training script
#    from the torch model in memory, not from the file), and specrun's logits at every position
#    of prompt + generated tokens agree with the independent float64 numpy forward
#    deepseek_reference.py (Hugging Face's modeling_deepseek_v3 semantics, the BF16 weights
#    widened) to a relative L2 below 1e-5, every argmax equal.
# 3. specrun's MTP logits (the module at every position, then two chain steps) agree with the
#    float64 numpy forward mtp_reference.py to a relative L2 below 1e-5, every argmax equal.
# 4. The same weights with rope_interleave false (a planted pairing error) do not give the
#    training run's greedy tokens.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
MODEL="$ROOT/models/code-dsv3"
rm -rf code_dsv3 && mkdir code_dsv3 && cd code_dsv3

size=$(stat -c %s "$MODEL/model.safetensors")
((size <= 25000000)) || fail "model.safetensors is $size bytes, over 25 MB"
"$PY" - "$MODEL" "$ROOT/../shared/prompts/code_prompts.jsonl" <<'PY' || fail "config.json, tensors or metrics.json"
import json, struct, sys
d, prompts_file = sys.argv[1:3]
c = json.load(open(d + "/config.json"))
assert c["architectures"] == ["DeepseekV3ForCausalLM"] and c["model_type"] == "deepseek_v3", c
assert c["torch_dtype"] == "bfloat16" and c["num_nextn_predict_layers"] == 1, c
assert c["q_lora_rank"] and c["topk_method"] == "noaux_tc" and c["scoring_func"] == "sigmoid", c
assert c["n_group"] > 1 and c["topk_group"] < c["n_group"] and c["n_shared_experts"] >= 1, c
assert c["first_k_dense_replace"] == 1 and c["rope_interleave"], c
f = open(d + "/model.safetensors", "rb")
header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
base = f.tell()
H, m = c["hidden_size"], c["num_hidden_layers"]
p = f"model.layers.{m}."
for name, shape in (("enorm.weight", [H]), ("hnorm.weight", [H]), ("eh_proj.weight", [H, 2 * H]),
                    ("shared_head.norm.weight", [H]), ("mlp.gate.weight", [c["n_routed_experts"], H]),
                    ("self_attn.kv_b_proj.weight", None)):
    assert p + name in header, p + name
    assert shape is None or header[p + name]["shape"] == shape, (name, header[p + name])
for name in ("embed_tokens.weight", "shared_head.head.weight"):
    assert p + name not in header, f"{p + name} is written: the main model's is shared"
assert not any(k.startswith(f"model.layers.{m + 1}.") for k in header), "a second MTP layer"
biases = [k for k in header if k.endswith("e_score_correction_bias")]
assert len(biases) == m - c["first_k_dense_replace"] + 1, biases
for k in biases:
    meta = header[k]
    assert meta["dtype"] == "F32", (k, meta)
    f.seek(base + meta["data_offsets"][0])
    vals = struct.unpack(f"<{meta['shape'][0]}f", f.read(4 * meta["shape"][0]))
    assert any(v != 0.0 for v in vals), f"{k} is all zero: not trained"
assert all(v["dtype"] == "BF16" for k, v in header.items() if k != "__metadata__" and k not in biases)
metrics = json.load(open(d + "/metrics.json"))
ref = metrics["reference"]
rows = {r["id"]: r for r in map(json.loads, open(prompts_file)) if r["category"] == "python"}
with open("cases.txt", "w") as out:
    for pid, want in list(zip(ref["prompt_ids"], ref["greedy_bf16_weights"]))[:3]:
        out.write(f"{pid} {','.join(map(str, rows[pid]['tokens']))} {','.join(map(str, want))}\n")
PY

while read -r pid prompt want; do
  n=$(tr ',' '\n' <<<"$want" | wc -l)
  "$SPECRUN_BIN" generate "$MODEL" --tokens "$prompt" --max-new-tokens "$n" --threads 2 \
    --dump-logits "p$pid.bin" >"p$pid.txt" 2>"p$pid.err" || fail "prompt $pid: $(cat "p$pid.err")"
  got=$(head -n 1 "p$pid.txt" | tr ' ' ',')
  [[ "$got" == "$want" ]] || fail "prompt $pid: specrun's greedy tokens $got, the training run's $want"
  # --min-margin 1e-6: the trained router's smallest gaps on these prompts (2.3e-6 and up) are
  # under the reference's default guard (1e-4, for random routers), and ~10x the float32 error
  # of a routing score; a flipped choice would show as a logit error far above 1e-5 anyway.
  "$PY" "$E2E_DIR/deepseek_reference.py" "$MODEL" "p$pid.bin" "$prompt,$got" --tolerance 1e-5 \
    --min-margin 1e-6 || fail "prompt $pid: specrun differs from the independent reference"
done <cases.txt
[[ $(wc -l <cases.txt) -ge 2 ]] || fail "fewer than 2 reference prompts in metrics.json"

# The MTP module: specrun's MTP logits (every pair (h_i, t_{i+1}) of prompt + 16 generated
# tokens, then two chain steps) against the float64 numpy forward mtp_reference.py.
read -r pid prompt want <cases.txt
"$SPECRUN_BIN" generate "$MODEL" --tokens "$prompt" --max-new-tokens 16 --threads 2 \
  --dump-mtp-logits mtp.bin --mtp-chain-hidden pre_norm >mtp.txt 2>mtp.err ||
  fail "MTP: $(cat mtp.err)"
"$PY" "$E2E_DIR/mtp_reference.py" "$MODEL" mtp.bin "$prompt,$(head -n 1 mtp.txt | tr ' ' ',')" \
  --chain-hidden pre_norm --tolerance 1e-5 --min-margin 1e-6 ||
  fail "the MTP module differs from the independent reference"

# A planted error: the same weights read with rope_interleave false (rotate_half on the rope
# parts as they are, the pairing a checkpoint converter can get wrong) must not give the training
# run's greedy tokens.
mkdir planted
ln -s "$MODEL"/{model.safetensors,generation_config.json,tokenizer.model,tokenizer_config.json} planted/
sed 's/"rope_interleave": true/"rope_interleave": false/' "$MODEL/config.json" >planted/config.json
grep -q '"rope_interleave": false' planted/config.json || fail "the planted config.json"
read -r pid prompt want <cases.txt
n=$(tr ',' '\n' <<<"$want" | wc -l)
"$SPECRUN_BIN" generate planted --tokens "$prompt" --max-new-tokens "$n" --threads 2 >planted.txt
[[ "$(head -n 1 planted.txt | tr ' ' ',')" != "$want" ]] ||
  fail "rope_interleave false gives the training run's tokens: the comparison sees nothing"
echo "code_dsv3: the committed checkpoint's layout, greedy tokens and logits checked"
