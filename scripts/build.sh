#!/usr/bin/env bash
# Configures (once) and builds the CPU build in BUILD_DIR (default build) with 2 jobs. The
# default is portable: -march=x86-64-v2 outside the kernels, every kernel variant inside
# (docs/performance.md, "How the build chooses kernels").
#   env: BUILD_DIR, SPECRUN_CMAKE_ARGS (extra CMake arguments, e.g. -DSPECRUN_WERROR=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
read -r -a extra <<<"${SPECRUN_CMAKE_ARGS:-}"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] || [ ${#extra[@]} -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSPECRUN_CUDA=OFF "${extra[@]}"
fi
cmake --build "$BUILD_DIR" -j2
