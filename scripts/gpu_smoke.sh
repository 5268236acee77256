#!/usr/bin/env bash
# Real-GPU smoke run: traces an nvcc-built program (static and shared cudart) and a PyTorch
# training loop under the default allocator, expandable segments and cudaMallocAsync, then prints
# one summary line per snapshot. Usage: scripts/gpu_smoke.sh [PREFIX (has bin/ and lib/)] [OUT]
set -u
cd "$(dirname "$0")/.."
P=${1:-build}
OUT=${2:-/tmp/cumemtrace-gpu}
CT=$P/bin/cumemtrace
export PATH="$PATH:/usr/local/cuda/bin"
rm -rf "$OUT"; mkdir -p "$OUT"
nvidia-smi -L
nvcc -O2 -g -o "$OUT/ap_static" tests/gpu/alloc_patterns.cu || exit 1
nvcc -O2 -g -cudart shared -o "$OUT/ap_shared" tests/gpu/alloc_patterns.cu || exit 1
"$CT" run -o "$OUT/t_static" -- "$OUT/ap_static"; echo "exit=$?"
"$CT" run -o "$OUT/t_shared" -- "$OUT/ap_shared"; echo "exit=$?"
LD_PRELOAD=$P/lib/libcumemtrace.so CUMEMTRACE_OUTPUT="$OUT/t_plain" "$OUT/ap_static"; echo "exit=$?"
sleep 1
for mode in default expandable async nocache; do
  case $mode in
    default) env=() ;;
    expandable) env=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
    async) env=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) ;;
    nocache) env=(PYTORCH_NO_CUDA_MEMORY_CACHING=1) ;;
  esac
  env "${env[@]}" python3 tests/gpu/torch_train.py 20
  env "${env[@]}" "$CT" run -o "$OUT/t_torch_$mode" -- python3 tests/gpu/torch_train.py 20; echo "exit=$?"
done
python3 tests/gpu/summarize_snapshot.py "$OUT"/t_*/*.json
