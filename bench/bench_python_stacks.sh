#!/usr/bin/env bash
# Cost of Python frames in stacks, on the fake driver: bench/python_alloc_loop.py allocates from
# a Python stack DEPTH + 2 frames deep (ctypes, GIL released, as PyTorch's bindings call), bare,
# under `cumemtrace run` with native stacks only (CUMEMTRACE_PYTHON_STACKS=0), and with the
# default native + Python stacks. Modes alternate within every round; the table gives the
# median over the rounds of the loop's wall ns per alloc+free pair and the cost per event over
# bare, (traced - bare) / 2. "python frames" is the default row less the native-only row: what
# reading the interpreter's frames adds to an event.
# Usage: bench/bench_python_stacks.sh [BUILD=build] [ROUNDS=9] [PAIRS=20000] [DEPTH=20] [BASE_PREFIX]
#   BASE_PREFIX (optional): another build or install prefix measured in the same rounds (default
#   stacks), for before/after comparisons.
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}; ROUNDS=${2:-9}; PAIRS=${3:-20000}; DEPTH=${4:-20}; BASE=${5:-}
PY=${PYTHON:-python3}
for f in "$B/bin/cumemtrace" "$B/lib/libcumemtrace.so" "$B/fake/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (build: cumemtrace cumemtrace_preload fake_cuda)"; exit 2; }
done
export LD_LIBRARY_PATH=$B/fake
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
LOOP=(bench/python_alloc_loop.py "$PAIRS" "$DEPTH")
declare -A NS
one() {  # name, then the command
  local name=$1 v
  shift
  rm -rf "$OUT/t"
  v=$("$@" 2>/dev/null | sed -nE 's/^python: ([0-9.]+) ns per.*/\1/p')
  [ -n "$v" ] || { echo "run failed: $name" >&2; return; }
  NS[$name]+="$v "
}
names=("bare" "native stacks only" "native + Python stacks")
[ -n "$BASE" ] && names+=("$BASE: native + Python")
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < ${#names[@]}; k++)); do
    m=${names[$(((k + r) % ${#names[@]}))]}
    case $m in
      bare) one "$m" "$PY" "${LOOP[@]}" ;;
      "native stacks only")
        one "$m" env CUMEMTRACE_PYTHON_STACKS=0 "$B/bin/cumemtrace" run -q -o "$OUT/t" -- "$PY" "${LOOP[@]}" ;;
      "native + Python stacks") one "$m" "$B/bin/cumemtrace" run -q -o "$OUT/t" -- "$PY" "${LOOP[@]}" ;;
      *) one "$m" env CUMEMTRACE_PRELOAD="$BASE/lib/libcumemtrace.so" "$BASE/bin/cumemtrace" run -q \
           -o "$OUT/t" -- "$PY" "${LOOP[@]}" ;;
    esac
  done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
bare=$(echo "${NS[bare]:-}" | med)
echo "pairs $PAIRS, Python depth $DEPTH + 2, $ROUNDS rounds ($($PY --version 2>&1))"
printf "| %-32s | %16s | %18s |\n" mode "ns per pair" "ns per event over bare"
printf "|%s|%s|%s|\n" "----------------------------------" "------------------" "--------------------"
for m in "${names[@]}"; do
  v=$(echo "${NS[$m]:-}" | med)
  [ -n "$v" ] || continue
  printf "| %-32s | %16.0f | %18s |\n" "$m" "$v" \
    "$([ "$m" = bare ] && echo - || awk -v a="$v" -v b="$bare" 'BEGIN{printf "%+.0f", (a-b)/2}')"
done
native=$(echo "${NS["native stacks only"]:-}" | med)
full=$(echo "${NS["native + Python stacks"]:-}" | med)
[ -n "$native" ] && [ -n "$full" ] &&
  awk -v a="$full" -v b="$native" -v d="$DEPTH" \
    'BEGIN{printf "python frames: %+.0f ns per event, %.0f ns per frame\n", (a-b)/2, (a-b)/2/(d+2)}'
