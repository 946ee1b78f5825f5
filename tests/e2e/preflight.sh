#!/usr/bin/env bash
# `specrun preflight JOB.toml` (issue 47): everything `run` does before its first step, under the
# job's own launch (mpirun -np 2 here), then a verdict, with nothing decoded and no result file
# written:
#   - a sound job: exit 0, "ready to run", no job.output, no lock file left;
#   - warnings, exit 0: a draft that is the target (by folder) or a copy of it (by content);
#   - refusals, exit 2, each naming the tensor, key, file or prompt, on every rank, never a hang;
#     checkpoints altered from make-model's real ones: an EAGLE-3 head whose aux layer is past the
#     target's last layer, whose fc is not 3 x hidden wide, whose d2t maps outside the target's
#     vocabulary, a packed head under a config without quantization_config, an EAGLE-3 head run
#     as draft.kind = "model"; a prompt outside the target's vocabulary; an existing job.output;
#     a dataset job (preflight checks decoding jobs).
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf pf && mkdir pf && cd pf

"$SPECRUN_BIN" make-model m --hidden 128 --heads 4 --kv-heads 2 --intermediate 256 --layers 4 \
  --vocab 512 --seed 3 >/dev/null
mkdir -p models && ln -sfn ../m/target models/target && ln -sfn ../m/draft models/draft
make_prompt_file prompts.h5 6 --vocab 512
write_job job.toml out.h5 prompts.h5

preflight() { # preflight LOG [--set ...]: mpirun -np 2 specrun preflight job.toml; its exit code
  local log=$1
  shift
  set +e
  timeout 120 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" preflight job.toml "$@" >"$log" 2>&1
  local rc=$?
  set -e
  [[ $rc -ne 124 ]] || fail "preflight $* hung: $(tail -3 "$log")"
  return $rc
}
refused() { # refused NAME WANT-TEXT [--set ...]: exit 2 naming WANT-TEXT
  local name=$1 want=$2
  shift 2
  local rc=0
  preflight "$name.log" "$@" || rc=$?
  [[ $rc -eq 2 ]] || fail "$name: preflight exited $rc, expected 2: $(tail -3 "$name.log")"
  grep -q -- "$want" "$name.log" || fail "$name: the refusal does not name '$want': $(grep -i error "$name.log")"
  [[ $name == output_exists || ! -e out.h5 ]] || fail "$name: preflight wrote job.output"
  echo "$name: refused naming '$want'"
}

# A sound job, then the warnings.
preflight good.log || fail "a sound job: $(tail -3 good.log)"
grep -q 'preflight e2e: ready to run 6 prompts in 2 batches .* nothing decoded, .*out.h5 not written; 0 warnings' good.log ||
  fail "no verdict: $(tail -3 good.log)"
[[ ! -e out.h5 && -z "$(ls -A | grep -i lock || true)" ]] || fail "preflight left files: $(ls)"
preflight self.log --set draft.path=models/target || fail "draft = target: $(tail -3 self.log)"
grep -q 'warning: preflight: draft.path .* is target.path' self.log || fail "$(cat self.log)"
grep -q '1 warning$' self.log || fail "$(tail -1 self.log)"
cp -r m/target copy
preflight copy.log --set draft.path=copy || fail "a copy: $(tail -3 copy.log)"
grep -q "warning: preflight: the draft model's files (.*copy) are the target's" copy.log ||
  fail "a copy of the target was not named: $(cat copy.log)"

# EAGLE-3 heads altered from make-model's.
alter_head() { # alter_head NAME PYTHON: a copy of m/eagle3 changed by PYTHON (cfg: config.json, t: tensors)
  rm -rf "$1" && cp -r m/eagle3 "$1"
  "$PY" - "$1" "$E2E_DIR" "$2" <<'PYEOF'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from quant_writer import read_raw, write_raw
d = sys.argv[1]
cfg = json.load(open(f"{d}/config.json"))
t, meta = read_raw(f"{d}/model.safetensors")
exec(sys.argv[3])
json.dump(cfg, open(f"{d}/config.json", "w"), indent=2)
write_raw(f"{d}/model.safetensors", t, meta)
PYEOF
}
eagle=(--set draft.kind=eagle3)
alter_head aux 'cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 1, 5]'
refused aux_layer 'eagle_config.eagle_aux_hidden_state_layer_ids' "${eagle[@]}" --set draft.path=aux
alter_head fc 't = [(n, d, [s[0], 2 * s[0]] if n == "fc.weight" else s, r[: len(r) * 2 // 3] if n == "fc.weight" else r) for n, d, s, r in t]'
refused fc_width "tensor 'fc.weight' .* has shape \[128, 256\], expected \[128, 384\]" "${eagle[@]}" --set draft.path=fc
alter_head d2t '
cfg["draft_vocab_size"] = 256
t = [(n, d, [256, s[1]], r[: 256 * s[1] * 2]) if n == "lm_head.weight" else (n, d, s, r) for n, d, s, r in t]
off = np.arange(256, dtype="<i8")
off[-1] = 10000
t.append(("d2t", "I64", [256], off.tobytes()))
t.append(("t2d", "BOOL", [512], np.ones(512, np.uint8).tobytes()))'
refused d2t 'd2t\[255\] = 10000 maps draft id 255 to 10255, outside the target vocabulary' "${eagle[@]}" --set draft.path=d2t
"$PY" "$E2E_DIR/quant_writer.py" m/eagle3 packed --quantize int4-g32 --quant-roles linear >/dev/null
cp m/eagle3/config.json packed/config.json
refused packed_head "'fc.weight_packed' .* is packed, but quantization_config (absent from config.json)" \
  "${eagle[@]}" --set draft.path=packed
refused kind 'draft.kind = "eagle3"' --set draft.path=m/eagle3

# The prompts, the output and the job's kind.
make_prompt_file wide.h5 4 --vocab 1000
refused prompt_vocab "prompt 0 (id 'p0'): token [0-9]* at position 0 is outside the vocabulary (512 tokens)" --set data.prompts=wide.h5
echo "a file already there" >out.h5
refused output_exists 'out.h5'
[[ "$(cat out.h5)" == "a file already there" ]] || fail "preflight touched an existing job.output"
rm -f out.h5
refused dataset_job 'specrun preflight checks decoding jobs' --set 'decode.modes=["dataset"]'
echo "preflight: ok"
