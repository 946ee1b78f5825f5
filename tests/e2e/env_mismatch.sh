#!/usr/bin/env bash
# `specrun env` under mpirun: an MPMD launch where only the first 4 of 8 ranks get NCCL_PROTO
# must report the mismatch by rank (text and JSON); an 8-rank launch with one environment must
# report none; bad options exit 2. Open MPI 4.1 applies `-x` to its own application context
# only, so `-np 4 -x NCCL_PROTO=LL A : -np 4 A` exports it to ranks 0-3 alone.
set -euo pipefail

: "${SPECRUN_BIN:?SPECRUN_BIN must point to the specrun executable}"
unset NCCL_PROTO  # the outer environment must not decide the outcome
MPIRUN=(mpirun --oversubscribe)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# 1. Mismatch: ranks 0-3 have NCCL_PROTO=LL, ranks 4-7 do not.
"${MPIRUN[@]}" -np 4 -x NCCL_PROTO=LL "$SPECRUN_BIN" env : -np 4 "$SPECRUN_BIN" env >mismatch.txt
cat mismatch.txt
grep -qF 'NCCL_PROTO differs: "LL" on ranks 0-3; <unset> on ranks 4-7' mismatch.txt ||
  fail "the NCCL_PROTO mismatch was not reported with ranks 0-3 vs 4-7"
grep -qF 'environment check: 8 ranks, 1 mismatch:' mismatch.txt ||
  fail "expected exactly one mismatch among 8 ranks"
# Rank 0's record is printed: it has NCCL_PROTO in its environment listing.
grep -qE '^\[0/8\]   NCCL_PROTO=LL$' mismatch.txt || fail "rank 0's record lacks NCCL_PROTO=LL"
# Only rank 0 prints.
if grep -qE '^\[[1-7]/8\]' mismatch.txt; then fail "ranks other than 0 printed to stdout"; fi

# 2. The same launch as JSON: every rank's record and the structured mismatch.
"${MPIRUN[@]}" -np 4 -x NCCL_PROTO=LL "$SPECRUN_BIN" env --json : -np 4 "$SPECRUN_BIN" env --json \
  >mismatch.json
/usr/bin/python3 - mismatch.json <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["world_size"] == 8, doc["world_size"]
ranks = doc["ranks"]
assert [r["world_rank"] for r in ranks] == list(range(8)), [r["world_rank"] for r in ranks]
for r in ranks:
    has = r["environment"].get("NCCL_PROTO")
    assert has == ("LL" if r["world_rank"] < 4 else None), (r["world_rank"], has)
    assert r["environment"]["OMPI_COMM_WORLD_RANK"] == str(r["world_rank"])
assert len({r["pid"] for r in ranks}) == 8, "pids are not distinct"
mm = doc["mismatches"]
assert [m["name"] for m in mm] == ["NCCL_PROTO"], [m["description"] for m in mm]
values = mm[0]["values"]
assert values[0] == {"set": True, "value": "LL", "ranks": [0, 1, 2, 3], "rank_ranges": "0-3"}, values
assert values[1]["set"] is False and values[1]["ranks"] == [4, 5, 6, 7], values
print("json ok")
PY

# 3. One environment for all 8 ranks (even with NCCL_PROTO exported everywhere): no mismatch.
NCCL_PROTO=LL "${MPIRUN[@]}" -np 8 "$SPECRUN_BIN" env --all-ranks >clean.txt
tail -n 3 clean.txt
grep -qF 'environment check: 8 ranks, no mismatches' clean.txt || fail "a uniform launch reported mismatches"
if grep -q 'differs:' clean.txt; then fail "a uniform launch reported a difference"; fi
# --all-ranks: rank 0 prints all 8 records.
for r in 0 7; do
  grep -qF "process:     rank $r of 8" clean.txt || fail "--all-ranks did not print rank $r's record"
done

# 3b. An Open MPI parameter file that differs between the ranks (here two home directories, on a
# cluster a node's own /etc/openmpi): no environment variable differs, yet the parameter it sets
# is a mismatch that names the value, the file and the ranks.
mkdir -p h1/.openmpi h2/.openmpi
echo "btl_tcp_eager_limit = 65536" >h1/.openmpi/mca-params.conf
echo "btl_tcp_eager_limit = 4096" >h2/.openmpi/mca-params.conf
"${MPIRUN[@]}" -np 2 -x HOME="$PWD/h1" "$SPECRUN_BIN" env : -np 2 -x HOME="$PWD/h2" \
  "$SPECRUN_BIN" env >mcafile.txt
grep -F 'differs:' mcafile.txt
grep -qF "Open MPI config btl_tcp_eager_limit differs: \"65536 ($PWD/h1/.openmpi/mca-params.conf)\" on ranks 0-1; \"4096 ($PWD/h2/.openmpi/mca-params.conf)\" on ranks 2-3" mcafile.txt ||
  fail "the parameter file that differs between ranks is not reported"
if grep -F 'differs:' mcafile.txt | grep -q 'OMPI_MCA\|NCCL_'; then fail "an environment variable was reported"; fi
grep -qF "btl_tcp_eager_limit=65536 ($PWD/h1/.openmpi/mca-params.conf)" mcafile.txt ||
  fail "rank 0's record does not list the parameter"

# 4. A single process without mpirun works too.
"$SPECRUN_BIN" env >single.txt
grep -qF 'environment check: 1 rank, no mismatches' single.txt || fail "single-process env failed"

# 5. An unknown option is a usage error (exit 2) that names the option.
set +e
"$SPECRUN_BIN" env --bogus >bogus.out 2>bogus.err
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "unknown option exited $rc, expected 2"
grep -q -- '--bogus' bogus.err || fail "the error does not name --bogus: $(cat bogus.err)"

echo "env_mismatch: all checks passed"
