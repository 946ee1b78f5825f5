#!/usr/bin/env bash
# Quantized checkpoints (issue 44) computed kept packed, against an independent float64 oracle:
# float models from `specrun make-model` are quantized by quant_writer.py (an independent writer
# of docs/reference.md's make-model --quantize rules: int4-g32 symmetric with BF16/F32 scales,
# int4-g128-asym with packed zero points, fp8-block e4m3 with 128x128 scale_inv blocks), then
# `specrun generate` (a 48-token prompt and 17 generated tokens: 64 positions) dumps its logits
# and quant_reference.py (which dequantizes every packed weight exactly in float64, (q - z) * s
# and e4m3(b) * s, and runs the qwen3 / moe / deepseek references on them) must agree within a
# relative L2 error of 1e-5 at every position, every argmax (the greedy tokens) equal:
#   - each format on a dense target (roles linear; int4-g32 also roles all: lm_head packed) and a
#     Qwen3-MoE target (roles experts), at tp 1, 2 and 4 (the dense one) and tp 2 with --ep 1
#     (every expert cut by tp: down_proj's columns split at a group) and --ep 0 (the experts
#     split over the ranks), shapes whose shards start at a group / block (hidden 128, head_dim
#     128, intermediate 512); the tp runs' tokens equal tp 1's;
#   - each format on a Llama with partial groups and blocks and padded words (hidden 96,
#     intermediate 84: columns not a multiple of 8, 32 or 128, rows not a multiple of 8 or 128)
#     and on a Mixtral with roles linear (attention and experts packed, the router float), tp 1;
#   - Kimi-K2.5's real layout: routed experts int4-g32, attention and shared experts BF16 (the
#     deepseek reference, tp 1 and tp 2 with ep 1 and 0), a DeepSeek-V3 with fp8 experts, and
#     one with an MTP layer whose experts are int4-g128-asym (mtp_reference.py, its logits);
#   - a tp whose shard would start inside a group / an fp8 block is refused naming the field;
#   - BF16 and F32 checkpoints across the cases (the scale dtype is the checkpoint's).
# MoE checks require every routing decision to have a margin (moe: 1e-3), so that float32
# round-off cannot pick another expert. A control per format: the FLOAT model's reference is far
# (> 1e-4) from the quantized dump, so the tolerance would see a weight not dequantized.
# quant_writer.py --self-test first (e4m3 codes and rounding, int4 packing, BF16 rounding).
# Then `specrun make-model --quantize` (the C++ writer) against quant_writer.py byte for byte, every
# format, dense / MoE / Mixtral / Kimi-K2.5 / DeepSeek-V3, BF16 and F32; and jobs at tp 2: greedy
# speculative == baseline with a quantized target and draft and with a quantized draft only, the
# result file's provenance naming the quantization, compare naming its change (exit 3).
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf quant && mkdir quant && cd quant

"$PY" "$E2E_DIR/quant_writer.py" --self-test || fail "quant_writer.py --self-test"
prompt=$("$PY" -c "import random; r = random.Random(1); \
  print(','.join(str(r.randrange(3, 512)) for _ in range(48)))")
tp_shape=(--hidden 128 --heads 4 --kv-heads 4 --head-dim 128 --layers 2 --vocab 512)
moe=(--experts 8 --experts-per-tok 2 --router-std 0.3)

declare -A options # NAME -> its make-model options (for make-model --quantize below)
float_model() { # float_model NAME MAKE-MODEL-OPTIONS...: NAME-float/target
  local name=$1
  shift
  options[$name]="$*"
  "$SPECRUN_BIN" make-model "$name-float" "$@" >/dev/null
}

