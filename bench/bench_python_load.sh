#!/usr/bin/env bash
# The Python API's load() against the CLI on one large snapshot, as JSON and as a PyTorch-style
# pickle: wall time and peak RSS (/usr/bin/time -v) of `cumemtrace report FILE --format json` and
# of `cumemtrace.load(FILE).report()` (the package from python/, with bin/ and lib/ linked to the
# build). load() reads only the first bytes, so the second should cost what the first does (issue
# 45: within 2x); `.data` is parsed only when asked for and is not part of this measure.
# Usage: bench/bench_python_load.sh [build-dir] [events]   (default 1,200,000 events)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${1:-build}" && pwd)
EVENTS=${2:-1200000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/pkg/cumemtrace"
ln -s "$PWD"/python/cumemtrace/*.py "$out/pkg/cumemtrace/"
ln -s "$BUILD/bin" "$out/pkg/cumemtrace/bin"
ln -s "$BUILD/lib" "$out/pkg/cumemtrace/lib"
python3 tests/viz/make_synthetic.py --events "$EVENTS" "$out/s.json"
python3 -c 'import json, pickle, sys
pickle.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "wb"), protocol=5)' \
  "$out/s.json" "$out/s.pickle"
measure() {  # label, command...
  local label=$1
  shift
  /usr/bin/time -v "$@" >/dev/null 2>"$out/time.txt"
  python3 - "$label" "$out/time.txt" <<'PY'
import re, sys
t = open(sys.argv[2]).read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
wall = re.search(r"Elapsed \(wall clock\) time.*: (.*)", t).group(1)
print(f"  {sys.argv[1]}: wall {wall}, peak RSS {rss / 1024:.0f} MiB")
PY
}
for f in s.json s.pickle; do
  echo "$f: $(stat -c %s "$out/$f" | awk '{printf "%.0f MB", $1 / 1e6}')"
  measure "cumemtrace report" "$BUILD/bin/cumemtrace" report "$out/$f" --format json
  # /usr/bin/time's peak RSS is the largest of the process tree's members: the CLI's here.
  measure "cumemtrace.load().report()" env PYTHONPATH="$out/pkg" python3 -c \
    'import sys, cumemtrace; cumemtrace.load(sys.argv[1]).report()' "$out/$f"
done
