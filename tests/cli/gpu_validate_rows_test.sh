#!/usr/bin/env bash
# scripts/gpu_validate_rows.sh on any machine, with stub validators: rows are kept, a validator
# that exits non-zero (even after printing PASS rows) or prints no row is a FAIL row, and the
# verdict fails exactly then. Usage: gpu_validate_rows_test.sh SOURCE_DIR WORK_DIR
set -u
SRC=$1
WORK=$2
rm -rf "$WORK"; mkdir -p "$WORK/logs"
LOGS="$WORK/logs"
. "$SRC/scripts/gpu_validate_rows.sh"
fail=0
expect_table() {  # NAME EXPECTED_FILE: the table equals the expected rows
  if ! diff -u "$2" "$ROWS"; then echo "FAIL: $1: rows differ"; fail=1; fi
}
good() { echo "compiling..."; echo "| stub row                                                   | PASS | 3 == 3"; }
crash() { echo "| half done                                                  | PASS | 1"; echo "Segmentation fault" >&2; return 139; }
silent() { echo "nothing to compare"; return 0; }
# As validate_torch.py in PyTorch's no-cache mode, where its recorder keeps nothing to compare.
info() { echo "| nothing recorded                                           | info | 0 entries"; }

# Only a good validator: one row, the verdict passes.
ROWS="$WORK/good.txt"; : > "$ROWS"
validate good good
printf '| %-58s | %s | %s\n' "stub row" PASS "3 == 3" > "$WORK/want-good.txt"
expect_table good "$WORK/want-good.txt"
if ! verdict > "$WORK/verdict-good.txt"; then echo "FAIL: a table of PASS rows failed"; fail=1; fi
grep -q "compiling" "$LOGS/good.log" || { echo "FAIL: the validator's output is not in its log"; fail=1; }

# An info row is a row: kept, and no FAIL (the GPU run of 2026-11-27 failed on it).
ROWS="$WORK/info.txt"; : > "$ROWS"
validate info info
printf '| %-58s | %s | %s\n' "nothing recorded" info "0 entries" > "$WORK/want-info.txt"
expect_table info "$WORK/want-info.txt"
if ! verdict > "$WORK/verdict-info.txt"; then echo "FAIL: an info row failed the verdict"; fail=1; fi

# A crash after a PASS row and a validator that prints no row: one FAIL row each.
ROWS="$WORK/bad.txt"; : > "$ROWS"
validate crash crash
validate silent silent
{
  printf '| %-58s | %s | %s\n' "half done" PASS "1"
  printf '| %-58s | %s | %s\n' crash FAIL "exited 139: | half done                                                  | PASS | 1 Segmentation fault "
  printf '| %-58s | %s | %s\n' silent FAIL "printed no row: nothing to compare "
} > "$WORK/want-bad.txt"
expect_table bad "$WORK/want-bad.txt"
if verdict > "$WORK/verdict-bad.txt"; then echo "FAIL: a crashed and a silent validator passed"; fail=1; fi

# A validator that prints a FAIL row and exits 0 (three did): its row fails the verdict.
ROWS="$WORK/quiet-fail.txt"; : > "$ROWS"
quiet_fail() { echo "| planted failure                                            | FAIL | 1 != 2"; }
validate quiet_fail quiet_fail
if verdict > "$WORK/verdict-quiet-fail.txt"; then echo "FAIL: a FAIL row exited 0 and passed"; fail=1; fi

# JOBS=2: validators run at once, and their rows join the table in the order validate was called.
# `first` cannot finish before `second` has started (it reads what `second` writes into a FIFO),
# so one at a time it would time out and fail; `second` finishes first, its rows come second.
ROWS="$WORK/parallel.txt"; : > "$ROWS"
mkfifo "$WORK/fifo"
first() { timeout 10 cat "$WORK/fifo" > /dev/null && echo "| first                                                      | PASS | ran beside second"; }
second() { timeout 10 bash -c 'echo go > "$1"' _ "$WORK/fifo" && echo "| second                                                     | PASS | 2"; }
JOBS=2
validate first first
validate second second
alone quiet_fail quiet_fail
unset JOBS
{
  printf '| %-58s | %s | %s\n' first PASS "ran beside second"
  printf '| %-58s | %s | %s\n' second PASS "2"
  printf '| %-58s | %s | %s\n' "planted failure" FAIL "1 != 2"
} > "$WORK/want-parallel.txt"
expect_table parallel "$WORK/want-parallel.txt"
if verdict > "$WORK/verdict-parallel.txt"; then echo "FAIL: a FAIL row run alone passed"; fail=1; fi

# Every validator of tests/gpu runs: named by gpu_validate.sh itself, or by a validator it runs.
for v in "$SRC"/tests/gpu/validate_*; do
  name=$(basename "$v")
  if ! grep -q "tests/gpu/$name" "$SRC/scripts/gpu_validate.sh" &&
     ! grep -lq "tests/gpu/$name" $(grep -o 'tests/gpu/validate_[a-z_]*\.sh' "$SRC/scripts/gpu_validate.sh" | sort -u | sed "s|^|$SRC/|") 2>/dev/null; then
    echo "FAIL: scripts/gpu_validate.sh does not run tests/gpu/$name"
    fail=1
  fi
done

# The script itself uses validate for every validator (no `>> "$ROWS"` left unguarded).
if grep -nE '^[^#]*(python3|bash) [^|]*>> "\$ROWS"' "$SRC/scripts/gpu_validate.sh"; then
  echo "FAIL: gpu_validate.sh appends a validator's output without validate"
  fail=1
fi
[ $fail = 0 ] && echo "ok: rows kept, crashed and silent validators fail the verdict"
exit $fail
