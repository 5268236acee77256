#!/usr/bin/env bash
# Plants each mutant of scripts/mutants/*.patch (a small plausible bug: an off-by-one bound, a
# comparison, a rule left out) one at a time in this tree, builds what its tests need, runs them,
# takes the mutant out again, and prints a table: mutant x CTest tests that failed on it (killed)
# or "SURVIVED". Exit 1 when a mutant survived, 2 when it could not run. Not part of CI: each
# mutant costs an incremental build. Usage: scripts/mutants.sh [BUILD (default build)] [NAME...]
# Each patch starts with its description and two lines the script reads:
#   Tests: CTest names that must kill it      Build: the targets those tests need
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
[ -f "$BUILD/CTestTestfile.cmake" ] || { echo "mutants: $BUILD is not a configured build" >&2; exit 2; }
patches=()
if [ $# -gt 0 ]; then
  for n in "$@"; do patches+=("scripts/mutants/$n.patch"); done
else
  patches=(scripts/mutants/*.patch)
fi
LOG="$BUILD/mutants"
mkdir -p "$LOG"
applied=""
restore() { [ -n "$applied" ] && git apply -R "$applied" && applied=""; }
trap 'restore; exit 2' INT TERM
trap restore EXIT
rows=()
survived=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  what=$(sed -n 's/^Mutant: //p' "$p")
  tests=$(sed -n 's/^Tests: //p' "$p")
  targets=$(sed -n 's/^Build: //p' "$p")
  files=$(sed -n 's|^+++ b/||p' "$p")
  # A file with uncommitted changes would be restored to something else: refuse.
  if ! git diff --quiet HEAD -- $files; then
    echo "mutants: $files has uncommitted changes; commit or stash them first" >&2
    exit 2
  fi
  git apply "$p" || { echo "mutants: $p does not apply to this tree" >&2; exit 2; }
  applied=$p
  if ! cmake --build "$BUILD" -j2 --target $targets > "$LOG/$name.build.log" 2>&1; then
    rows+=("$(printf '| %-26s | %-66s | %s |' "$name" "$what" "build failed (see $LOG/$name.build.log)")")
    restore
    continue
  fi
  regex="^($(echo $tests | tr ' ' '|'))\$"
  (cd "$BUILD" && ctest -R "$regex" --output-on-failure -j2) > "$LOG/$name.test.log" 2>&1
  # CTest's closing list: "The following tests FAILED:" then "  N - NAME (Failed|Timeout|...)".
  killed=$(awk '/^The following tests FAILED:/ {f = 1; next}
                f && /^[[:space:]]+[0-9]+ - / {n = $3; $1 = $2 = $3 = ""; sub(/^ +/, "");
                  printf "%s%s ", n, ($0 == "(Failed)" ? "" : " " $0)}' "$LOG/$name.test.log" | sed 's/ $//')
  if [ -z "$killed" ]; then
    killed="SURVIVED ($tests)"
    survived=$((survived + 1))
  fi
  rows+=("$(printf '| %-26s | %-66s | %s |' "$name" "$what" "$killed")")
  restore
done
# Leave the build as the tree is.
all_targets=$(sed -n 's/^Build: //p' "${patches[@]}" | tr ' ' '\n' | sort -u | tr '\n' ' ')
cmake --build "$BUILD" -j2 --target $all_targets > "$LOG/restore.build.log" 2>&1 \
  || echo "mutants: rebuilding the unmutated tree failed (see $LOG/restore.build.log)" >&2
printf '| %-26s | %-66s | %s |\n' mutant "what it breaks" "killed by (CTest)"
for r in "${rows[@]}"; do echo "$r"; done
[ "$survived" = 0 ]
