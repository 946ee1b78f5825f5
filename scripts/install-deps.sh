#!/usr/bin/env bash
# Installs the Debian 12 packages specrun needs to build, test and analyse results.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
  build-essential cmake git ccache pkg-config \
  openmpi-bin libopenmpi-dev openssh-client \
  libhdf5-dev hdf5-tools \
  libtomlplusplus-dev libboost-program-options-dev libgtest-dev nlohmann-json3-dev \
  python3 python3-h5py python3-numpy python3-matplotlib \
  clang-format >/dev/null
echo "install-deps: done"
