#!/usr/bin/env bash
# Makes the GPU kit: everything a bare GPU machine needs to run tests/gpu/check.sh, beyond what a
# CUDA machine image already has (the NVIDIA driver, cuBLAS, NCCL, python3 with torch, h5py).
#
#   scripts/gpu-kit.sh [BUILD_DIR] [KIT_DIR]     (defaults: build-kit, .gpu-kit)
#
# and KIT_DIR.tar.xz, the same as one archive: what a device call carries (under 64 MiB).
#
# It builds BUILD_DIR with CUDA for Hopper (sm_90; KIT_CUDA_ARCHS overrides) when needed, then
# writes KIT_DIR:
#   bin/       specrun and the GPU test programs, stripped
#   lib/       every shared library they load that a CUDA image may lack: Open MPI, HDF5, Boost,
#              sentencepiece, PCRE2, utf8proc, OpenMP, the CUDA runtime of the build, and what
#              those need in turn (the closure of ldd); lib/compat holds this machine's libstdc++
#              and libgcc_s, used only where the GPU machine's are older
#   openmpi/   Open MPI's components, help texts and parameter file; kit-env.sh points Open MPI
#              there (OPAL_PREFIX and friends), so nothing is installed over /
#   shared/models/  the project's small real models that the GPU tests use
#   kit-env.sh sourced on the GPU machine: library path, Open MPI relocation, single-rank runs
#              without mpirun (a singleton MPI process, ess_singleton_isolated), CUDA library
#              discovery (the toolkit's lib64, else the pip wheels' nvidia/*/lib)
#   MANIFEST   commit, build flags, and every file's origin
# What the GPU machine must provide is checked here: every library a kit binary needs resolves
# either inside the kit or to the short list in DEVICE_PROVIDES below (scripts/gpu-kit-rehearse.sh
# runs the kit in a chroot that has only a base system, as the GPU machine has).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath -m "${1:-$SRC/build-kit}")
KIT=$(realpath -m "${2:-$SRC/.gpu-kit}")
SHARED=${SPECRUN_SHARED_DIR:-$SRC/../shared}
ARCHS=${KIT_CUDA_ARCHS:-90}
BINARIES=(specrun test_cuda test_cuda_ops test_cuda_kernels test_cuda_attention test_cuda_sampling test_cuda_tree_sampling test_cuda_transformer test_cuda_deepseek test_cuda_quant test_cuda_bench)
# The trained pair and its EAGLE-3 head (BF16; the f32 copies would not fit the 64 MiB a device
# call carries, and GPU-vs-CPU checks need none: both backends compute in float32).
MODELS=(code-target code-draft code-eagle3 code-eagle3-bf16)
# Libraries the GPU machine provides: glibc, the C++ runtime (used from the kit's compat/ when
# the machine's is older), the NVIDIA driver, and the big CUDA libraries (cuBLAS is 600 MB and
# NCCL 200 MB: the machine's toolkit or its pip wheels have them).
DEVICE_PROVIDES='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl|libnvidia-.*)\.so'

log() { echo "gpu-kit: $*"; }

if [[ ! -x $BUILD/specrun ]] || ! grep -q "SPECRUN_HAVE_CUDA:INTERNAL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null; then
  log "building $BUILD with CUDA (sm_$ARCHS)"
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSPECRUN_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" >/dev/null
fi
cmake --build "$BUILD" -j"${JOBS:-2}" --target "${BINARIES[@]}"

rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/lib/compat" "$KIT/openmpi/lib" "$KIT/openmpi/share" "$KIT/openmpi/etc" \
  "$KIT/shared/models" "$KIT/shared/prompts"
for b in "${BINARIES[@]}"; do
  f=$BUILD/$b
  [[ -x $f ]] || f=$BUILD/tests/$b
  [[ -x $f ]] || { echo "gpu-kit: $b not built in $BUILD" >&2; exit 1; }
  cp "$f" "$KIT/bin/$b"
  strip --strip-unneeded "$KIT/bin/$b"
done

# Open MPI: the components (dlopen'ed at MPI_Init), help texts, the parameter file.
OMPI_PKGLIB=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
OMPI_PKGDATA=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
OMPI_SYSCONF=$(ompi_info --path sysconfdir --parsable 2>/dev/null | sed -n 's/^path:sysconfdir://p')
[[ -d $OMPI_PKGLIB && -d $OMPI_PKGDATA ]] || { echo "gpu-kit: Open MPI paths not found (ompi_info)" >&2; exit 1; }
cp -a "$OMPI_PKGLIB" "$KIT/openmpi/lib/openmpi3"
cp -a "$OMPI_PKGDATA" "$KIT/openmpi/share/openmpi"
cp -a "$OMPI_SYSCONF/." "$KIT/openmpi/etc/"
# Components that need a network stack the machine lacks (InfiniBand verbs, UCX, libfabric,
# PSM) or a batch system: a one-node single-rank run uses the self, vader and tcp paths.
find "$KIT/openmpi/lib/openmpi3" -name '*.so' | while read -r c; do
  if ldd "$c" | grep -Eq 'libucp|libucs|libuct|libfabric|libibverbs|librdmacm|libpsm|libslurm|libpmi|libmunge|libcuda'; then
    rm -f "$c" "${c%.so}.la"
  fi
