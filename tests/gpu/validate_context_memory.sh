#!/usr/bin/env bash
# Real-GPU validation of CUDA context memory measured at creation (issue 18 item 4): runs
# tests/gpu/context_memory.cu (runtime: the primary context through cudaFree(0); driver:
# cuCtxCreate + cuCtxDestroy) and tests/gpu/context_memory_probe.py (PyTorch, CuPy) under
# `cumemtrace run`. Each program asks nvidia-smi what it holds right after creating its context,
# before allocating; tests/gpu/validate_context_memory.py compares that with the context bytes
# the snapshot recorded, and prints the untracked remainder at exit before the split (untracked)
# and after it (other untracked). Exit 1 if a row fails. About a minute; no network.
# Usage: tests/gpu/validate_context_memory.sh PREFIX [OUT]
#   PREFIX has bin/cumemtrace, lib/libcumemtrace.so, lib/cumemtrace/python
set -u
cd "$(dirname "$0")/../.."
P=${1:?usage: validate_context_memory.sh PREFIX [OUT]}
OUT=${2:-/tmp/cumemtrace-context-memory}
CT=$P/bin/cumemtrace
export PATH="$PATH:/usr/local/cuda/bin"
rm -rf "$OUT"; mkdir -p "$OUT/traces" "$OUT/logs"
fail=0

nvcc -O2 -o "$OUT/context_memory" tests/gpu/context_memory.cu -lcuda \
  > "$OUT/logs/nvcc.txt" 2>&1 || { fail=1; cat "$OUT/logs/nvcc.txt"; }
run() {  # NAME COMMAND...
  local name=$1; shift
  timeout 120 "$CT" run -o "$OUT/traces/$name" -- "$@" > "$OUT/logs/$name.txt" 2>&1
  echo "$?" > "$OUT/$name.rc"
}
[ -x "$OUT/context_memory" ] && run runtime "$OUT/context_memory" runtime
[ -x "$OUT/context_memory" ] && run driver "$OUT/context_memory" driver
run torch python3 tests/gpu/context_memory_probe.py torch
run cupy python3 tests/gpu/context_memory_probe.py cupy

python3 tests/gpu/validate_context_memory.py "$OUT" "$CT" || fail=1
if [ "$fail" != 0 ]; then
  for f in "$OUT"/logs/*.txt; do echo "== $f (last 15 lines)"; tail -15 "$f"; done
fi
exit "$fail"
