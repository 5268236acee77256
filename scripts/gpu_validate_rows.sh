# Contract (sourced by scripts/gpu_validate.sh; tests/cli/gpu_validate_rows_test.sh drives it
# with stub validators on any machine): the verdict table of the GPU validation. ROWS is the
# table file and LOGS a folder, both set by the caller.
#   row WHAT PASS|FAIL|SKIP DETAIL   appends one row
#   validate NAME CMD...             runs a validator: its `| what | PASS/FAIL/SKIP/info | ...` lines
#                                    become rows, everything it prints goes to LOGS/NAME.log; a
#                                    validator that exits non-zero or prints no row adds a FAIL
#                                    row saying so (a crash is never a silent pass)
#   verdict                          prints the table; status 1 when any row is FAIL
row() { printf '| %-58s | %s | %s\n' "$1" "$2" "$3" >> "$ROWS"; }

validate() {
  local name=$1 rc rows
  shift
  "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  rows=$(grep -E '^\| .* \| (PASS|FAIL|SKIP|info) \|' "$LOGS/$name.log")
  [ -n "$rows" ] && printf '%s\n' "$rows" >> "$ROWS"
  if [ $rc -ne 0 ]; then
    row "$name" FAIL "exited $rc: $(tail -n 3 "$LOGS/$name.log" | tr '\n' ' ' | cut -c1-300)"
  elif [ -z "$rows" ]; then
    row "$name" FAIL "printed no row: $(tail -n 3 "$LOGS/$name.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  return 0
}

verdict() {
  printf '| %-58s | %s | %s\n' check verdict detail
  cat "$ROWS"
  ! grep -q "| FAIL |" "$ROWS"
}
