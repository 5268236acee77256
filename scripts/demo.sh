#!/usr/bin/env bash
# The demo: installs what is missing, builds cumemtrace, traces the bundled example program and
# prints what it found. With an NVIDIA GPU (nvidia-smi and nvcc present) the example is a real
# CUDA program built with nvcc's defaults; without one it runs on the bundled fake driver.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh demo build >/dev/null
OUT=$(mktemp -d /tmp/cumemtrace-demo.XXXXXX)
export PATH="$PATH:/usr/local/cuda/bin"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then
  echo "== GPU found: tracing tests/gpu/alloc_patterns.cu built with nvcc (static cudart)"
  nvcc -O2 -g -o "$OUT/alloc_patterns" tests/gpu/alloc_patterns.cu
  TARGET=("$OUT/alloc_patterns")
else
  echo "== no GPU here: tracing the example program on cumemtrace's fake CUDA driver"
  export LD_LIBRARY_PATH="$PWD/build/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  TARGET=(build/bin/ct_static_like basic)
fi
echo "\$ cumemtrace run -o $OUT/traces -- ${TARGET[*]}"
build/bin/cumemtrace run -o "$OUT/traces" -- "${TARGET[@]}"
for f in "$OUT"/traces/*.json; do
  if build/bin/cumemtrace --help | grep -qE "^ +report"; then
    echo; echo "\$ cumemtrace report $f"
    build/bin/cumemtrace report "$f"
  fi
done
echo
echo "Snapshots are in $OUT/traces: open them at https://pytorch.org/memory_viz as they are."
