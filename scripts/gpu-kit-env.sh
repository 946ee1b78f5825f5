# Sourced on the GPU machine (bash): puts the GPU kit made by scripts/gpu-kit.sh to use without
# installing anything. Copied into the kit as kit-env.sh; source it from there:
#   source .gpu-kit/kit-env.sh
# Sets: PATH (the kit's programs), LD_LIBRARY_PATH (the kit's libraries, then the machine's CUDA
# libraries: cuBLAS and NCCL from the CUDA toolkit or from the pip wheels of its python3),
# Open MPI's relocation (OPAL_PREFIX and the directories under it), single-rank runs without
# mpirun (OMPI_MCA_ess_singleton_isolated), SPECRUN_SHARED_DIR (the kit's models),
# SPECRUN_PYTHON (a python3 with h5py) and SPECRUN_LAUNCH (how the tests start one rank).
# Prints what it found; KIT_ENV_OK=1 when cuBLAS and NCCL were found.
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SPECRUN_KIT=$KIT
export PATH="$KIT/bin:$PATH"

kit_find_lib() {  # kit_find_lib SONAME: the first directory holding it, or nothing
  local so=$1 d py_dirs=()
  for d in ${CUDA_HOME:-/usr/local/cuda}/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -e $d/$so ]] && { echo "$d"; return; }
  done
  while read -r d; do py_dirs+=("$d"); done < <(python3 - <<'PY' 2>/dev/null
import site, sys
for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    print(p)
PY
  )
  for d in "${py_dirs[@]}"; do
    [[ -d $d/nvidia ]] || continue
    local found
    found=$(find "$d/nvidia" -maxdepth 4 -name "$so" -printf '%h\n' 2>/dev/null | head -1)
    [[ -n $found ]] && { echo "$found"; return; }
  done
}

kit_libs="$KIT/lib"
# This kit's C++ runtime only where the machine's is older than the one the kit was built with.
kit_sys_cxx=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
if [[ -z $kit_sys_cxx ]] || ! grep -qa "$(cat "$KIT/lib/compat/GLIBCXX_NEEDED")" "$kit_sys_cxx"; then
  kit_libs="$kit_libs:$KIT/lib/compat"
  echo "kit-env: the machine's libstdc++ (${kit_sys_cxx:-none}) is older: using the kit's"
fi
KIT_ENV_OK=1
for so in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  d=$(kit_find_lib $so)
  if [[ -z $d ]]; then
    echo "kit-env: $so not found on this machine (CUDA toolkit or pip nvidia wheels)"
    KIT_ENV_OK=0
  else
    echo "kit-env: $so from $d"
    [[ ":$kit_libs:" == *":$d:"* ]] || kit_libs="$kit_libs:$d"
  fi
done
export KIT_ENV_OK
export LD_LIBRARY_PATH="$kit_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Open MPI, relocated into the kit (its build-time paths are /usr/...).
export OPAL_PREFIX="$KIT/openmpi" OPAL_EXEC_PREFIX="$KIT/openmpi" OPAL_BINDIR="$KIT/bin"
export OPAL_LIBDIR="$KIT/lib" OPAL_PKGLIBDIR="$KIT/openmpi/lib/openmpi3"
export OPAL_DATAROOTDIR="$KIT/openmpi/share" OPAL_DATADIR="$KIT/openmpi/share"
export OPAL_PKGDATADIR="$KIT/openmpi/share/openmpi" OPAL_SYSCONFDIR="$KIT/openmpi/etc"
# One rank without mpirun: a singleton that starts no daemon.
export OMPI_MCA_ess_singleton_isolated=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export SPECRUN_LAUNCH=direct
export SPECRUN_SHARED_DIR="$KIT/shared"
SPECRUN_PYTHON=$(command -v python3)
export SPECRUN_PYTHON
echo "kit-env: kit $KIT; python $SPECRUN_PYTHON"
