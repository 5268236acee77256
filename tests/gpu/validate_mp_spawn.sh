#!/usr/bin/env bash
# Real-GPU check of ranks known only to torch.distributed (tests/gpu/mp_spawn_ranks.py under
# `cumemtrace run`): both workers' files named by rank, the rank from init_process_group, and
# the rank table's allocated peaks equal PyTorch's. Usage: validate_mp_spawn.sh PREFIX OUT
set -u
CT=$1/bin/cumemtrace
OUT=$2
rm -rf "$OUT"; mkdir -p "$OUT/traces" "$OUT/torch"
"$CT" run -q -o "$OUT/traces" -- python3 tests/gpu/mp_spawn_ranks.py "$OUT/torch" > "$OUT/run.txt" 2>&1
echo "run exit $?"
ls "$OUT/traces"
"$CT" report "$OUT/traces" --format json > "$OUT/report.json" 2> "$OUT/report.err"
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
failed = 0
def row(name, ok, detail=""):
    global failed
    failed += not ok
    print(f"| {name:<62} | {'PASS' if ok else 'FAIL'} | {detail}")
files = sorted(os.path.basename(f) for f in glob.glob(f"{out}/traces/*.json"))
ranked = [f for f in files if ".rank0." in f or ".rank1." in f]
row("mp.spawn: each worker's file named by its rank", len(ranked) == 2, " ".join(files))
try:
    rows = [r for r in json.load(open(f"{out}/report.json"))["ranks"]["rows"] if r["slot"] == 0]
except Exception as e:
    rows = []
    row("mp.spawn: report DIR has a rank table", False, repr(e))
for r in rows:
    if r["rank"] is None:
        continue
    t = json.load(open(f"{out}/torch/torch.rank{r['rank']}.json"))
    row(f"mp.spawn rank {r['rank']}: launcher torch.distributed, world 2",
        r["launcher"] == "torch.distributed" and r["world_size"] == 2, f"{r['launcher']} {r['world_size']}")
    a = r["values"].get("allocated peak")
    # The trace holds requested sizes; PyTorch counts blocks rounded to 512 B (the barrier's
    # small tensors): within 0.1%.
    row(f"mp.spawn rank {r['rank']}: allocated peak vs max_memory_allocated() (0.1%)",
        a is not None and abs(a - t["max_memory_allocated"]) <= t["max_memory_allocated"] / 1000,
        f"{a} vs {t['max_memory_allocated']}")
if len(rows) < 2:
    row("mp.spawn: the rank table has both ranks", False, f"{len(rows)} rows")
sys.exit(1 if failed else 0)
PY
