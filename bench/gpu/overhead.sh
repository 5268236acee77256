#!/usr/bin/env bash
# Real-GPU overhead table: a PyTorch training loop and a cudaMallocAsync pool-hit loop, bare and
# under cumemtrace (default stacks, native-only, no stacks), and PyTorch's own
# _record_memory_history, interleaved over ROUNDS rounds; prints medians.
# Usage: bench/gpu/overhead.sh [PREFIX with bin/ and lib/] [ROUNDS] [STEPS]
set -u
cd "$(dirname "$0")/../.."
P=${1:-build}; ROUNDS=${2:-3}; STEPS=${3:-300}
CT=$P/bin/cumemtrace
OUT=$(mktemp -d)
export PATH="$PATH:/usr/local/cuda/bin"
nvcc -O2 -o "$OUT/pair" bench/gpu/async_pool_pair.cu || exit 1
declare -A R
run() {  # name, then the command
  local name=$1; shift
  local v
  v=$("$@" 2>/dev/null | awk '/ms_per_step=/{split($2,a,"=");print a[2]} /ns_per_pair/{print $2}')
  R[$name]+="$v "
}
for ((r = 0; r < ROUNDS; r++)); do
  for mode in default async; do
    conf=""; [ $mode = async ] && conf=backend:cudaMallocAsync
    export PYTORCH_CUDA_ALLOC_CONF=$conf
    run "torch-$mode bare" python3 tests/gpu/torch_train.py "$STEPS"
    run "torch-$mode cumemtrace" "$CT" run -q -o "$OUT/t" -- python3 tests/gpu/torch_train.py "$STEPS"
    run "torch-$mode cumemtrace native-only" env CUMEMTRACE_PYTHON_STACKS=0 "$CT" run -q -o "$OUT/t" -- python3 tests/gpu/torch_train.py "$STEPS"
    run "torch-$mode cumemtrace no-stacks" "$CT" run -q -o "$OUT/t" --stack-depth 0 -- python3 tests/gpu/torch_train.py "$STEPS"
    run "torch-$mode torch-history" python3 tests/gpu/torch_train.py "$STEPS" --history "$OUT/h.pickle"
  done
  unset PYTORCH_CUDA_ALLOC_CONF
  run "async-pair bare" "$OUT/pair" 200000
  run "async-pair cumemtrace" "$CT" run -q -o "$OUT/t" -- "$OUT/pair" 200000
  run "async-pair cumemtrace depth8" "$CT" run -q -o "$OUT/t" --stack-depth 8 -- "$OUT/pair" 200000
  run "async-pair cumemtrace no-stacks" "$CT" run -q -o "$OUT/t" --stack-depth 0 -- "$OUT/pair" 200000
done
printf "%-40s %12s   %s\n" "configuration" "median" "runs"
IFS=$'\n'
for k in $(printf "%s\n" "${!R[@]}" | sort); do
  med=$(echo "${R[$k]}" | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  printf "%-40s %12s   %s\n" "$k" "$med" "${R[$k]}"
done
rm -rf "$OUT"