# check FAMILY MODEL TAG NP [GENERATE-OPTIONS...]: generate at tp NP (mpirun when NP > 1),
# compare the dump with the reference; the tokens land in TAG.txt.
check() {
  local family=$1 model=$2 tag=$3 np=$4
  shift 4
  local run=("$SPECRUN_BIN")
  local threads=2
  if ((np > 1)); then
    run=("${MPIRUN[@]}" -np "$np" "$SPECRUN_BIN")
    threads=1
  fi
  "${run[@]}" generate "$model" --tokens "$prompt" --max-new-tokens 17 --threads $threads \
    --dump-logits "$tag.bin" "$@" >"$tag.txt" 2>"$tag.err" ||
    fail "$tag: generate failed: $(tail -3 "$tag.err")"
  local generated margin=()
  generated=$(head -n 1 "$tag.txt" | tr ' ' ',')
  [[ $family == moe ]] && margin=(--min-margin 1e-3)
  "$PY" "$E2E_DIR/quant_reference.py" "$family" "$model" "$tag.bin" "$prompt,$generated" \
    --tolerance 1e-5 "${margin[@]}" >"$tag.ref" 2>&1 ||
    fail "$tag differs from the float64 dequantizing reference: $(cat "$tag.ref")"
  echo "$tag: $(grep -o 'worst relative L2 [^ ]*' "$tag.ref")"
}

# same_tokens TAG WANT-TAG: the greedy tokens of two runs are equal.
same_tokens() {
  cmp -s <(head -n 1 "$1.txt") <(head -n 1 "$2.txt") ||
    fail "$1: greedy tokens differ from $2: $(head -n 1 "$1.txt") / $(head -n 1 "$2.txt")"
}

# float_far FAMILY FLOAT-MODEL TAG: the float model's reference is far from TAG's dump.
float_far() {
  local generated
  generated=$(head -n 1 "$3.txt" | tr ' ' ',')
  "$PY" "$E2E_DIR/quant_reference.py" "$1" "$2" "$3.bin" "$prompt,$generated" --float \
    --tolerance 1e-5 --min-margin 0 >"$3.float" 2>&1 || true
  local rel
  rel=$(grep -o 'worst relative L2 [^ ]*' "$3.float" | awk '{print $4}')
  [[ -n $rel ]] || fail "$3: the float control did not run: $(cat "$3.float")"
  "$PY" -c "import sys; sys.exit(0 if float('$rel') > 1e-4 else 1)" ||
    fail "$3: the quantized dump is within $rel of the FLOAT model: is the quantization in effect?"
}

quant() { # quant FLOAT-NAME OUT FORMAT ROLES
  "$PY" "$E2E_DIR/quant_writer.py" "$1-float/target" "$2" --quantize "$3" --quant-roles "$4" \
    >/dev/null || fail "quant_writer.py $*"
}

# The float models (BF16 and F32 across the cases).
float_model dense-bf16 --arch qwen3 "${tp_shape[@]}" --intermediate 512 --seed 5 --dtype bf16
float_model dense-f32 --arch qwen3 "${tp_shape[@]}" --intermediate 512 --seed 6 --dtype f32
float_model moe-f32 --arch qwen3_moe "${tp_shape[@]}" --intermediate 512 --moe-intermediate 512 \
  "${moe[@]}" --seed 5 --dtype f32
float_model moe-bf16 --arch qwen3_moe "${tp_shape[@]}" --intermediate 512 --moe-intermediate 512 \
  "${moe[@]}" --seed 5 --dtype bf16
float_model odd-bf16 --arch llama --hidden 96 --heads 4 --kv-heads 2 --intermediate 84 --layers 2 \
  --vocab 512 --seed 7 --dtype bf16
float_model odd-f32 --arch llama --hidden 96 --heads 4 --kv-heads 2 --intermediate 84 --layers 2 \
  --vocab 512 --seed 8 --dtype f32
float_model mixtral-bf16 --arch mixtral --hidden 96 --heads 4 --kv-heads 2 --intermediate 84 \
  --layers 2 --vocab 512 "${moe[@]}" --seed 5 --dtype bf16

