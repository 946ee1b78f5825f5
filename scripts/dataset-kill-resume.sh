#!/usr/bin/env bash
# 20 SIGKILLs at random moments of a dataset job, each followed by `run --resume`; every run must
# end bit-identical to an uninterrupted one (tests/e2e/dataset_kill_resume.sh, which ctest runs
# with 3 kills).   usage: scripts/dataset-kill-resume.sh [kills, default 20] [work dir]
set -euo pipefail
cd "$(dirname "$0")/.."
export SPECRUN_BIN=${SPECRUN_BIN:-$PWD/build/specrun}
export SPECRUN_KILLS=${1:-20}
WORK=${2:-demo-out/kill-resume}
mkdir -p "$WORK"
cd "$WORK"
bash "$OLDPWD/tests/e2e/dataset_kill_resume.sh"
