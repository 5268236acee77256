#!/usr/bin/env bash
# Real-GPU cost of cumemtrace on a PyTorch training loop (tests/gpu/torch_train.py), mode by mode,
# with an A/A control so that the noise floor is on the same table as the costs:
#   bare, bare-again         no cumemtrace (the A/A pair: their gap is run-to-run noise)
#   blocks                   `cumemtrace run` default: driver hooks + PyTorch blocks, native +
#                            Python stacks
#   blocks-no-python         the same without Python frames (CUMEMTRACE_PYTHON_STACKS=0)
#   blocks-depth0            no stacks at all (--stack-depth 0)
#   driver                   driver hooks only (CUMEMTRACE_TORCH=0), default stacks
#   driver-depth0            driver hooks only, no stacks
#   torch-history            PyTorch's own _record_memory_history (stacks on), no cumemtrace
# Every round runs each mode once, in an order rotated by one per round (no mode always runs
# first or last); each run is a fresh process with warm-up steps before the timed ones. Prints
# per mode the median ms per step, min, max and the spread (max - min) / median, and the median's
# cost over bare; the A/A row says how large a difference noise makes. 5 rounds of 8 runs take
# about 5 minutes on an H200 (most of it process and CUDA start-up).
# Usage: bench/gpu/torch_blocks_overhead.sh [PREFIX with bin/ and lib/] [ROUNDS] [STEPS]
# TRAIN_ARGS="--model resnet18 --batch 64" times a realistic step (tens of ms) instead of the
# launch-bound default CNN; MODES="bare blocks bare-again torch-history" runs a subset.
# Then one more `blocks` run with CUMEMTRACE_DEBUG=1, whose preload sums the time record() took
# per event inside the program (preload/record/recording_meter.h): that sum per step, over the bare
# median step, is the recording's cost resolved below the A/A noise of whole runs (METER=0 skips
# it). It leaves out what recording costs the program indirectly (caches, the collector's core);
# bench/gpu/torch_blocks_ab.py measures that too, inside one process.
set -u
cd "$(dirname "$0")/../.."
P=${1:-build}; ROUNDS=${2:-5}; STEPS=${3:-300}
CT=$P/bin/cumemtrace
OUT=$(mktemp -d)
RES=$OUT/results.txt
TRAIN_SCRIPT=tests/gpu/torch_train.py
TRAIN_OPTS=${TRAIN_ARGS:-}
step_ms() { "$@" 2>/dev/null | awk '/ms_per_step=/{split($2,a,"=");print a[2]}'; }
run_mode() {
  case $1 in
    bare|bare-again) step_ms python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS ;;
    blocks) step_ms "$CT" run -q -o "$OUT/t" -- python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS ;;
    blocks-no-python)
      step_ms env CUMEMTRACE_PYTHON_STACKS=0 "$CT" run -q -o "$OUT/t" -- python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS ;;
    blocks-depth0) step_ms "$CT" run -q --stack-depth 0 -o "$OUT/t" -- python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS ;;
    driver) step_ms env CUMEMTRACE_TORCH=0 "$CT" run -q -o "$OUT/t" -- python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS ;;
    driver-depth0)
      step_ms env CUMEMTRACE_TORCH=0 "$CT" run -q --stack-depth 0 -o "$OUT/t" -- \
        python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS ;;
    torch-history) step_ms python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS --history "$OUT/h.pickle" ;;
  esac
}
# shellcheck disable=SC2206
MODES=(${MODES:-bare blocks blocks-no-python blocks-depth0 bare-again driver driver-depth0 torch-history})
N=${#MODES[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < N; k++)); do
    m=${MODES[$(((k + r) % N))]}
    echo "$m $(run_mode "$m")" >>"$RES"
  done
  rm -rf "$OUT/t"
done
if [ "${METER:-1}" != 0 ]; then
  "$CT" run -q -o "$OUT/t" -- env CUMEMTRACE_DEBUG=1 python3 $TRAIN_SCRIPT "$STEPS" $TRAIN_OPTS \
    >"$OUT/meter.txt" 2>&1
  grep -E "recording took|of which|ms_per_step" "$OUT/meter.txt" | sed 's/^/meter: /'
fi
python3 - "$RES" "$OUT/meter.txt" "$STEPS" "${MODES[@]}" <<'PY'
import collections, re, statistics, sys
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 2:
        v[parts[0]].append(float(parts[1]))
meter_path, steps, modes = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
med = {k: statistics.median(x) for k, x in v.items()}
bare = med.get("bare")
print("| mode | runs | median ms/step | min | max | spread | median over bare |")
print("|---|---|---|---|---|---|---|")
for k in modes:
    if k not in v:
        print("| %s | 0 | - | - | - | - | - |" % k)
        continue
    x = v[k]
    print("| %s | %d | %.3f | %.3f | %.3f | %.1f%% | %+.2f%% |" % (
        k, len(x), med[k], min(x), max(x), 100 * (max(x) - min(x)) / med[k],
        100 * (med[k] / bare - 1) if bare else 0))
if bare and "bare-again" in med:
    noise = abs(med["bare-again"] / bare - 1) * 100
    print("A/A (bare vs bare-again): %.2f%%: differences of that size are noise" % noise)
if bare and "blocks" in med and "torch-history" in med:
    ours, theirs = med["blocks"] - bare, med["torch-history"] - bare
    print("cumemtrace blocks: %+.2f%% over bare (target <= 3%%), %.2f of PyTorch's history cost "
          "(target <= 0.33)" % (100 * ours / bare, ours / theirs if theirs > 0 else float("nan")))
# The metered run: "recording took N ns per event for M <class>: T ms in all, ..." per class.
# Its steps are the timed ones plus torch_train.py's 3 warm-up steps (model set-up adds a few).
try:
    meter = open(meter_path).read()
except OSError:
    meter = ""
total_ms, events = 0.0, 0
for m in re.finditer(r"recording took (\d+) ns per event for (\d+) ([^:]+): ([0-9.]+) ms", meter):
    print("in-process: %s: %s ns each, %d per step" % (m.group(3), m.group(1),
                                                      int(m.group(2)) // (steps + 3)))
    total_ms += float(m.group(4))
    events += int(m.group(2))
if events and bare:
    per_step = total_ms / (steps + 3)
    print("in-process: recording took %.3f ms per step = %.2f%% of the bare step (target <= 3%%)"
          % (per_step, 100 * per_step / bare))
PY
rm -rf "$OUT"
