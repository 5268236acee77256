#!/usr/bin/env bash
# Real-GPU validation of issue 48's bounded capture: a long PyTorch loop (tests/gpu/bounded_loop.py:
# growth at steps 20-39, a 1 GiB peak at step 60, an OOM at step 80) under `cumemtrace run --keep
# bounded --interval 0 --max-disk 300MiB`. Checks that the files stay under the cap, that the
# summary has one interval per iteration (the automatic phases' auto:step marks), that there is a
# peak window whose device peak is at least PyTorch's max_memory_reserved, an OOM window, and
# that every window opens in PyTorch's own viewer (converted to its pickle, torch.cuda._memory_viz
# stats, trace_plot and segment_plot read it). Prints PASS/FAIL rows.
# Usage: tests/gpu/validate_bounded.sh PREFIX OUT   (PREFIX has bin/cumemtrace and lib/)
set -u
P=$1
OUT=$2
CT=$P/bin/cumemtrace
rm -rf "$OUT"; mkdir -p "$OUT/traces" "$OUT/viz"
ROWS=$OUT/rows.txt; : > "$ROWS"
row() { printf '| %-62s | %s | %s\n' "$1" "$2" "$3" >> "$ROWS"; }
CAP=$((300 << 20))

"$CT" run -o "$OUT/traces" --keep bounded --interval 0 --max-disk 300MiB -- \
  python3 tests/gpu/bounded_loop.py 120 > "$OUT/run.out" 2> "$OUT/run.err"
rc=$?
[ $rc = 0 ] && row "bounded run of the loop exits 0" PASS "" \
  || row "bounded run of the loop exits 0" FAIL "exit $rc: $(tail -c 400 "$OUT/run.err")"
total=$(du -cb "$OUT"/traces/* | tail -1 | cut -f1)
[ "$total" -le $CAP ] && row "files under --max-disk 300MiB" PASS "$total bytes" \
  || row "files under --max-disk 300MiB" FAIL "$total bytes"
python3 - "$OUT" >> "$ROWS" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def row(what, ok, detail=""):
    print(f"| {what:<62} | {'PASS' if ok else 'FAIL'} | {detail}")
summaries = glob.glob(os.path.join(out, "traces", "*.intervals.json"))
if len(summaries) != 1:
    row("one interval summary", False, str(summaries)); sys.exit()
doc = json.load(open(summaries[0]))
iters = sum(iv["iterations"] for iv in doc["intervals"])
row("summary counts the loop's 120 iterations (auto:step)", doc["by"] == "iteration" and iters == 120, f"{doc['by']}, {iters}")
peak_reserved = int(next(l.split()[1] for l in open(os.path.join(out, "run.out")) if l.startswith("peak_reserved")))
kinds = {w["kind"] for w in doc["windows"]}
row("a peak window and an OOM window kept", {"peak", "oom"} <= kinds, str(sorted(kinds)))
peaks = [w["file"] for w in doc["windows"] if w["kind"] == "peak"]
if peaks:
    s = json.load(open(os.path.join(out, "traces", peaks[0])))
    top = max(d["peak_bytes"] for d in s["cumemtrace"]["devices"])
    row("peak window's peak >= torch.cuda.max_memory_reserved()", top >= peak_reserved, f"{top} vs {peak_reserved}")
row("dropped windows named with why", all("why" in d for d in doc["dropped"]), f"{len(doc['dropped'])} dropped")
PY
# memory_viz reads PyTorch's pickle: each window converted (`cumemtrace convert --to pickle`),
# then its stats (which walk every segment and block), trace_plot and segment_plot.
for f in "$OUT"/traces/*.json; do
  case "$f" in *.intervals.json) continue ;; esac
  b=$(basename "$f" .json)
  V=$OUT/viz/$b
  if "$CT" convert "$f" --to pickle -o "$V.pickle" > "$V.log" 2>&1 \
     && python3 -m torch.cuda._memory_viz stats "$V.pickle" >> "$V.log" 2>&1 \
     && python3 -m torch.cuda._memory_viz trace_plot "$V.pickle" -o "$V.trace.html" >> "$V.log" 2>&1 \
     && python3 -m torch.cuda._memory_viz segment_plot "$V.pickle" -o "$V.segments.html" >> "$V.log" 2>&1 \
     && [ -s "$V.trace.html" ] && [ -s "$V.segments.html" ]; then
    row "memory_viz opens $b" PASS "$(du -b "$f" | cut -f1) bytes"
  else
    row "memory_viz opens $b" FAIL "$(tail -c 300 "$V.log")"
  fi
done
"$CT" report "$OUT/traces" > "$OUT/report.txt" 2>&1 && grep -q "intervals by iteration" "$OUT/report.txt" \
  && row "report DIR shows the interval summary" PASS "" \
  || row "report DIR shows the interval summary" FAIL "$(tail -c 300 "$OUT/report.txt")"
cat "$ROWS"
! grep -q FAIL "$ROWS"
