#!/usr/bin/env bash
# Real-GPU validation of issue 44: a torchrun DDP job (tests/gpu/ddp_skew.py) with 1 GiB planted
# on rank 1 from step 5, traced by `cumemtrace run`. Checks that run waits for both workers (their
# snapshots exist when it returns), that its limit fails naming rank 1, that `report DIR` flags
# rank 1 and the planted line, that the rank table's peaks equal PyTorch's own counters, and that
# check over the directory gives one verdict per rank. With one GPU both ranks share it (gloo).
# Usage: tests/gpu/validate_ranks.sh PREFIX OUT   (PREFIX has bin/cumemtrace and lib/)
set -u
P=$1
OUT=$2
CT=$P/bin/cumemtrace
rm -rf "$OUT"; mkdir -p "$OUT/traces" "$OUT/torch"
ROWS=$OUT/rows.txt; : > "$ROWS"
row() { printf '| %-62s | %s | %s\n' "$1" "$2" "$3" >> "$ROWS"; }
NGPU=$(nvidia-smi -L | wc -l)
[ "$NGPU" -ge 2 ] || export CUMEMTRACE_SHARED_GPU=1
echo "GPUs: $NGPU"

"$CT" run -o "$OUT/traces" --max-allocated-peak 512MiB -- \
  torchrun --standalone --nproc_per_node 2 tests/gpu/ddp_skew.py "$OUT/torch" \
  > "$OUT/run.out" 2> "$OUT/run.err"
rc=$?
n=$(ls "$OUT"/traces/*.rank*.json 2>/dev/null | grep -v periodic | wc -l)
[ "$n" -ge 2 ] && row "run returned after both ranks' snapshots were written" PASS "$n files" \
  || row "run returned after both ranks' snapshots were written" FAIL "$n files: $(ls "$OUT/traces")"
ls "$OUT"/traces/*.rank0.*.json >/dev/null 2>&1 && ls "$OUT"/traces/*.rank1.*.json >/dev/null 2>&1 \
  && row "file names carry the rank (EXE.rankN.PID.json)" PASS "" \
  || row "file names carry the rank (EXE.rankN.PID.json)" FAIL "$(ls "$OUT/traces" | tr '\n' ' ')"
if [ $rc = 1 ] && grep -q "rank 1" "$OUT/run.err" && ! grep -E "rank 0[^-9].*(fail|exceed)" "$OUT/run.err" >/dev/null; then
  row "run --max-allocated-peak 512MiB fails naming rank 1" PASS "exit $rc"
else
  row "run --max-allocated-peak 512MiB fails naming rank 1" FAIL "exit $rc: $(tail -c 600 "$OUT/run.err")"
fi
grep -q "no CUDA allocation seen" "$OUT/run.err" && row "no 'no CUDA allocation seen'" FAIL "" \
  || row "no 'no CUDA allocation seen'" PASS ""

"$CT" report "$OUT/traces" > "$OUT/report.txt" 2> "$OUT/report.err"; rrc=$?
"$CT" report "$OUT/traces" --format json > "$OUT/report.json" 2>/dev/null
python3 tests/gpu/validate_ranks.py "$OUT" $rrc >> "$ROWS"
"$CT" check "$OUT/traces" --max-allocated-peak 512MiB > "$OUT/check.txt" 2>&1; crc=$?
[ $crc = 1 ] && grep -q "rank 1" "$OUT/check.txt" \
  && row "check DIR --max-allocated-peak 512MiB fails rank 1 only" PASS "exit $crc" \
  || row "check DIR --max-allocated-peak 512MiB fails rank 1 only" FAIL "exit $crc: $(head -c 600 "$OUT/check.txt")"
r0=$(ls "$OUT"/traces/*.rank0.*.json | grep -v periodic | head -1)
r1=$(ls "$OUT"/traces/*.rank1.*.json | grep -v periodic | head -1)
"$CT" diff "$r0" "$r1" > "$OUT/diff.txt" 2>&1
grep -q "ddp_skew.py:37" "$OUT/diff.txt" && row "diff rank0 rank1 shows the planted line" PASS "" \
  || row "diff rank0 rank1 shows the planted line" FAIL "$(head -c 600 "$OUT/diff.txt")"
"$CT" convert --to perfetto "$r0" -o "$OUT/rank0.perfetto.json" 2>/dev/null
"$CT" convert --to perfetto "$r1" -o "$OUT/rank1.perfetto.json" 2>/dev/null
python3 - "$OUT" >> "$ROWS" <<'PY'
import json, sys
out = sys.argv[1]
names = []
try:
    for r in (0, 1):
        d = json.load(open(f"{out}/rank{r}.perfetto.json"))
        ev = d["traceEvents"] if isinstance(d, dict) else d
        names += [e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"]
    ok = any(n.startswith("rank 0") for n in names) and any(n.startswith("rank 1") for n in names)
except Exception as e:
    ok, names = False, [repr(e)]
print(f"| {'perfetto: one process per rank, named by rank and host':<62} | {'PASS' if ok else 'FAIL'} | {names[:4]}")
PY
echo "--- run's stderr"; tail -n 25 "$OUT/run.err"
echo "--- report DIR (first 60 lines)"; head -n 60 "$OUT/report.txt"
echo "--- check DIR"; head -n 30 "$OUT/check.txt"
echo "--- diff (first 30 lines)"; head -n 30 "$OUT/diff.txt"
echo; cat "$ROWS"
! grep -q "| FAIL |" "$ROWS"
