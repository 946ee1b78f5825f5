#!/usr/bin/env bash
# Small model-folder files that asked for unbounded memory or time (issue 40), from the command
# line: each exits 2 with a message naming the file, the field or the template, and nothing hangs:
#   - config.json with num_hidden_layers = 1000000000 (`generate` ended in std::bad_alloc);
#   - config.json as a FIFO (blocked for ever) and tokenizer.json linked to /dev/zero (read
#     until memory ran out);
#   - a 4 KB tokenizer.json with an added-token id of 2^30 - 1 (asked for 34 GB): it loads and
#     encodes within 2 GB of address space;
#   - a chat template with nested range(100000) loops (ran for ever).
# Each command runs under a 60 s timeout and a 2 GB address-space limit, so that without the
# bounds the test fails (exit 124, or std::bad_alloc) instead of hanging or exhausting the machine.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"

# At most 2 GB of address space: without the bounds, a command fails fast (std::bad_alloc)
# instead of taking the machine's memory.
LIMITED=(prlimit --as=2000000000)

rm -rf model tok
make_models model
target=model/target

$PY - "$target/config.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["num_hidden_layers"] = 1000000000
json.dump(d, open(sys.argv[1] + ".absurd", "w"))
PYEOF
cp "$target/config.json" config.good
cp "$target/config.json.absurd" "$target/config.json"
expect_exit 2 '"num_hidden_layers" = 1000000000 is out of range \[1, 4096\]' layers.log -- \
  "${LIMITED[@]}" "$SPECRUN_BIN" generate "$target" --tokens 1,2,3 --max-new-tokens 1 --threads 1

rm "$target/config.json" && mkfifo "$target/config.json"
expect_exit 2 "$target/config.json is a FIFO, not a regular file" config_fifo.log -- \
  "${LIMITED[@]}" "$SPECRUN_BIN" generate "$target" --tokens 1,2,3 --max-new-tokens 1 --threads 1
rm "$target/config.json" && cp config.good "$target/config.json"

mkdir -p tok
ln -sf /dev/zero tok/tokenizer.json
echo '"hello"' >in.jsonl
expect_exit 2 "tok/tokenizer.json is a character device, not a regular file" zero.log -- \
  "${LIMITED[@]}" "$SPECRUN_BIN" tokenize --model tok in.jsonl

# A byte-level tokenizer.json of 256 byte pieces and one added token whose id is 2^30 - 1.
$PY - tok/big-id.json <<'PYEOF'
import json, sys
table, n = [], 0
for b in range(256):
    printable = 33 <= b <= 126 or 0xA1 <= b <= 0xAC or b >= 0xAE
    table.append(chr(b if printable else 256 + n))
    n += 0 if printable else 1
doc = {"added_tokens": [{"id": 2**30 - 1, "content": "<big>", "single_word": False,
                         "lstrip": False, "rstrip": False, "normalized": False,
                         "special": True}],
       "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                             "trim_offsets": True, "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "vocab": {c: i for i, c in enumerate(table)}, "merges": []}}
json.dump(doc, open(sys.argv[1], "w"), ensure_ascii=False)
PYEOF
[[ $(stat -c %s tok/big-id.json) -lt 4096 ]] || fail "tok/big-id.json is not a small file"
echo '"a<big>"' >big-id.jsonl
expect_exit 0 '^\{"ids":\[97,1073741823\]\}$' big-id.log -- \
  "${LIMITED[@]}" "$SPECRUN_BIN" tokenize --tokenizer tok/big-id.json big-id.jsonl

printf '%s' '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}' \
  >loops.jinja
echo '{"messages": [{"role": "user", "content": "hi"}]}' >chat.json
expect_exit 2 "loops.jinja line 1: the render took more than 10000000 steps" loops.log -- \
  "${LIMITED[@]}" "$SPECRUN_BIN" chat-template --template loops.jinja chat.json

echo "model_folder_limits e2e: ok"
