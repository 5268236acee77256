#!/usr/bin/env bash
# Runs every benchmark executable (build/bin/bench_*) and prints one table: benchmark, wall time
# per iteration, and the counters each benchmark reports (events, trace entries, file MB...).
# Usage: bench/run_benchmarks.sh [build-dir]   (CUMEMTRACE_BENCH_EVENTS=N to resize bench_analysis)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
# The benchmarks are not part of the default build (CI does not build them): turn them on.
if [ ! -d "$BUILD" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUMEMTRACE_BUILD_BENCH=ON >/dev/null
else
  cmake "$BUILD" -DCUMEMTRACE_BUILD_BENCH=ON >/dev/null
fi
targets=$(cd bench && grep -ho 'add_executable(bench_[a-z_0-9]*' CMakeLists.txt | sed 's/add_executable(//')
# shellcheck disable=SC2086
cmake --build "$BUILD" --target $targets cumemtrace -j"${JOBS:-1}" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for t in $targets; do
  "$BUILD/bin/$t" --benchmark_format=json --benchmark_out="$out/$t.json" \
    --benchmark_out_format=json >/dev/null
done
# The CLI end to end on the same synthetic snapshot: what a CI job pays for report and check.
"$BUILD/bin/bench_analysis" --write-snapshot="$out/snapshot.json"
cli_time() {  # NAME COMMAND...: wall seconds of one run, as a benchmark row
  local name=$1 start end
  shift
  start=$(date +%s.%N)
  "$@" >/dev/null || [ $? -eq 1 ]  # check exits 1 when a limit fails; that is still a timing
  end=$(date +%s.%N)
  python3 -c "import json,sys; json.dump({'benchmarks':[{'name':sys.argv[1],'real_time':(float(sys.argv[3])-float(sys.argv[2]))*1000,'time_unit':'ms','MB':__import__('os').path.getsize(sys.argv[4])/1e6}]},open(sys.argv[5],'w'))" \
    "$name" "$start" "$end" "$out/snapshot.json" "$out/cli_$name.json"
}
cli_time report "$BUILD/bin/cumemtrace" report "$out/snapshot.json"
cli_time check "$BUILD/bin/cumemtrace" check "$out/snapshot.json" --max-leaked-bytes 0 \
  --max-peak-bytes 1TiB --max-growth 1GiB --mark step
rm -f "$out/snapshot.json"
python3 - "$out" <<'PY'
import json, os, sys
rows = []
for f in sorted(os.listdir(sys.argv[1])):
    if not f.endswith(".json"):
        continue
    d = json.load(open(os.path.join(sys.argv[1], f)))
    for b in d["benchmarks"]:
        skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
                "iterations", "real_time", "cpu_time", "time_unit", "family_index",
                "per_family_instance_index", "aggregate_name", "aggregate_unit"}
        extra = ", ".join(f"{k}={v:,.0f}" if v >= 100 else f"{k}={v:.1f}"
                          for k, v in b.items() if k not in skip and isinstance(v, (int, float)))
        cpu = f'{b["cpu_time"]:,.0f} {b["time_unit"]}' if "cpu_time" in b else "-"
        rows.append((f[:-5], b["name"], f'{b["real_time"]:,.0f} {b["time_unit"]}', cpu, extra))
head = ("executable", "benchmark", "wall", "cpu", "")
w = [max(len(r[i]) for r in rows + [head]) for i in range(4)]
print(f'{head[0]:<{w[0]}}  {head[1]:<{w[1]}}  {head[2]:>{w[2]}}  {head[3]:>{w[3]}}  counters')
for r in rows:
    print(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:>{w[2]}}  {r[3]:>{w[3]}}  {r[4]}")
PY
