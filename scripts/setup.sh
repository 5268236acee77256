#!/usr/bin/env bash
# Installs what is missing (Debian packages) and builds cumemtrace into build/.
# Usage: scripts/setup.sh [build-dir]   (CUMEMTRACE_WERROR=ON for CI-strict warnings;
# CUMEMTRACE_BUILD_TYPE=Release|Debug|RelWithDebInfo, default RelWithDebInfo)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}

PACKAGES=(build-essential cmake pkg-config libspdlog-dev libfmt-dev nlohmann-json3-dev catch2
  libcli11-dev libdw-dev libelf-dev zlib1g-dev liblzma-dev libbz2-dev libzstd-dev libbenchmark-dev python3 python3-dev python3-jsonschema python3-pytest
  python3-venv python3-pytest-xdist debootstrap
  clang llvm binutils file chromium fonts-dejavu-core gdb golang-go prometheus)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "cumemtrace setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The real PyTorch for tests/torch_phases and tests/real_torch (the Python side): a venv with torch 2.11.0 from
# PyPI (with its CUDA wheels, ~3 GB), numpy and pytest. Skipped when it already imports them.
TORCH_VENV=${CUMEMTRACE_TORCH_VENV:-$HOME/.cache/cumemtrace/torch-2.11}
if ! "$TORCH_VENV/bin/python" -c 'import torch, numpy, pytest' >/dev/null 2>&1; then
  echo "cumemtrace setup: installing torch 2.11.0, numpy and pytest into $TORCH_VENV" >&2
  [ -x "$TORCH_VENV/bin/python" ] || python3 -m venv "$TORCH_VENV"
  "$TORCH_VENV/bin/python" -m pip install -q torch==2.11.0 numpy pytest
fi

if [ ! -f /usr/local/cuda/include/cuda.h ] && ! command -v nvcc >/dev/null; then
  echo "cumemtrace setup: the CUDA toolkit headers (cuda.h) are needed at build time;" \
       "install the CUDA toolkit in /usr/local/cuda" >&2
  exit 1
fi
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE="${CUMEMTRACE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCUMEMTRACE_WERROR="${CUMEMTRACE_WERROR:-OFF}" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
