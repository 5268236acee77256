#!/usr/bin/env bash
# Real-GPU validation of issue 48's live gauges: a PyTorch training loop (tests/gpu/
# metrics_train.py) under `cumemtrace run --metrics 127.0.0.1:0`, scraped while it runs: at each
# moment it announces (and waits at, until the scrape is done: a FIFO, no sleeps) the allocated
# and reserved gauges of its pid and device equal torch.cuda.memory_allocated()/memory_reserved().
# Usage: tests/gpu/validate_metrics.sh PREFIX OUT [PYTHON]   (PREFIX has bin/cumemtrace and lib/)
set -u
P=$1
OUT=$2
PY=${3:-python3}
CT=$P/bin/cumemtrace
rm -rf "$OUT"; mkdir -p "$OUT/traces"
: > "$OUT/moments.jsonl"; : > "$OUT/run.err"
mkfifo "$OUT/go"
"$CT" run -o "$OUT/traces" --metrics 127.0.0.1:0 -- \
  "$PY" tests/gpu/metrics_train.py "$OUT/moments.jsonl" "$OUT/go" \
  > "$OUT/run.out" 2> "$OUT/run.err" &
RUN=$!
python3 tests/gpu/validate_metrics.py "$OUT/run.err" "$OUT/moments.jsonl" "$OUT/go" \
  | tee "$OUT/rows.txt"
wait $RUN; rc=$?
[ $rc = 0 ] && echo "| run exited 0 | PASS |" | tee -a "$OUT/rows.txt" \
  || echo "| run exited 0 | FAIL | exit $rc: $(tail -c 400 "$OUT/run.err")" | tee -a "$OUT/rows.txt"
! grep -q FAIL "$OUT/rows.txt"
