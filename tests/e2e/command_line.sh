#!/usr/bin/env bash
# Every subcommand's command line behaves alike (app/command_line.h), for each command that
# `specrun --help` lists:
#  - `--help` exits 0 and prints the command's usage line first;
#  - under `mpirun -np 2` it prints the same text, once, unprefixed (rank 0 alone prints help);
#    `sweep`, which runs without MPI, is checked alone;
#  - an unknown option is a usage error: exit 2, "specrun <command>: ..." and the pointer to its
#    --help, printed once.
set -euo pipefail
source "$(dirname "$0")/run_common.sh"
rm -rf w && mkdir w && cd w

commands=$("$SPECRUN_BIN" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
[[ $(wc -w <<<"$commands") -ge 13 ]] || fail "specrun --help lists too few commands: $commands"
for c in $commands; do
  "$SPECRUN_BIN" "$c" --help >"help-$c.txt" 2>&1 || fail "specrun $c --help: exit $?"
  head -1 "help-$c.txt" | grep -q "^specrun $c " || fail "specrun $c --help: $(head -1 "help-$c.txt")"
  if [[ $c != sweep ]]; then
    timeout 60 "${MPIRUN[@]}" -np 2 "$SPECRUN_BIN" "$c" --help >"help-$c-np2.txt" 2>&1 ||
      fail "mpirun -np 2 specrun $c --help: exit $?: $(tail -3 "help-$c-np2.txt")"
    cmp -s "help-$c.txt" "help-$c-np2.txt" ||
      fail "specrun $c --help under mpirun -np 2 differs from alone: $(diff "help-$c.txt" "help-$c-np2.txt" | head -5)"
  fi
  expect_exit 2 "^specrun $c: unrecognised option '--no-such-option'" "bad-$c.txt" -- \
    "$SPECRUN_BIN" "$c" --no-such-option
  grep -qx "(see \`specrun $c --help\`)" "bad-$c.txt" || fail "specrun $c: no pointer to --help"
  [[ $(grep -c 'unrecognised option' "bad-$c.txt") -eq 1 ]] || fail "specrun $c: printed twice"
done
echo "command lines of: $(echo $commands)"
