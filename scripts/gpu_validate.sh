#!/usr/bin/env bash
# Real-GPU validation: runs the CUDA programs (static cudart, shared cudart, -lcuda driver API),
# compute-sanitizer on the same binaries, PyTorch in four allocator modes with PyTorch's own
# memory history in the same process, the memory viewer CLI on converted snapshots, (with two
# GPUs) a 2-rank torchrun job, and every validator of tests/gpu (each `validate_*` file is run
# here or by a validator run here: tests/cli/gpu_validate_rows_test.sh checks that none is left
# out); prints one verdict table. Exit 1 if any row fails, a validator exits non-zero or prints
# no row. The validators run GPU_VALIDATE_JOBS at a time (default 4; 1: one by one), except those
# that need the device to themselves (they fill its memory or measure its free bytes), which run
# alone; the table lists rows in the script's order either way.
# Usage: scripts/gpu_validate.sh [PREFIX with bin/ and lib/ (default build)] [OUT]
set -u
cd "$(dirname "$0")/.."
P=${1:-build}
OUT=${2:-/tmp/cumemtrace-validate}
CT=$P/bin/cumemtrace
export PATH="$PATH:/usr/local/cuda/bin"
rm -rf "$OUT"; mkdir -p "$OUT/traces" "$OUT/sanitizer" "$OUT/logs"
ROWS="$OUT/rows.txt"; : > "$ROWS"
LOGS="$OUT/logs"
JOBS=${GPU_VALIDATE_JOBS:-4}
# row, validate (a validator that exits non-zero or prints no row is a FAIL row), verdict.
. scripts/gpu_validate_rows.sh

# 1. Portable build: nothing but glibc (and the loader) needed on this host.
for b in "$CT" "$P/lib/libcumemtrace.so"; do
  # glibc's own libraries (before glibc 2.34 libdl, libpthread and librt were separate files).
  deps=$(ldd "$b" | awk '{print $1}' | grep -vE '^(linux-vdso|/lib64/ld-linux|lib(c|m|dl|pthread|rt)\.so)' | tr '\n' ' ')
  [ -z "$deps" ] && row "ldd $(basename "$b"): glibc only" PASS "" || row "ldd $(basename "$b")" FAIL "$deps"
done

# 2. CUDA programs, traced and under compute-sanitizer.
nvcc -O2 -g -o "$OUT/ap_static" tests/gpu/alloc_patterns.cu
nvcc -O2 -g -cudart shared -o "$OUT/ap_shared" tests/gpu/alloc_patterns.cu
nvcc -O2 -g -o "$OUT/driver_api" tests/gpu/driver_api.cpp -lcuda
for prog in ap_static ap_shared driver_api; do
  "$CT" run -q -o "$OUT/traces/$prog" -- "$OUT/$prog" >/dev/null
  compute-sanitizer --leak-check full "$OUT/$prog" > "$OUT/sanitizer/$prog.txt" 2>&1
