#!/usr/bin/env bash
# The README's test command: installs what is missing, builds if needed (scripts/build.sh),
# then runs the whole test suite with ctest. .ci/run calls it.
#   usage: scripts/test.sh [ctest arguments, e.g. -L unit or -R cpu_isa]
#   env:   BUILD_DIR (default build), SPECRUN_CMAKE_ARGS (extra CMake arguments)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/install-npm-fixtures.sh  # tokenizer and chat-template reference packages (pinned)
./scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 "$@"
