#!/usr/bin/env bash
# Builds cumemtrace with warnings as errors and runs every test (unit, end-to-end on the fake
# driver, schema validation), then the sanitizer stage (scripts/sanitize.sh: ASan+UBSan over the
# collector and the whole suite, TSan over the ring and recorder; CUMEMTRACE_SANITIZERS=0 skips
# it for a quick local run). Tests labelled `gpu` run only where an NVIDIA GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
CUMEMTRACE_WERROR=ON scripts/setup.sh build
(
  cd build
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    ctest --output-on-failure -j2
  else
    ctest --output-on-failure -j2 -LE gpu
  fi
)
if [ "${CUMEMTRACE_SANITIZERS:-1}" != 0 ]; then
  scripts/sanitize.sh
fi
