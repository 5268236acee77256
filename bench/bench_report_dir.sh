#!/usr/bin/env bash
# Issue 58's scale target: `cumemtrace report DIR` over a job's rank files, 1,024 files of 20 MB
# each in at most 60 s and 2 GiB. Makes one rank's snapshot on the fake driver (ct_static_like
# `steps STEPS`: 13,500 steps are about 20 MB), copies it as ranks 0..N-1 of one job (RANK,
# LOCAL_RANK and pid rewritten, so each is its own process), then times `report DIR` under
# /usr/bin/time (wall seconds, peak RSS) and prints one row with the target beside it.
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
mb=$(du -sm "$work/job" | cut -f1)
/usr/bin/time -f '%e %M' -o "$work/time" "$BUILD/bin/cumemtrace" report "$work/job" > "$work/out.txt"
read -r wall rss_kib < "$work/time"
grep -q "^cumemtrace report: $N processes of $N files" "$work/out.txt" || {
  echo "report DIR did not show $N processes:"; head -5 "$work/out.txt"; exit 1; }
printf 'report DIR: %d rank files, %d MB in all (%.1f MB each): %s s, peak RSS %d MiB\n' \
  "$N" "$mb" "$(echo "$mb / $N" | bc -l)" "$wall" $((rss_kib / 1024))
echo "target (issue 58): 1,024 files of 20 MB in at most 60 s and 2048 MiB"