# Per format: dense checkpoint dtype, MoE checkpoint dtype.
declare -A dense_dtype=([int4-g32]=bf16 [int4-g128-asym]=f32 [fp8-block]=bf16)
declare -A moe_dtype=([int4-g32]=f32 [int4-g128-asym]=bf16 [fp8-block]=f32)
declare -A odd_dtype=([int4-g32]=f32 [int4-g128-asym]=bf16 [fp8-block]=f32)
for fmt in int4-g32 int4-g128-asym fp8-block; do
  # A dense target, roles linear, at tp 1, 2 and 4.
  d=dense-${dense_dtype[$fmt]}
  quant "$d" "$d-$fmt" $fmt linear
  check qwen3 "$d-$fmt" "$d-$fmt-tp1" 1
  float_far qwen3 "$d-float/target" "$d-$fmt-tp1"
  for np in 2 4; do
    check qwen3 "$d-$fmt" "$d-$fmt-tp$np" $np
    same_tokens "$d-$fmt-tp$np" "$d-$fmt-tp1"
  done
  # A Qwen3-MoE target, roles experts, at tp 1 and tp 2 with the experts cut (ep 1) or split.
  m=moe-${moe_dtype[$fmt]}
  quant "$m" "$m-$fmt" $fmt experts
  check moe "$m-$fmt" "$m-$fmt-tp1" 1
  float_far moe "$m-float/target" "$m-$fmt-tp1"
  for ep in 1 0; do
    check moe "$m-$fmt" "$m-$fmt-tp2-ep$ep" 2 --ep $ep
    same_tokens "$m-$fmt-tp2-ep$ep" "$m-$fmt-tp1"
  done
  # Partial groups / blocks and padded words (Llama), and an MoE with roles linear, tp 1.
  o=odd-${odd_dtype[$fmt]}
  quant "$o" "$o-$fmt" $fmt linear
  check qwen3 "$o-$fmt" "$o-$fmt-tp1" 1
  quant mixtral-bf16 mixtral-bf16-$fmt $fmt linear
  check moe mixtral-bf16-$fmt mixtral-bf16-$fmt-tp1 1
done

# int4-g32 with roles all: lm_head packed too (vocab-parallel at tp 4).
quant dense-f32 dense-f32-all int4-g32 all
grep -q '"ignore": \[\]' dense-f32-all/config.json || fail "roles all: ignore is not empty"
check qwen3 dense-f32-all dense-f32-all-tp1 1
check qwen3 dense-f32-all dense-f32-all-tp4 4
same_tokens dense-f32-all-tp4 dense-f32-all-tp1

# The DeepSeek-V3 family with quantized routed experts (MLA projections stay float): Kimi-K2.5's
# layout (int4-g32, quantization_config in the outer config) and DeepSeek-V3 with fp8 experts.
ds=(--hidden 128 --heads 4 --layers 3 --intermediate 192 --vocab 512 --kv-lora-rank 48
  --qk-nope-head-dim 24 --qk-rope-head-dim 16 --v-head-dim 32 --first-k-dense 1 --q-lora-rank 64
  --rope-factor 4 --experts 8 --router-std 0.3)
float_model kimi-bf16 --arch kimi_k25 "${ds[@]}" --experts-per-tok 3 --n-group 4 --topk-group 2 \
  --seed 14 --dtype bf16
quant kimi-bf16 kimi-bf16-int4-g32 int4-g32 experts
"$PY" -c "import json, sys; c = json.load(open(sys.argv[1])); \
  assert 'quantization_config' in c and 'quantization_config' not in c['text_config']" \
  kimi-bf16-int4-g32/config.json || fail "Kimi-K2.5: quantization_config not in the outer config"
check deepseek kimi-bf16-int4-g32 kimi-bf16-int4-g32-tp1 1
float_far deepseek kimi-bf16-float/target kimi-bf16-int4-g32-tp1
for ep in 1 0; do # ep 1: each expert's down_proj split at column 32 (moe_intermediate 64)
  check deepseek kimi-bf16-int4-g32 kimi-bf16-int4-g32-tp2-ep$ep 2 --ep $ep
  same_tokens kimi-bf16-int4-g32-tp2-ep$ep kimi-bf16-int4-g32-tp1
