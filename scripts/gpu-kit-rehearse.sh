#!/usr/bin/env bash
# Rehearses the GPU kit (scripts/gpu-kit.sh) on this machine, in a chroot that has only what a
# bare CUDA machine has: a base Debian system with python3, numpy and h5py, and the CUDA toolkit
# (cuBLAS, NCCL) bind-mounted read-only; no Open MPI, HDF5, Boost, toml++ or build tools. Nothing
# is installed over /; the chroot lives in REHEARSE_ROOT (default /var/tmp/specrun-kit-root,
# made once with debootstrap, as root).
#
#   scripts/gpu-kit-rehearse.sh [KIT.tar.xz]      (default .gpu-kit.tar.xz, made by gpu-kit.sh)
#
# In the chroot, from a copy of the working tree as the device receives it:
#   1. every kit program and library loads (ldd: nothing "not found", nothing from outside the
#      kit but glibc, the C++ runtime and CUDA);
#   2. a CPU run through the kit: make-model, prepare, `specrun run` as a singleton MPI process
#      (no mpirun), report, and the result file read back with h5py;
#   3. tests/gpu/check.sh --kit: on a machine without a GPU every GPU test program starts and
#      skips visibly (exit 77), and summary.json and the logs come back.
# Exit status 0 when 1 and 2 pass and 3 produced its outputs with no test program failing to load.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
KIT_TAR=$(realpath "${1:-$SRC/.gpu-kit.tar.xz}")
ROOT=${REHEARSE_ROOT:-/var/tmp/specrun-kit-root}
MIRROR=${REHEARSE_MIRROR:-http://deb.debian.org/debian}
CUDA_DIR=$(readlink -f /usr/local/cuda)
[[ -f $KIT_TAR ]] || { echo "no kit archive $KIT_TAR (run scripts/gpu-kit.sh)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "the rehearsal needs root (chroot, mounts)" >&2; exit 1; }

if [[ ! -x $ROOT/usr/bin/python3 ]]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  echo "rehearse: making the base system in $ROOT (debootstrap, once)"
  debootstrap --variant=minbase --include=python3,python3-numpy,python3-h5py,procps,xz-utils \
    bookworm "$ROOT" "$MIRROR" >/tmp/rehearse-debootstrap.log 2>&1 ||
    { tail -20 /tmp/rehearse-debootstrap.log; exit 1; }
fi

mounts=()
cleanup() {
  local m
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind SRC DST [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mounts+=("$2")
  [[ ${3:-} == ro ]] && mount -o remount,bind,ro "$2"
  return 0
}
bind /proc "$ROOT/proc"
bind /sys "$ROOT/sys" ro
bind /dev "$ROOT/dev"
bind "$CUDA_DIR" "$ROOT$CUDA_DIR" ro
ln -sfn "$CUDA_DIR" "$ROOT/usr/local/cuda"

# The working tree as a device call carries it: tracked and untracked-but-not-ignored files.
WORK=$ROOT/work
rm -rf "$WORK" && mkdir -p "$WORK/repo" "$WORK/out"
(cd "$SRC" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$WORK/repo")
cp "$KIT_TAR" "$WORK/repo/.gpu-kit.tar.xz"

in_root() {
  chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
    /bin/bash -c "$1"
}

echo "rehearse: 1. the kit loads"
in_root 'set -e
mkdir -p /tmp/kit && python3 -c "import tarfile; tarfile.open(\"/work/repo/.gpu-kit.tar.xz\").extractall(\"/tmp/kit\")"
source /tmp/kit/kit-env.sh
bad=0
for f in /tmp/kit/bin/* /tmp/kit/lib/*.so* /tmp/kit/openmpi/lib/openmpi3/*.so; do
  if ldd "$f" 2>&1 | grep -q "not found"; then echo "  $f:"; ldd "$f" | grep "not found"; bad=1; fi
done
[[ $bad -eq 0 ]] && echo "  every program and library resolves"
specrun --version | head -3
exit $bad'

echo "rehearse: 2. a CPU run through the kit (singleton MPI, no mpirun)"
in_root 'set -e
source /tmp/kit/kit-env.sh >/dev/null
cd /tmp && rm -rf cpu && mkdir cpu && cd cpu
specrun make-model m --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 --vocab 256 >/dev/null
python3 -c "
import json, random
random.seed(2)
with open(\"p.jsonl\", \"w\") as f:
    for i in range(6):
        f.write(json.dumps({\"id\": f\"p{i}\", \"tokens\": [1] + [random.randint(3, 255) for _ in range(20)]}) + \"\n\")"
specrun prepare p.jsonl p.h5 >/dev/null
cat >j.toml <<TOML
[job]
name = "rehearsal"
output = "r.h5"
[target]
path = "m/target"
[draft]
kind = "model"
path = "m/draft"
[parallel]
tp = 1
threads = 1
[data]
prompts = "p.h5"
batch_size = 3
[decode]
max_new_tokens = 12
stop_at_eos = false
TOML
specrun run j.toml 2>&1 | grep -E "greedy outputs identical: 6 / 6"
specrun report r.h5 --json >r.json
python3 -c "
import h5py, json
r = json.load(open(\"r.json\"))
with h5py.File(\"r.h5\") as f:
    n = len(f[\"speculative/sequences/prompt_index\"])
assert n == 6 and r[\"greedy_identical\"] == 6, (n, r[\"greedy_identical\"])
print(\"  run, report and h5py agree: 6 prompts, greedy outputs identical\")"'

echo "rehearse: 3. tests/gpu/check.sh --kit (no GPU here)"
in_root 'cd /work/repo && OUT=/work/out WORK_DIR=/tmp/check tests/gpu/check.sh --kit .gpu-kit.tar.xz' \
  >"$WORK/check-console.log" 2>&1 || true
tail -n 15 "$WORK/check-console.log"
ok=1
for f in check.log summary.json logs.tar.gz; do
  [[ -s $WORK/out/$f ]] || { echo "rehearse: check.sh left no $f"; ok=0; }
done
mkdir -p "$WORK/logs" && tar -C "$WORK/logs" -xzf "$WORK/out/logs.tar.gz" 2>/dev/null || true
for t in test_cuda test_cuda_ops test_cuda_kernels test_cuda_attention test_cuda_sampling test_cuda_tree_sampling test_cuda_transformer test_cuda_deepseek test_cuda_quant; do
  if ! grep -q 'skipped=' "$WORK/logs/logs/$t.xml" 2>/dev/null; then
    echo "rehearse: $t wrote no GoogleTest XML (did it start?)"
    ok=0
  fi
done
[[ $ok -eq 1 ]] && echo "rehearse: passed (kit loads, runs on the CPU, check.sh runs and reports)"
[[ $ok -eq 1 ]]
