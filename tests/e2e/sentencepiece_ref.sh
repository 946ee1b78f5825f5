#!/usr/bin/env bash
# The sentencepiece path (tokenizer.model, encoded with libsentencepiece) against Debian's
# python3-sentencepiece on the code pair's tokenizer: >= 2,000 strings (hard cases: Unicode of
# many scripts, emoji, CJK, whitespace runs, numbers, code; and the Python standard library's
# files, whole and in line/paragraph chunks) encode to the same ids and decode back to the same
# text; special tokens written in the text become their ids (as transformers' LlamaTokenizer).
set -euo pipefail
# A fresh scratch folder inside the test's working directory at every run.
rm -rf scratch && mkdir scratch && cd scratch
: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
PY=/usr/bin/python3
MODEL="${SPECRUN_SHARED_DIR:-}/models/code-target/tokenizer.model"
[[ -f "$MODEL" ]] || { echo "FAIL: $MODEL not found (SPECRUN_SHARED_DIR)" >&2; exit 1; }

$PY - <<'PYEOF'
import glob, json, random
rng = random.Random(20)
hard = ["", " ", "  ", "\t", "\n", "\r\n", "a", "hello world", "Hello World", "  leading", "trailing  ",
        "ü", "naïve café", "e\u0301", "日本語のテキスト", "中文测试", "한국어", "Здравствуйте", "مرحبا بالعالم",
        "שלום", "😀", "👩‍👩‍👧‍👦", "👍🏽", "🇩🇪", "\u00a0nbsp", "\u2003em space", "x\u200bzero width",
        "3.14159", "1234567890", "1,000,000", "0x1F", "don't", "DON'T", "I'll", "it's", "def f(x):\n\treturn x",
        "    indented", "a\n\n\nb", "tabs\t\tand\t spaces", "ℌ𝔢𝔩𝔩𝔬", "\U0001F600" * 5, "ﬁ ligature", "Ａｂｃ"]
strings = list(hard)
alphabet = "abcXYZ019 _-+*/=()[]{}:;,.'\"\\\n\t#@ üé日本😀ßΩж"
while len(strings) < 600:
    strings.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
files = sorted(glob.glob("/usr/lib/python3.11/*.py"))
for path in files[:25]:
    strings.append(open(path, encoding="utf-8", errors="replace").read())
for path in files[25:200]:
    text = open(path, encoding="utf-8", errors="replace").read()
    for para in text.split("\n\n")[:12]:
        if para.strip():
            strings.append(para)
strings = [s for s in strings if "<s>" not in s and "</s>" not in s and "<unk>" not in s]
with open("corpus.jsonl", "w") as f:
    for s in strings:
        f.write(json.dumps(s) + "\n")
print(f"corpus: {len(strings)} strings, {sum(len(s) for s in strings)} characters")
assert len(strings) >= 2000, len(strings)
PYEOF

"$SPECRUN_BIN" tokenize --tokenizer "$MODEL" --no-special corpus.jsonl >ids.jsonl
"$SPECRUN_BIN" tokenize --tokenizer "$MODEL" --decode ids.jsonl >decoded.jsonl
printf '%s\n' '"x = 1</s>y<s>"' >special.jsonl
"$SPECRUN_BIN" tokenize --tokenizer "$MODEL" special.jsonl >special-ids.jsonl

$PY - "$MODEL" <<'PYEOF'
import json, sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
strings = [json.loads(l) for l in open("corpus.jsonl")]
got = [json.loads(l)["ids"] for l in open("ids.jsonl")]
decoded = [json.loads(l) for l in open("decoded.jsonl")]
assert len(got) == len(strings) == len(decoded), (len(got), len(strings), len(decoded))
bad = [i for i, s in enumerate(strings) if got[i] != sp.encode(s)]
for i in bad[:5]:
    want = sp.encode(strings[i])
    at = next((k for k in range(min(len(want), len(got[i]))) if want[k] != got[i][k]), None)
    print(f"MISMATCH {strings[i][:200]!r}: first difference at {at}: ours {got[i][at:at+8] if at is not None else got[i][-8:]} python {want[at:at+8] if at is not None else want[-8:]}")
bad_dec = [i for i, s in enumerate(strings) if decoded[i] != sp.decode(sp.encode(s))]
for i in bad_dec[:5]:
    print(f"DECODE MISMATCH {strings[i][:100]!r}: ours {decoded[i][:100]!r} python {sp.decode(sp.encode(strings[i]))[:100]!r}")
n = len(strings)
print(f"sentencepiece: {n - len(bad)}/{n} equal to python3-sentencepiece, decode {n - len(bad_dec)}/{n}")
special = json.loads(open("special-ids.jsonl").readline())["ids"]
want = [sp.bos_id()] + sp.encode("x = 1") + [sp.eos_id()] + sp.encode("y") + [sp.bos_id()]
assert special == want, (special, want)
assert not bad and not bad_dec
PYEOF
echo "sentencepiece_ref: all checks passed"
