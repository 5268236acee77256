#!/usr/bin/env bash
# Runs every benchmark executable (build/bin/bench_*) and prints one table: benchmark, wall time
# per iteration, and the counters each benchmark reports (events, trace entries, file MB...).
# Usage: bench/run_benchmarks.sh [build-dir]   (CUMEMTRACE_BENCH_EVENTS=N to resize bench_analysis)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
if [ ! -d "$BUILD" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=$(cd bench && grep -ho 'add_executable(bench_[a-z_0-9]*' CMakeLists.txt | sed 's/add_executable(//')
# shellcheck disable=SC2086
cmake --build "$BUILD" --target $targets -j"${JOBS:-1}" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for t in $targets; do
  "$BUILD/bin/$t" --benchmark_format=json --benchmark_out="$out/$t.json" \
    --benchmark_out_format=json >/dev/null
done
python3 - "$out" <<'PY'
import json, os, sys
rows = []
for f in sorted(os.listdir(sys.argv[1])):
    d = json.load(open(os.path.join(sys.argv[1], f)))
    for b in d["benchmarks"]:
        skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
                "iterations", "real_time", "cpu_time", "time_unit", "family_index",
                "per_family_instance_index", "aggregate_name", "aggregate_unit"}
        extra = ", ".join(f"{k}={v:,.0f}" if v >= 100 else f"{k}={v:.1f}"
                          for k, v in b.items() if k not in skip and isinstance(v, (int, float)))
        rows.append((f[:-5], b["name"], f'{b["real_time"]:,.0f} {b["time_unit"]}', extra))
w = [max(len(r[i]) for r in rows + [("executable", "benchmark", "time", "")]) for i in range(3)]
print(f'{"executable":<{w[0]}}  {"benchmark":<{w[1]}}  {"time":>{w[2]}}  counters')
for r in rows:
    print(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:>{w[2]}}  {r[3]}")
PY