done
float_model dsv3-f32 --arch deepseek_v3 "${ds[@]}" --n-group 2 --topk-group 1 --seed 3 --dtype f32
quant dsv3-f32 dsv3-f32-fp8-block fp8-block experts
check deepseek dsv3-f32-fp8-block dsv3-f32-fp8-block-tp1 1
# DeepSeek-V3 with an MTP layer (an MoE layer: its routed experts quantized too), int4-g128-asym:
# the model's logits and the MTP module's (mtp_reference.py) against the references.
float_model mtp-bf16 --arch deepseek_v3 "${ds[@]}" --n-group 2 --topk-group 1 --mtp-layers 1 \
  --seed 3 --dtype bf16
quant mtp-bf16 mtp-bf16-int4-g128-asym int4-g128-asym experts
check deepseek mtp-bf16-int4-g128-asym mtp-bf16-int4-g128-asym-tp1 1 --dump-mtp-logits mtp.bin
"$PY" "$E2E_DIR/quant_reference.py" mtp mtp-bf16-int4-g128-asym mtp.bin \
  "$prompt,$(head -n 1 mtp-bf16-int4-g128-asym-tp1.txt | tr ' ' ',')" --tolerance 1e-5 \
  >mtp.ref 2>&1 ||
  fail "the MTP module of mtp-bf16-int4-g128-asym differs from the reference: $(cat mtp.ref)"
echo "mtp-bf16-int4-g128-asym MTP module: $(grep -o 'worst relative L2 [^ ]*' mtp.ref)"

# A tp whose shard would start inside a scale group / an fp8 block is refused on every rank,
# naming the field (hidden 96 at tp 2: o_proj's columns and q_proj's rows start at 48).
refused() { # refused MODEL WANT-TEXT
  if "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" generate "$1" --tokens 5,6,7 --max-new-tokens 2 \
    --threads 1 >"$1.refused" 2>&1; then
    fail "$1 at tp 2: a shard inside a group / block was not refused"
  fi
  grep -q "$2" "$1.refused" ||
    fail "$1 at tp 2: the refusal does not name '$2': $(grep -i error "$1.refused")"
}
refused odd-bf16-int4-g128-asym 'group_0.weights.group_size 128'
refused odd-f32-fp8-block 'weight_block_size \[128, 128\]'
# make-model --quantize against quant_writer.py: the same model written by both (two
# implementations of docs/reference.md's rules) holds the same tensors, byte for byte (names,
# dtypes, shapes, data), and the same quantization_config; the draft is the target's first layer.
same_bytes() { # same_bytes NAME FORMAT ROLES
  local out="$1-mm-$2-$3"
  # shellcheck disable=SC2086 # the recorded options are words
  "$SPECRUN_BIN" make-model "$out" ${options[$1]} --quantize "$2" --quant-roles "$3" \
    >"$out.log" 2>&1 || fail "make-model --quantize $2 --quant-roles $3 ($1): $(cat "$out.log")"
  quant "$1" "$1-py-$2-$3" "$2" "$3"
  "$PY" - "$out/target" "$1-py-$2-$3" "$out/draft" <<'PYEOF' || fail "make-model --quantize $2 --quant-roles $3 ($1) differs from quant_writer.py"
import json, struct, sys
def tensors(path):
    raw = open(path + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}
def quant_config(path):
    c = json.load(open(path + "/config.json"))
    return c.get("quantization_config", c.get("text_config", {}).get("quantization_config"))
mine, theirs, draft = tensors(sys.argv[1]), tensors(sys.argv[2]), tensors(sys.argv[3])
bad = sorted(set(mine) ^ set(theirs))
bad += [k for k in sorted(set(mine) & set(theirs)) if mine[k] != theirs[k]]
if bad:
    sys.exit(f"tensors differ: {bad[:6]} ({len(bad)} in all)")
if quant_config(sys.argv[1]) != quant_config(sys.argv[2]):
    sys.exit(f"quantization_config differs: {quant_config(sys.argv[1])} / {quant_config(sys.argv[2])}")
packed = [k for k in mine if k.endswith(("weight_packed", "weight_scale_inv"))]
assert packed, "nothing is quantized"
assert all(draft[k] == mine[k] for k in draft if k in mine and ".layers.0." in k), "draft layer 0"
# The draft's config is its own (fp8 lists the routers of its layers only).
assert quant_config(sys.argv[3])["quant_method"] == quant_config(sys.argv[1])["quant_method"]
print(f"{sys.argv[1]}: {len(mine)} tensors ({len(packed)} quantized modules) equal")
PYEOF
}
for fmt in int4-g32 int4-g128-asym fp8-block; do
  same_bytes odd-bf16 $fmt linear
  same_bytes odd-f32 $fmt linear
  same_bytes moe-bf16 $fmt experts
