#!/usr/bin/env bash
# Bounded capture against keeping everything, on the fake driver: build/bin/ct_bounded with
# STEPS iterations of CHURN alloc/free pairs (default 1000 x 5000 = 10 million events, with the
# program's known growth, peak and OOM), traced by `cumemtrace run` twice: --keep bounded
# --max-disk 100MB (the default trace of the newest 100000 entries per window, one interval per
# iteration) and the default (every entry kept). Prints per mode: the total bytes of the files
# written, the number of files, the collector's max RSS (`/usr/bin/time -v` on `cumemtrace run`,
# which is the collector) and the wall time; then checks that the bounded run's peak window holds
# the 74 peak and growth blocks. Not part of CI (minutes on two cores).
# Usage: bench/bench_bounded.sh [BUILD=build] [STEPS=1000] [CHURN=5000]
set -u
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}; STEPS=${2:-1000}; CHURN=${3:-5000}
for f in "$B/bin/ct_bounded" "$B/bin/cumemtrace" "$B/lib/libcumemtrace.so" "$B/fake/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (build: cumemtrace cumemtrace_preload fake_cuda ct_bounded)"; exit 2; }
done
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (Debian package time)"; exit 2; }
export LD_LIBRARY_PATH=$B/fake
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
printf '| %-9s | %12s | %5s | %14s | %8s |\n' mode "file bytes" files "collector RSS" "wall s"
for mode in bounded all; do
  args=(--keep all); [ $mode = bounded ] && args=(--keep bounded --interval 0 --max-disk 100MB)
  /usr/bin/time -v -o "$OUT/$mode.time" "$B/bin/cumemtrace" run -q -o "$OUT/$mode" \
    "${args[@]}" -- "$B/bin/ct_bounded" "$STEPS" "$CHURN" > "$OUT/$mode.out" 2> "$OUT/$mode.err" \
    || { echo "$mode run failed:"; tail -5 "$OUT/$mode.err"; exit 1; }
  bytes=$(du -cb "$OUT/$mode"/* | tail -1 | cut -f1)
  files=$(ls "$OUT/$mode" | wc -l)
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$OUT/$mode.time")
  wall=$(awk -F': ' '/Elapsed \(wall/ {print $2}' "$OUT/$mode.time")
  printf '| %-9s | %12s | %5s | %11s KB | %8s |\n' "$mode" "$bytes" "$files" "$rss" "$wall"
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
want = {int(l.split()[1], 16) for l in open(os.path.join(out, "bounded.out")) if l.split()[0] in ("peak", "growth")}
(peak,) = glob.glob(os.path.join(out, "bounded", "*.peak-*.json"))
live = {s["address"] for s in json.load(open(peak))["segments"] if s["device"] == 0}
print("peak window holds the 74 peak and growth blocks:", "PASS" if live == want and len(want) == 74 else "FAIL")
oom = glob.glob(os.path.join(out, "bounded", "*.oom.json"))
print("OOM window kept:", "PASS" if oom else "FAIL")
PY
