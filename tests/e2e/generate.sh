#!/usr/bin/env bash
# `specrun generate` end to end: greedy ids of the BF16 code-target on a reference prompt under
# mpirun -np 1 and 2 equal reference.json's greedy_bf16_weights; the --dump-logits file has the
# documented SRLG layout and its prompt rows match the float32 reference logits of the F32
# checkpoint within 1e-3; stories260K imported from llama2.c prints llama2.c's text; bad input
# exits 2 with a message.
set -euo pipefail

: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
SHARED="${SPECRUN_SHARED_DIR:-}"
if [[ -z "$SHARED" || ! -f "$SHARED/models/reference.json" ]]; then
  echo "shared models not found (SPECRUN_SHARED_DIR='$SHARED'): skipping"
  exit 0
fi
MODELS="$SHARED/models"
rm -rf logits.bin stories # a rerun starts clean: outputs are never silently replaced
MPIRUN=(mpirun --oversubscribe)
PY=/usr/bin/python3

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

tokens=$($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(','.join(map(str, d['prompts'][4]['tokens'])))" "$MODELS/reference.json")
want=$($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(' '.join(map(str, d['prompts'][4]['target']['greedy_bf16_weights'])))" "$MODELS/reference.json")

for np in 1 2; do
  "${MPIRUN[@]}" -np $np "$SPECRUN_BIN" generate "$MODELS/code-target" --tokens "$tokens" \
    --max-new-tokens 32 --threads 1 >out$np.txt
  cat out$np.txt
  [[ "$(head -n 1 out$np.txt)" == "$want" ]] || fail "np $np: ids differ from reference.json"
  [[ $(wc -l <out$np.txt) -ge 2 ]] || fail "np $np: no decoded text after the ids"
done

"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" generate "$MODELS/code-target-f32" --tokens "$tokens" \
  --max-new-tokens 5 --threads 1 --dump-logits logits.bin >/dev/null
$PY - "$MODELS" "$tokens" <<'PYEOF'
import json, struct, sys
import numpy as np
models, tokens = sys.argv[1], sys.argv[2].split(",")
raw = open("logits.bin", "rb").read()
assert raw[:4] == b"SRLG", raw[:4]
version, rows, vocab = struct.unpack("<III", raw[4:16])
assert version == 1 and vocab == 2048, (version, vocab)
assert rows == len(tokens) + 5 - 1, (rows, len(tokens))
assert len(raw) == 16 + rows * vocab * 4, len(raw)
got = np.frombuffer(raw[16:], dtype="<f4").reshape(rows, vocab)
blob = open(f"{models}/reference_logits.safetensors", "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
begin, end = header["target.p4"]["data_offsets"]
ref = np.frombuffer(blob[8 + n + begin:8 + n + end], dtype="<f4").reshape(header["target.p4"]["shape"])
err = float(np.abs(got[:len(tokens)] - ref).max())
print(f"dump-logits: {rows} x {vocab}, max |error| vs reference = {err:.3g}")
assert err < 1e-3, err
PYEOF

"$SPECRUN_BIN" import-llama2c "$MODELS/stories260K/stories260K.bin" stories \
  --tokenizer "$MODELS/stories260K/tok512.bin" >/dev/null
"$SPECRUN_BIN" generate stories --tokens 1 --max-new-tokens 60 >stories.txt
cat stories.txt
grep -q '^Once upon a time, there was a little girl named Lily. She loved to play outside in the park.' stories.txt ||
  fail "stories260K text differs from llama2.c's"

set +e
"$SPECRUN_BIN" generate "$MODELS/code-draft" --tokens 1,5000 >bad.txt 2>&1
code=$?
set -e
cat bad.txt
[[ $code -eq 2 ]] || fail "an out-of-vocabulary token id should exit 2, got $code"
grep -q 'token id 5000' bad.txt || fail "the error does not name the bad token id"
echo "generate e2e: ok"
