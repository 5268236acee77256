#!/usr/bin/env bash
# Real-GPU cost of PyTorch block capture (issue 15): the training loop of tests/gpu/torch_train.py
# bare, under cumemtrace with block capture (the default of `cumemtrace run`), under cumemtrace at
# driver level only (CUMEMTRACE_TORCH=0), and with PyTorch's own _record_memory_history (stacks
# on), alternated over ROUNDS rounds; prints each mode's median ms per step and its cost over bare.
# Targets: cumemtrace with blocks <= 3% over bare and <= 1/3 of PyTorch's history cost.
# Usage: bench/gpu/torch_blocks_overhead.sh [PREFIX with bin/ and lib/] [ROUNDS] [STEPS]
set -u
cd "$(dirname "$0")/../.."
P=${1:-build}; ROUNDS=${2:-5}; STEPS=${3:-300}
CT=$P/bin/cumemtrace
OUT=$(mktemp -d)
RES=$OUT/results.txt
step_ms() { "$@" 2>/dev/null | awk '/ms_per_step=/{split($2,a,"=");print a[2]}'; }
for ((r = 0; r < ROUNDS; r++)); do
  echo "bare $(step_ms python3 tests/gpu/torch_train.py "$STEPS")" >>"$RES"
  echo "cumemtrace-blocks $(step_ms "$CT" run -q -o "$OUT/t" -- python3 tests/gpu/torch_train.py "$STEPS")" >>"$RES"
  echo "cumemtrace-driver $(step_ms env CUMEMTRACE_TORCH=0 "$CT" run -q -o "$OUT/t" -- python3 tests/gpu/torch_train.py "$STEPS")" >>"$RES"
  echo "torch-history $(step_ms python3 tests/gpu/torch_train.py "$STEPS" --history "$OUT/h.pickle")" >>"$RES"
done
python3 - "$RES" <<'PY'
import collections, statistics, sys
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 2:
        v[parts[0]].append(float(parts[1]))
med = {k: statistics.median(x) for k, x in v.items()}
bare = med.get("bare")
print("| mode | median ms/step | over bare |")
for k in ("bare", "cumemtrace-blocks", "cumemtrace-driver", "torch-history"):
    if k in med:
        print("| %s | %.3f | %+.2f%% |" % (k, med[k], 100 * (med[k] / bare - 1) if bare else 0))
if bare and "cumemtrace-blocks" in med and "torch-history" in med:
    ours, theirs = med["cumemtrace-blocks"] - bare, med["torch-history"] - bare
    print("cumemtrace blocks: %+.2f%% over bare (target <= 3%%), %.2f of PyTorch's history cost "
          "(target <= 0.33)" % (100 * ours / bare, ours / theirs if theirs > 0 else float("nan")))
PY
rm -rf "$OUT"
