#!/usr/bin/env bash
# The README's first command on a fresh Debian 12 machine (any x86-64 CPU): installs the
# packages that are missing, configures and builds the portable default (build/, one binary
# whose CPU kernels are chosen at run time), then runs the default demo (scripts/demo.sh).
#   usage: scripts/quickstart.sh [number of demo ranks, default 8]
#   env:   BUILD_DIR (default build), SPECRUN_CMAKE_ARGS (extra CMake arguments)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
SPECRUN="${BUILD_DIR:-build}/specrun" ./scripts/demo.sh "$@"
