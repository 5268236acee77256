#!/usr/bin/env bash
# Recording cost per event on the fake driver, side by side in one run: cuMemAlloc+cuMemFree
# pairs (build/bin/unwind_alloc_pairs, 20 frames deep, reached the way static cudart reaches the
# driver) bare, bare again (the A/A control: the noise floor), and under `cumemtrace run` with
# stacks off and at the default depth, while the collector drains the ring concurrently. Modes
# alternate within every round; the table shows medians over the rounds of the program's own
# numbers: wall ns per pair of the whole loop, and the producer thread's CPU ns per pair (which
# leaves out time the machine gave to other processes, the collector included). "per event" is
# (traced - bare) / 2: a pair is two events. The last column is the whole command's wall time,
# start-up and the snapshot written at the end included. "coarse": `--clock coarse`, each event's
# time from CLOCK_MONOTONIC_COARSE instead of the TSC.
# Usage: [ASYNC=1] bench/bench_recording.sh [BUILD=build] [ROUNDS=15] [PAIRS=100000] [BASE_PREFIX]
#   BASE_PREFIX (optional): another build or install prefix (bin/cumemtrace, lib/libcumemtrace.so)
#   measured in the same rounds as extra rows, for before/after comparisons.
#   ASYNC=1: cuMemAllocAsync+cuMemFreeAsync pairs instead (the stream-ordered pool's path: the
#   stream's device and the pool sampler's interval check).
#   PIN="A,B": the program on CPU A, the collector (`cumemtrace run`) on CPU B. On the 2-core build
#   machine, unpinned runs are bimodal: where the scheduler puts the collector's work on the
#   program's core, the program waits for it (wall well above CPU time), and the medians of
#   identical recorders differ by 15-20 ns an event from one run to the next (seventeenth round).
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}; ROUNDS=${2:-15}; PAIRS=${3:-100000}; BASE=${4:-}
MODE=(); [ "${ASYNC:-0}" = 1 ] && MODE=(--async)
PROG=$B/bin/unwind_alloc_pairs
for f in "$PROG" "$B/bin/cumemtrace" "$B/lib/libcumemtrace.so" "$B/fake/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (build: cumemtrace cumemtrace_preload fake_cuda unwind_alloc_pairs)"; exit 2; }
done
export LD_LIBRARY_PATH=$B/fake
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
declare -A WALL CPU CMD
one() {  # name, then the command; the program prints "... : W ns per alloc+free pair (C ns CPU)"
  local name=$1 line t0 t1
  shift
  t0=$(date +%s%N)
  line=$("$@" 2>/dev/null | grep 'ns per alloc+free pair')
  t1=$(date +%s%N)
  [ -n "$line" ] || { echo "run failed: $name" >&2; return; }
  CMD[$name]+="$(((t1 - t0) / 1000000)) "
  WALL[$name]+="$(echo "$line" | sed -E 's/.*: ([0-9.]+) ns per.*/\1/') "
  CPU[$name]+="$(echo "$line" | sed -E 's/.*\(([0-9.]+) ns CPU\).*/\1/') "
}
traced() {  # prefix, depth, more options of `run`
  local prefix=$1 depth=$2
  shift 2
  rm -rf "$OUT/t"
  "${COLLECTOR_CPU[@]}" "$prefix/bin/cumemtrace" run -q -o "$OUT/t" --stack-depth "$depth" "$@" -- \
    "${PROGRAM_CPU[@]}" "$PROG" "$PAIRS" 20 "${MODE[@]}"
}
PIN=${PIN:-}; COLLECTOR_CPU=(); PROGRAM_CPU=()
if [ -n "$PIN" ]; then
  PROGRAM_CPU=(taskset -c "${PIN%%,*}"); COLLECTOR_CPU=(taskset -c "${PIN##*,}")
fi
names=("bare" "bare (A/A control)" "traced, stacks off" "traced, depth 32"
  "traced, stacks off, coarse")
[ -n "$BASE" ] && names+=("base: traced, stacks off" "base: traced, depth 32")
for ((r = 0; r < ROUNDS; r++)); do
  # Rotate the order every round so that no mode always runs first after a pause.
  for ((k = 0; k < ${#names[@]}; k++)); do
    name=${names[$(((k + r) % ${#names[@]}))]}
    case $name in
      "bare"|"bare (A/A control)") one "$name" "${PROGRAM_CPU[@]}" "$PROG" "$PAIRS" 20 "${MODE[@]}" ;;
      "traced, stacks off") one "$name" traced "$B" 0 ;;
      "traced, depth 32") one "$name" traced "$B" 32 ;;
      "traced, stacks off, coarse") one "$name" traced "$B" 0 --clock coarse ;;
      "base: traced, stacks off") one "$name" traced "$BASE" 0 ;;
      "base: traced, depth 32") one "$name" traced "$BASE" 32 ;;
    esac
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]; else print "nan"}'; }
bw=$(echo "${WALL[bare]}" | median); bc=$(echo "${CPU[bare]}" | median)
printf "%d rounds x %d %spairs%s, medians; per event = (mode - bare) / 2\n" "$ROUNDS" "$PAIRS" \
  "${MODE:+async }" "${PIN:+, program on CPU ${PIN%%,*} and collector on CPU ${PIN##*,}}"
printf "%-28s %12s %12s %16s %16s %12s\n" "mode" "wall ns/pair" "CPU ns/pair" "wall ns/event+" \
  "CPU ns/event+" "command ms"
for n in "${names[@]}"; do
  w=$(echo "${WALL[$n]:-}" | median); c=$(echo "${CPU[$n]:-}" | median)
  m=$(echo "${CMD[$n]:-}" | median)
  awk -v n="$n" -v w="$w" -v c="$c" -v bw="$bw" -v bc="$bc" -v m="$m" 'BEGIN{
    printf "%-28s %12.1f %12.1f %16.1f %16.1f %12d\n", n, w, c, (w-bw)/2, (c-bc)/2, m }'
done
echo "command ms: the whole command, with the session start and the snapshot written at the end"
