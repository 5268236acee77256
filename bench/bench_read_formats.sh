#!/usr/bin/env bash
# Reads the same snapshot as JSON and as a PyTorch-style pickle (written by Python's own pickler,
# protocol 5, as `torch.cuda.memory._dump_snapshot` does) and prints wall time and peak memory of
# each read (build/bin/read_snapshot_timed under /usr/bin/time -v).
# Usage: bench/bench_read_formats.sh [build-dir] [events]   (default 1,200,000 events: a ~100 MB
# pickle)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
EVENTS=${2:-1200000}
cmake "$BUILD" -DCUMEMTRACE_BUILD_BENCH=ON >/dev/null  # benchmarks are not in the default build
cmake --build "$BUILD" --target read_snapshot_timed -j"${JOBS:-1}" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 tests/viz/make_synthetic.py --events "$EVENTS" "$out/s.json"
python3 -c 'import json, pickle, sys
pickle.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "wb"), protocol=5)' \
  "$out/s.json" "$out/s.pickle"
for f in s.json s.pickle; do
  /usr/bin/time -v "$BUILD/bin/read_snapshot_timed" "$out/$f" 2>"$out/time.txt"
  python3 - "$out/$f" "$out/time.txt" <<'PY'
import os, re, sys
t = open(sys.argv[2]).read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
wall = re.search(r"Elapsed \(wall clock\) time.*: (.*)", t).group(1)
print(f"  {os.path.basename(sys.argv[1])}: {os.path.getsize(sys.argv[1]) / 1e6:.0f} MB, "
      f"wall {wall}, peak RSS {rss / 1024:.0f} MiB")
PY
done
