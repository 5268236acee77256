#!/usr/bin/env bash
# Issue 58's scale target: `cumemtrace report DIR` over a job's rank files, 1,024 files of 20 MB
# each in at most 60 s and 2 GiB. Makes one rank's snapshot on the fake driver (ct_static_like
# `steps STEPS`: 13,500 steps are about 20 MB), copies it as ranks 0..N-1 of one job (RANK,
# LOCAL_RANK and pid rewritten, so each is its own process: every rank holds the same bytes, so
# none is flagged and no snapshot is read again), writes each one's summary with the collector's
# own writer (`cumemtrace summarize DIR`, timed apart: the collector pays it once per process, at
# its end), then times `report DIR` under /usr/bin/time (wall seconds, peak RSS), from the
# summaries and, with SNAPSHOTS_TOO=1, from the snapshots alone (the same output, checked), and
# `check DIR` and `html DIR` from the summaries, and prints one row each with the target beside it.
# Usage: bench/bench_report_dir.sh [BUILD] [N] [STEPS]   (default: build 64 13500, about 1.3 GB of
# files; the target's size is N=1024, about 20 GB). Not run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${1:-build}" && pwd)
N=${2:-64}
STEPS=${3:-13500}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
env -u LD_PRELOAD LD_LIBRARY_PATH="$BUILD/fake:$BUILD/lib" RANK=0 LOCAL_RANK=0 WORLD_SIZE="$N" \
  "$BUILD/bin/cumemtrace" run -q -o "$work/one" -- "$BUILD/bin/ct_static_like" steps "$STEPS" 0
src=$(ls "$work"/one/*.json)
pid=$(grep -o '"pid":[0-9]*' "$src" | head -1 | cut -d: -f2)
mkdir "$work/job"
for ((r = 0; r < N; r++)); do
  p=$((100000 + r))
  sed -e "s/\"RANK\":\"0\"/\"RANK\":\"$r\"/" -e "s/\"LOCAL_RANK\":\"0\"/\"LOCAL_RANK\":\"$((r % 8))\"/" \
    -e "s/\"pid\":$pid,/\"pid\":$p,/" "$src" > "$work/job/ct_static_like.rank$r.$p.json"
done
mb=$(du -sm --exclude='*.summary' "$work/job" | cut -f1)
timed() {  # LABEL OUT CMD...: runs CMD under /usr/bin/time, prints the row
  local label=$1 out=$2
  shift 2
  /usr/bin/time -f '%e %M' -o "$work/time" "$@" > "$out"
  read -r wall rss_kib < "$work/time"
  printf '%s: %d rank files, %d MB in all (%.1f MB each): %s s, peak RSS %d MiB\n' \
    "$label" "$N" "$mb" "$(echo "$mb / $N" | bc -l)" "$wall" $((rss_kib / 1024))
}
report_ok() {
  grep -q "^cumemtrace report: $N processes of $N files" "$1" || {
    echo "report DIR did not show $N processes:"; head -5 "$1"; exit 1; }
}
timed "summarize DIR (the writer, once per process)" /dev/null \
  "$BUILD/bin/cumemtrace" summarize "$work/job"
[ "$(ls "$work"/job/*.summary | wc -l)" -eq "$N" ] || { echo "not $N summaries"; exit 1; }
timed "report DIR, from the summaries" "$work/out.txt" "$BUILD/bin/cumemtrace" report "$work/job"
report_ok "$work/out.txt"
timed "check DIR --max-peak-bytes 1TiB, from the summaries" "$work/check.txt" \
  "$BUILD/bin/cumemtrace" check --max-peak-bytes 1TiB "$work/job"
grep -q "^job: ok: all $N files passed" "$work/check.txt" || { tail -3 "$work/check.txt"; exit 1; }
timed "html DIR, from the summaries" /dev/null "$BUILD/bin/cumemtrace" html "$work/job" \
  -o "$work/job.html"
if [ "${SNAPSHOTS_TOO:-0}" = 1 ]; then
  mkdir "$work/alone"
  ln "$work"/job/*.json "$work/alone/"
  timed "report DIR, the snapshots alone" "$work/alone.txt" "$BUILD/bin/cumemtrace" report \
    "$work/alone"
  report_ok "$work/alone.txt"
  cmp "$work/out.txt" <(sed "s|$work/alone|$work/job|g" "$work/alone.txt") || {
    echo "report DIR differs between summaries and snapshots"; exit 1; }
fi
echo "target (issue 58): 1,024 files of 20 MB in at most 60 s and 2048 MiB"
