#!/usr/bin/env bash
# Real-GPU validation of the driver memory beyond plain allocations: builds
# tests/gpu/graph_memory.cu (CUDA graph memory; static and shared cudart), tests/gpu/ipc_memory.cu
# (CUDA IPC between two processes) and tests/gpu/arrays_memory.cu (CUDA arrays, external memory)
# with nvcc, runs each under `cumemtrace run` and under `compute-sanitizer --leak-check full`, and
# runs torch.compile(mode="reduce-overhead") with the default and the cudaMallocAsync allocator
# under cumemtrace; tests/gpu/validate_driver_memory.py prints the verdict table. Each step has
# its own time limit, so a hang fails its rows rather than the whole run; on a failure the logs
# under OUT are printed at the end. Exit 1 if a row fails.
# Usage: tests/gpu/validate_driver_memory.sh [PREFIX with bin/ and lib/ (default build)] [OUT]
set -u
cd "$(dirname "$0")/../.."
P=${1:-build}
OUT=${2:-/tmp/cumemtrace-driver-memory}
CT=$P/bin/cumemtrace
export PATH="$PATH:/usr/local/cuda/bin"
rm -rf "$OUT"; mkdir -p "$OUT/traces" "$OUT/sanitizer" "$OUT/logs"
fail=0

nvcc -O2 -g -o "$OUT/graph_static" tests/gpu/graph_memory.cu > "$OUT/logs/nvcc_static.txt" 2>&1 || fail=1
nvcc -O2 -g -cudart shared -o "$OUT/graph_shared" tests/gpu/graph_memory.cu > "$OUT/logs/nvcc_shared.txt" 2>&1 || fail=1
nvcc -O2 -g -o "$OUT/ipc" tests/gpu/ipc_memory.cu > "$OUT/logs/nvcc_ipc.txt" 2>&1 || fail=1
nvcc -O2 -g -o "$OUT/arrays" tests/gpu/arrays_memory.cu -lcuda > "$OUT/logs/nvcc_arrays.txt" 2>&1 || fail=1
for prog in graph_static graph_shared ipc arrays; do
  [ -x "$OUT/$prog" ] || { echo "nvcc failed for $prog:"; cat "$OUT"/logs/nvcc_*.txt; continue; }
  # The program alone first: a failure there is the program's, not cumemtrace's.
  "$OUT/$prog" > "$OUT/logs/$prog.plain.txt" 2>&1 || echo "$prog alone failed: $(cat "$OUT/logs/$prog.plain.txt")"
  timeout 120 "$CT" run -o "$OUT/traces/$prog" -- "$OUT/$prog" > "$OUT/logs/$prog.traced.txt" 2>&1
  echo "$?" > "$OUT/$prog.rc"
  timeout 120 compute-sanitizer --leak-check full "$OUT/$prog" > "$OUT/sanitizer/$prog.txt" 2>&1
done

for mode in default async; do
  conf=()
  [ "$mode" = async ] && conf=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)
  env "${conf[@]}" timeout 180 "$CT" run -o "$OUT/traces/torch_compile_$mode" -- \
    python3 tests/gpu/torch_compile_graphs.py 20 > "$OUT/logs/torch_compile_$mode.txt" 2>&1
  echo "$?" > "$OUT/torch_compile_$mode.rc"
done

printf '| %-58s | %s | %s\n' check verdict detail
python3 tests/gpu/validate_driver_memory.py "$OUT" || fail=1
if [ "$fail" != 0 ]; then
  for f in "$OUT"/logs/*.txt; do echo "== $f (last 15 lines)"; tail -15 "$f"; done
  for f in "$OUT"/sanitizer/*.txt; do echo "== $f (summary)"; grep -E "LEAK SUMMARY|ERROR SUMMARY|Leaked" "$f" | head -12; done
fi
exit "$fail"
