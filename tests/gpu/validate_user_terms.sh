#!/usr/bin/env bash
# Real-GPU check of the automatic phases and categories (issue "Answers in the PyTorch user's
# terms"): six unmarked training scripts (tests/gpu/user_terms.py) run under cumemtrace; their
# ledgers are compared with PyTorch's own memory_allocated() at the phase boundaries and with
# MemTracker's activations (validate_user_terms.py), each snapshot is opened by PyTorch's own
# viewer code with its categories, and each gets an HTML page.
# Usage: tests/gpu/validate_user_terms.sh [PREFIX with bin/ and lib/ (default build)] [OUT]
set -u
cd "$(dirname "$0")/../.."
P=${1:-build}
OUT=${2:-/tmp/cumemtrace-user-terms}
CT=$P/bin/cumemtrace
rm -rf "$OUT"; mkdir -p "$OUT"
STEPS=${STEPS:-6}
for m in mlp gpt resnet leak ckpt compile; do
  "$CT" run -q -o "$OUT/t_$m" -- python3 tests/gpu/user_terms.py "$m" "$STEPS" "$OUT/truth_$m.json" \
    > "$OUT/run_$m.txt" 2>&1 || echo "run $m: exit $?" >> "$OUT/errors.txt"
  snap=$(ls "$OUT"/t_$m/*.json 2>/dev/null | grep -v '\.oom\.' | head -1)
  [ -n "$snap" ] || { echo "$m: no snapshot" >> "$OUT/errors.txt"; continue; }
  "$CT" report --format json "$snap" > "$OUT/report_$m.json" 2>> "$OUT/errors.txt"
  "$CT" report "$snap" > "$OUT/report_$m.txt" 2>> "$OUT/errors.txt"
  "$CT" html "$snap" -o "$OUT/page_$m.html" 2>> "$OUT/errors.txt"
  # PyTorch's own viewer code reads the categories (trace_plot draws them).
  if "$CT" convert "$snap" --to pickle -o "$OUT/$m.pickle" >/dev/null 2>&1 \
     && python3 -m torch.cuda._memory_viz trace_plot "$OUT/$m.pickle" -o "$OUT/viz_$m.html" >/dev/null 2>&1 \
     && python3 - "$OUT/$m.pickle" <<'PY'
import pickle, sys, collections
s = pickle.load(open(sys.argv[1], "rb"))
c = collections.Counter(e.get("category") for t in s["device_traces"] for e in t)
assert "unknown" in c and None not in c, c
print("categories:", dict(c))
PY
  then echo "| $m: memory_viz loads it with categories | PASS |" >> "$OUT/viz.txt"
  else echo "| $m: memory_viz loads it with categories | FAIL |" >> "$OUT/viz.txt"; fi
done
for m in mlp gpt resnet; do
  python3 tests/gpu/user_terms.py "$m" 3 "$OUT/mt_$m.json" --memtracker > "$OUT/mt_$m.txt" 2>&1 \
    || echo "memtracker $m: exit $?" >> "$OUT/errors.txt"
done
python3 tests/gpu/validate_user_terms.py "$OUT"; rc=$?
cat "$OUT/viz.txt"
grep -q FAIL "$OUT/viz.txt" && rc=1
[ -s "$OUT/errors.txt" ] && { echo "errors:"; cat "$OUT/errors.txt"; }
exit $rc