done
validate validate_cuda python3 tests/gpu/validate_cuda.py "$OUT"
if "$CT" check --max-leaked-bytes 0 "$OUT"/traces/ap_static/*.json > "$OUT/check.txt" 2>&1; then rc=0; else rc=$?; fi
grep -q load_weights "$OUT/check.txt" && [ $rc = 1 ] && row "check --max-leaked-bytes 0 flags the planted leak" PASS "exit $rc" \
  || row "check --max-leaked-bytes 0 flags the planted leak" FAIL "exit $rc: $(head -c 300 "$OUT/check.txt")"

# 3. PyTorch, four allocator modes; PyTorch's own history in the same process where it works.
for mode in default expandable async nocache; do
  case $mode in
    default) conf=(); hist=(--history "$OUT/torch_$mode.pickle") ;;
    expandable) conf=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); hist=(--history "$OUT/torch_$mode.pickle") ;;
    async) conf=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync); hist=() ;;
    nocache) conf=(PYTORCH_NO_CUDA_MEMORY_CACHING=1); hist=(--history "$OUT/torch_$mode.pickle") ;;
  esac
  # Where PyTorch's recorder keeps nothing, its GPU-trace hooks are the account to compare with.
  hooks=()
  case $mode in async|nocache) hooks=(--gpu-trace "$OUT/torch_$mode.hooks.json") ;; esac
  env "${conf[@]}" "$CT" run -q -o "$OUT/traces/torch_$mode" -- python3 tests/gpu/torch_train.py 20 "${hist[@]}" "${hooks[@]}" >/dev/null
  snap=$(ls "$OUT"/traces/torch_$mode/*.json | head -1)
  if [ ${#hist[@]} -gt 0 ]; then
    validate "validate_torch_$mode" python3 tests/gpu/validate_torch.py "$mode" "$snap" "$OUT/torch_$mode.pickle"
  fi
  if [ ${#hooks[@]} -gt 0 ]; then
    validate "validate_gpu_trace_$mode" python3 tests/gpu/validate_gpu_trace.py "$mode" "$snap" "$OUT/torch_$mode.hooks.json"
  fi
  # The snapshot opens in PyTorch's own viewer CLI after conversion.
  if "$CT" convert "$snap" --to pickle -o "$OUT/$mode.pickle" >/dev/null 2>&1 \
     && python3 -m torch.cuda._memory_viz stats "$OUT/$mode.pickle" >/dev/null 2>&1 \
     && python3 -m torch.cuda._memory_viz trace "$OUT/$mode.pickle" >/dev/null 2>&1 \
     && python3 -m torch.cuda._memory_viz trace_plot "$OUT/$mode.pickle" -o "$OUT/$mode.html" >/dev/null 2>&1; then
    row "torch $mode: _memory_viz stats/trace/trace_plot load it" PASS "$(stat -c %s "$OUT/$mode.pickle") B pickle"
  else
    row "torch $mode: _memory_viz stats/trace/trace_plot load it" FAIL "convert or _memory_viz failed"
  fi
done
py=$(python3 - "$OUT/traces/torch_nocache" <<'PY'
import glob, json, sys
d = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
hits = [e for t in d["device_traces"] for e in t if e["action"] == "alloc"
        and any(f["filename"].endswith("torch_train.py") for f in e.get("frames", []))]
print(len(hits), next((" <- ".join(f"{f['name']}:{f['line']}" for f in e["frames"] if f["filename"].endswith(".py")) for e in hits), ""))
PY
)
[ "${py%% *}" -gt 0 ] && row "Python frames (torch_train.py) on forward-pass allocations" PASS "$py" \
  || row "Python frames (torch_train.py) on forward-pass allocations" FAIL "$py"

# 4. Two GPUs: a 2-rank torchrun DDP job on NCCL.
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  "$CT" run -q -o "$OUT/traces/ddp" -- torchrun --standalone --nproc_per_node 2 tests/gpu/ddp_train.py >/dev/null 2>&1
  # Workers started by torchrun's subprocess (descriptors closed) have collectors of their own.
  for _ in $(seq 60); do [ "$(ls "$OUT"/traces/ddp/*.json 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.5; done
  sleep 1
  validate validate_ddp python3 tests/gpu/validate_ddp.py "$OUT/traces/ddp"
else
  row "torchrun 2 ranks" SKIP "one GPU on this host"
fi

# 5. Graph memory, stream-captured async allocations, IPC between two processes, arrays and
# external memory against compute-sanitizer, and CUDA graphs in PyTorch (issue 18).
alone validate_driver_memory bash tests/gpu/validate_driver_memory.sh "$P" "$OUT/driver-memory"

# 6. PyTorch's allocator merged in: block events and layouts against PyTorch's own history, the
# TraceEntry header, cudaMallocAsync pool layers, SIGKILL, allocator OOM (issue 15).
validate validate_torch_blocks python3 tests/gpu/validate_torch_blocks.py "$P" "$OUT/torch-blocks"

# 7. `whatif`: the recorded configuration reproduced, other settings' reserved peaks predicted
# within 5% of PyTorch's own (issue 43).
validate validate_whatif python3 tests/gpu/validate_whatif.py "$P" "$OUT/whatif"

# 8. The rest of tests/gpu, each its own validator: the OOM verdict, the user's terms (phases and
# categories against PyTorch's own counters), Python frames, bounded capture, live gauges, the
# CUDA context, ranks (torchrun, mp.spawn), the pytest plugin's steps, and the wheel built from
# this tree.
alone validate_oom python3 tests/gpu/validate_oom.py "$P" "$OUT/oom"
validate validate_user_terms bash tests/gpu/validate_user_terms.sh "$P" "$OUT/user-terms"
validate validate_python_frames python3 tests/gpu/validate_python_frames.py "$P"
validate validate_bounded bash tests/gpu/validate_bounded.sh "$P" "$OUT/bounded"
validate validate_metrics bash tests/gpu/validate_metrics.sh "$P" "$OUT/metrics"
validate validate_context_memory bash tests/gpu/validate_context_memory.sh "$P" "$OUT/context-memory"
validate validate_ranks bash tests/gpu/validate_ranks.sh "$P" "$OUT/ranks"
validate validate_mp_spawn bash tests/gpu/validate_mp_spawn.sh "$P" "$OUT/mp-spawn"
validate validate_pytest_steps bash tests/gpu/validate_pytest_steps.sh "$P" "$OUT/pytest-steps"
# The wheel from this tree's install (a build folder is installed first; an installed PREFIX is
# taken as it is).
tree=$P
if [ -f "$P/CMakeCache.txt" ]; then
  tree=$OUT/install
  cmake --install "$P" --prefix "$tree" > "$LOGS/install.log" 2>&1 || row "cmake --install" FAIL "$(tail -c 300 "$LOGS/install.log")"
fi
if wheel=$(python3 scripts/build_wheel.py --tree "$tree" --out "$OUT/wheel" 2> "$LOGS/build_wheel.log"); then
  validate validate_wheel bash tests/gpu/validate_wheel.sh "$wheel" "$OUT/wheel-work"
else
  row "wheel built from this tree" FAIL "$(tail -c 300 "$LOGS/build_wheel.log")"
fi

# 9. One allocator model (issue 55): under a memory fraction the program sets, a GPT-style bf16
# model's allocated/reserved peaks equal PyTorch's to the byte, the fraction is recorded, whatif
# predicts each setting's real re-run (OOM or not, reserved peak to the byte), a CUDA graph run is
# refused naming its private pool.
validate validate_allocator python3 tests/gpu/validate_allocator.py "$P" "$OUT/allocator"
# 10. The HTML pages of real runs (ledger, step axis, OOM card what-if, job and diff pages) held
# to the CLI's documents, drawn where Chromium is; the trainers (Lightning,
# transformers, accelerate, FSDP2) in the user's terms.
validate validate_html_pages python3 tests/gpu/validate_html_pages.py "$P" "$OUT/html-pages"
validate validate_trainers python3 tests/gpu/validate_trainers.py "$P" "$OUT/trainers"
# 11. By module (issue 54): per-module parameters, activations, forward and backward peaks
# against MemTracker on a GPT-style model and transformers' GPT-2; DDP's gradient buckets as
# communication buffers (one GPU, NCCL world 1).
validate validate_modules python3 tests/gpu/validate_modules.py "$P" "$OUT/modules"
validate validate_ddp_buckets python3 tests/gpu/validate_ddp_buckets.py "$P" "$OUT/ddp-buckets"
# 12. A job's first OOM (issue 58): rank 1 out of memory, rank 0 killed by torchrun.
validate validate_job_oom bash tests/gpu/validate_job_oom.sh "$P" "$OUT/job-oom"

nvidia-smi -L | head -2
verdict