done

# The closure of shared libraries, copied by soname.
closure() {  # prints "soname path" for every library the ELF files need, or "soname not found"
  ldd "$@" 2>/dev/null | awk '/=>/ {print $1, $3}' | sort -u
}
elf_files=("$KIT"/bin/* "$KIT"/openmpi/lib/openmpi3/*.so)
missing=0
while read -r soname path; do
  [[ $soname =~ $DEVICE_PROVIDES ]] && continue
  if [[ $path == "not" || ! -e $path ]]; then
    echo "gpu-kit: $soname is needed but not found here" >&2
    missing=1
    continue
  fi
  cp -L "$path" "$KIT/lib/$soname"
done < <(closure "${elf_files[@]}")
# The libraries the copied ones need (two more rounds cover every chain in practice).
for round in 1 2; do
  while read -r soname path; do
    [[ $soname =~ $DEVICE_PROVIDES || -e $KIT/lib/$soname ]] && continue
    [[ -e $path ]] && cp -L "$path" "$KIT/lib/$soname"
  done < <(closure "$KIT"/lib/*.so*)
done
[[ $missing -eq 0 ]] || exit 1
cp -L /usr/local/cuda/lib64/libcudart.so.1? "$KIT/lib/" 2>/dev/null || true
for so in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(ldd "$KIT/bin/specrun" | awk -v s=$so '$1 == s {print $3}')" "$KIT/lib/compat/$so"
done
# The newest C++ runtime symbol version the kit's programs need (kit-env.sh compares).
objdump -T "$KIT"/bin/* "$KIT"/lib/*.so* 2>/dev/null | grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -uV |
  tail -1 >"$KIT/lib/compat/GLIBCXX_NEEDED"

for m in "${MODELS[@]}"; do
  [[ -f $SHARED/models/$m/config.json ]] && cp -a "$SHARED/models/$m" "$KIT/shared/models/$m"
done

[[ -f $SHARED/prompts/code_prompts.jsonl ]] && cp "$SHARED/prompts/code_prompts.jsonl" "$KIT/shared/prompts/"

cp "$SRC/scripts/gpu-kit-env.sh" "$KIT/kit-env.sh"
{
  echo "specrun GPU kit"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release; echo "$PRETTY_NAME"))"
  echo "commit: $(git -C "$SRC" rev-parse HEAD 2>/dev/null)$(git -C "$SRC" diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
  echo "cuda architectures: $ARCHS"
  echo "build: $BUILD"
  echo "open mpi: $(ompi_info --version 2>/dev/null | head -1)"
  echo "files:"
  (cd "$KIT" && find . -type f | sort | xargs du -b | awk '{printf "  %10d %s\n", $1, $2}')
} >"$KIT/MANIFEST"

# Check: inside the kit's environment every library resolves to the kit or to the list above.
bad=$(
  # shellcheck disable=SC1091
  source "$KIT/kit-env.sh" >/dev/null
  for f in "$KIT"/bin/* "$KIT"/lib/*.so* "$KIT"/openmpi/lib/openmpi3/*.so; do
    ldd "$f" 2>/dev/null | awk '/=>/ {print $1, $3}' | while read -r soname path; do
      [[ $soname =~ $DEVICE_PROVIDES ]] && continue
      [[ $path == "$KIT"/* ]] || echo "  $(basename "$f"): $soname -> $path"
    done
  done | sort -u
)
if [[ -n $bad ]]; then
  echo "gpu-kit: libraries that would come from outside the kit:" >&2
  echo "$bad" >&2
  exit 1
fi
log "kit in $KIT: $(du -sh "$KIT" | cut -f1) ($(du -sh "$KIT/lib" | cut -f1) libraries, $(du -sh "$KIT/bin" | cut -f1) programs, $(du -sh "$KIT/shared" | cut -f1) models and prompts)"
# One archive to carry (tests/gpu/check.sh --kit unpacks it with python3's tarfile, which every
# machine with python3 has, unlike zstd).
tar -C "$KIT" -cf - . | xz -T"${JOBS:-2}" -6 >"$KIT.tar.xz"
log "archive $KIT.tar.xz: $(du -sh "$KIT.tar.xz" | cut -f1)"
