#!/usr/bin/env bash
# The loop generate -> train -> run, small: a synthetic 4-layer target, a dataset job keeping
# EAGLE-3's layers and the final norm (dataset.hidden_layers = "eagle3,final"), the Python reader
# (scripts/specrun_data.py, a PyTorch DataLoader with 2 workers), scripts/train_eagle3.py for 20
# seconds, then `specrun run` with the trained head: it loads, its greedy output equals
# baseline's, and its draft vocabulary mapping (d2t) is used. Skipped (77) without python3-torch.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
"$PY" -c "import torch" 2>/dev/null || {
  echo "SKIP: python3-torch is not installed"
  exit 77
}
SCRIPTS="$E2E_DIR/../../scripts"
rm -rf w && mkdir w && cd w
"$SPECRUN_BIN" make-model models --hidden 64 --layers 4 --heads 4 --kv-heads 2 \
  --intermediate 128 --vocab 256 >/dev/null
make_prompt_file prompts.h5 60 --min-len 8 --max-len 40
write_job job.toml out.h5 prompts.h5
mkdir -p data
timeout 300 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set parallel.tp=1 \
  --set 'decode.modes=["dataset"]' --set dataset.hidden_layers=eagle3,final \
  --set decode.max_new_tokens=32 --set job.output=data/train.h5 >gen.log 2>&1 ||
  fail "generation: $(tail -5 gen.log)"
"$PY" "$SCRIPTS/specrun_data.py" data/train.h5 | tee reader.txt
grep -q '60 sequences' reader.txt || fail "specrun_data.py: $(cat reader.txt)"
"$PY" - "$SCRIPTS" <<'PY' || fail "the PyTorch Dataset does not load"
import sys
sys.path.insert(0, sys.argv[1])
import torch
from specrun_data import TorchSequences, pad_batch
ds = TorchSequences("data/train.h5")
n = 0
for b in torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=pad_batch):
    assert b["hidden"].shape[2:] == (4, 64) and b["mask"].any()
    n += b["tokens"].shape[0]
assert n == 60, n
print("DataLoader with 2 workers: 60 sequences")
PY
timeout 300 "$PY" "$SCRIPTS/train_eagle3.py" data/train.h5 models/target head --minutes 0.33 \
  --draft-vocab 200 --batch 4 --threads 1 >train.log 2>&1 || fail "training: $(tail -5 train.log)"
tail -3 train.log
[ -f head/config.json ] && [ -f head/model.safetensors ] || fail "no head written"
timeout 300 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run job.toml --set draft.kind=eagle3 \
  --set draft.path=head --set decode.draft_len=3 --set job.output=run.h5 >run.log 2>&1 ||
  fail "specrun run with the trained head: $(tail -5 run.log)"
grep -qE 'greedy outputs identical: ([0-9]+) / \1 prompts' run.log || fail "run: $(tail -30 run.log)"
grep -E '^speculative ' run.log
echo "train_eagle3: generate -> train -> run closed"
