#!/usr/bin/env bash
# Builds cumemtrace with warnings as errors and runs every test (unit, end-to-end on the fake
# driver, schema validation). Tests labelled `gpu` run only where an NVIDIA GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
CUMEMTRACE_WERROR=ON scripts/setup.sh build
cd build
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ctest --output-on-failure -j2
else
  ctest --output-on-failure -j2 -LE gpu
fi