done
same_bytes moe-f32 fp8-block linear        # the routers by full name in modules_to_not_convert
same_bytes mixtral-bf16 int4-g128-asym all # the router's pattern; lm_head packed
same_bytes kimi-bf16 int4-g32 experts       # Kimi-K2.5: the outer config, language_model.*
same_bytes dsv3-f32 fp8-block experts

# The result file's provenance records each model's quantization and compare names its change
# (a float and a quantized Kimi-shaped Qwen3-MoE pair, one job each).
make_prompt_file prompts.h5 4 --vocab 512
mkdir -p models
# Greedy speculative == baseline with the quantized target and draft, and with a float target
# and a quantized draft (tp 2).
for q in float mm-int4-g32-experts float:mm-fp8-block-experts; do
  target=${q%%:*} draft=${q##*:}
  ln -sfn "../moe-bf16-$target/target" models/target
  ln -sfn "../moe-bf16-$draft/draft" models/draft
  write_job "job-$q.toml" "run-$q.h5" prompts.h5
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run "job-$q.toml" >"job-$q.log" 2>&1 ||
    fail "the $q job failed: $(tail -3 "job-$q.log")"
  grep -q 'greedy outputs identical: 4 / 4 prompts' "job-$q.log" ||
    fail "$q: speculative outputs differ from the baseline: $(grep -i greedy "job-$q.log")"
done
"$PY" - run-float.h5 run-mm-int4-g32-experts.h5 <<'PYEOF' || fail "provenance: quantization not recorded"
import h5py, json, sys
def models(path):
    with h5py.File(path, "r") as f:
        return json.loads(f["provenance"].attrs["models"])
f, q = models(sys.argv[1]), models(sys.argv[2])
assert f["target"]["quantization"] == "none" and f["draft"]["quantization"] == "none", f
want = "int4: mlp.experts.{e}.down_proj, mlp.experts.{e}.gate_proj, mlp.experts.{e}.up_proj"
for role in ("target", "draft"):
    line = q[role]["quantization"]
    assert line.startswith("compressed-tensors pack-quantized: group_0 int4 group 32") and line.endswith(want), line
print("provenance:", q["target"]["quantization"])
PYEOF
set +e
"$SPECRUN_BIN" compare run-float.h5 run-mm-int4-g32-experts.h5 >compare.txt 2>&1
rc=$?
set -e
[[ $rc -eq 3 ]] || fail "compare of a float and a quantized target: exit $rc, not 3 (different experiments): $(head -3 compare.txt)"
head -n 1 compare.txt | grep -q 'target quantization' ||
  fail "compare does not name the quantization first: $(head -1 compare.txt)"
# EAGLE-3 heads quantized by their own config.json (issue 44: a packed head read as BF16 is the
# silent collapse other engines had): int4-g32 (fc and the midlayer packed), int4-g128-asym with
# lm_head packed too, fp8-block; greedy speculative == baseline at tp 2 beside a float target.
# Its file and its config disagreeing is refused naming the tensor and the field, both ways.
"$SPECRUN_BIN" make-model e3 --hidden 128 --heads 4 --kv-heads 2 --intermediate 256 --layers 4 \
  --vocab 512 --seed 9 >/dev/null
ln -sfn ../e3/target models/target
for h in int4-g32:linear int4-g128-asym:all fp8-block:linear; do
  fmt=${h%%:*} roles=${h##*:}
  "$PY" "$E2E_DIR/quant_writer.py" e3/eagle3 "e3-$fmt" --quantize "$fmt" --quant-roles "$roles" \
    >/dev/null || fail "quant_writer.py on the EAGLE-3 head ($fmt)"
  ln -sfn "../e3-$fmt" models/draft
  write_job "job-e3-$fmt.toml" "run-e3-$fmt.h5" prompts.h5
  sed -i 's/^kind = "model"/kind = "eagle3"/' "job-e3-$fmt.toml"
  "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run "job-e3-$fmt.toml" >"job-e3-$fmt.log" 2>&1 ||
    fail "the EAGLE-3 $fmt job failed: $(tail -3 "job-e3-$fmt.log")"
  grep -q 'greedy outputs identical: 4 / 4 prompts' "job-e3-$fmt.log" ||
    fail "EAGLE-3 $fmt: speculative outputs differ from the baseline"
done
mkdir -p e3-mirror e3-unsaid
cp e3/eagle3/model.safetensors e3-int4-g32/config.json e3-mirror/  # says packed, holds BF16
cp e3-int4-g32/model.safetensors e3/eagle3/config.json e3-unsaid/  # holds packed, says nothing
for bad in mirror:"'fc.weight' in .* is BF16, but quantization_config.config_groups.group_0" \
  unsaid:"'fc.weight_packed' in .* is packed, but quantization_config (absent from config.json)"; do
  ln -sfn "../e3-${bad%%:*}" models/draft
  if "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job-e3-int4-g32.toml --set job.overwrite=true \
    >"e3-${bad%%:*}.log" 2>&1; then
    fail "an EAGLE-3 head whose file and config disagree (${bad%%:*}) was run"
  fi
  grep -q "${bad#*:}" "e3-${bad%%:*}.log" ||
    fail "EAGLE-3 ${bad%%:*}: the refusal does not name the tensor and field: $(grep error "e3-${bad%%:*}.log")"
done
# DeepSeek-V3's own FP8 layout: every Linear fp8 (the MLA projections too: q_b/kv_a/kv_b are
# dequantized exactly into prepare_mla's float32 copies), lm_head BF16; and an MTP module whose
# eh_proj is int4 (roles linear) or whose head is the target's packed lm_head (roles all): the
# model's and the MTP module's logits against the references, make-model == quant_writer.py, and
# greedy speculative == baseline with draft.kind = "mtp" at tp 2.
quant dsv3-f32 dsv3-f32-fp8-linear fp8-block linear
check deepseek dsv3-f32-fp8-linear dsv3-f32-fp8-linear-tp1 1
same_bytes dsv3-f32 fp8-block linear
for h in int4-g32:linear int4-g128-asym:all; do
  fmt=${h%%:*} roles=${h##*:}
  quant mtp-bf16 "mtp-bf16-$fmt-$roles" "$fmt" "$roles"
  check deepseek "mtp-bf16-$fmt-$roles" "mtp-bf16-$fmt-$roles-tp1" 1 --dump-mtp-logits "mtp-$fmt.bin"
  "$PY" "$E2E_DIR/quant_reference.py" mtp "mtp-bf16-$fmt-$roles" "mtp-$fmt.bin" \
    "$prompt,$(head -n 1 "mtp-bf16-$fmt-$roles-tp1.txt" | tr ' ' ',')" --tolerance 1e-5 \
    >"mtp-$fmt.ref" 2>&1 || fail "the MTP module of mtp-bf16-$fmt-$roles: $(cat "mtp-$fmt.ref")"
  echo "mtp-bf16-$fmt-$roles MTP module: $(grep -o 'worst relative L2 [^ ]*' "mtp-$fmt.ref")"
  same_bytes mtp-bf16 "$fmt" "$roles"
done
ln -sfn ../mtp-bf16-int4-g32-linear models/target
write_job job-mtp.toml run-mtp.h5 prompts.h5
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job-mtp.toml --set draft.kind=mtp --set draft.path= \
  >job-mtp.log 2>&1 || fail "the quantized MTP job failed: $(tail -3 job-mtp.log)"
grep -q 'greedy outputs identical: 4 / 4 prompts' job-mtp.log ||
  fail "quantized MTP: speculative outputs differ from the baseline"
echo "quant_reference: ok"
