#!/usr/bin/env bash
# Installs the Debian 12 packages specrun needs to build, test and analyse results, and any
# packages given as arguments (scripts/fuzz.sh adds clang's); does nothing (and needs no network)
# when they are all installed already.
set -euo pipefail
PACKAGES=(build-essential cmake git ccache pkg-config
  openmpi-bin libopenmpi-dev openssh-client
  libhdf5-dev hdf5-tools
  libtomlplusplus-dev libboost-program-options-dev libgtest-dev nlohmann-json3-dev
  libsentencepiece-dev libpcre2-dev libutf8proc-dev libxxhash-dev
  python3 python3-h5py python3-numpy python3-matplotlib
  python3-torch python3-sentencepiece hdf5-filter-plugin
  clang-format qemu-user "$@")
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: every package is installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
