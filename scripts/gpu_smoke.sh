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
# Where the 2 MiB allocation of load_weights() and a forward-pass allocation were made.
python3 - "$OUT" <<'PY'
import glob, json, sys
out = sys.argv[1]
for name in ("t_static", "t_shared"):
    for f in glob.glob(f"{out}/{name}/*.json"):
        seg = next(s for s in json.load(open(f))["segments"] if s["total_size"] == 2 << 20)
        print(name, "2 MiB allocation:", " <- ".join(f"{x['name']}({x['filename'].split('/')[-1]}:{x['line']})" for x in seg["frames"][:6]))
for f in glob.glob(f"{out}/t_torch_nocache/*.json"):
    d = json.load(open(f))
    for tr in d["device_traces"]:
        for e in tr:
            fr = e.get("frames", [])
            py = [x for x in fr if x["filename"].endswith("torch_train.py")]
            if e["action"] == "alloc" and py:
                print("torch forward-pass allocation:", e["size"], "bytes;", " <- ".join(f"{x['name']}:{x['line']}" for x in py))
                print("   full stack:", " <- ".join(x["name"][:50] for x in fr[:14]))
                raise SystemExit
PY
