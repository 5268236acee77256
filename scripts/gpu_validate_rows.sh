# Contract (sourced by scripts/gpu_validate.sh; tests/cli/gpu_validate_rows_test.sh drives it
# with stub validators on any machine): the verdict table of the GPU validation. ROWS is the
# table file and LOGS a folder, both set by the caller; JOBS (default 1) is how many validators
# may run at once.
#   row WHAT PASS|FAIL|SKIP DETAIL   appends one row
#   validate NAME CMD...             runs a validator: its `| what | PASS/FAIL/SKIP/info | ...` lines
#                                    (the verdict column may be padded)
#                                    become rows, everything it prints goes to LOGS/NAME.log; a
#                                    validator that exits non-zero or prints no row adds a FAIL
#                                    row saying so (a crash is never a silent pass). With JOBS > 1
#                                    it starts in the background once fewer than JOBS run; its rows
#                                    join the table, in the order validate was called, at the next
#                                    collect (alone and verdict collect first)
#   alone NAME CMD...                as validate, with nothing else running: for a validator that
#                                    needs the device to itself (fills its memory, or measures the
#                                    device's free bytes)
#   collect                          waits for the validators running and adds their rows
#   verdict                          prints the table; status 1 when any row is FAIL
row() { printf '| %-58s | %s | %s\n' "$1" "$2" "$3" >> "$ROWS"; }

# One validator's rows (and its FAIL row) into the file $1.
run_validator() {
  local slot=$1 name=$2 rc rows
  shift 2
  : > "$slot"
  "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  rows=$(grep -E '^\| .* \| *(PASS|FAIL|SKIP|info) *\|' "$LOGS/$name.log")
  [ -n "$rows" ] && printf '%s\n' "$rows" >> "$slot"
  if [ $rc -ne 0 ]; then
    ROWS=$slot row "$name" FAIL "exited $rc: $(tail -n 3 "$LOGS/$name.log" | tr '\n' ' ' | cut -c1-300)"
  elif [ -z "$rows" ]; then
    ROWS=$slot row "$name" FAIL "printed no row: $(tail -n 3 "$LOGS/$name.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  return 0
}

VALIDATE_SLOTS=()
validate() {
  local slot
  slot="$LOGS/.rows.$(printf %04d ${#VALIDATE_SLOTS[@]}).$1"
  VALIDATE_SLOTS+=("$slot")
  if [ "${JOBS:-1}" -gt 1 ]; then
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run_validator "$slot" "$@" &
  else
    run_validator "$slot" "$@"
    collect
  fi
  return 0
}

collect() {
  wait
  local slot
  for slot in "${VALIDATE_SLOTS[@]}"; do
    if [ -f "$slot" ]; then
      cat "$slot" >> "$ROWS"
    else
      row "$(basename "$slot" | cut -d. -f4-)" FAIL "its rows were lost"
    fi
    rm -f "$slot"
  done
  VALIDATE_SLOTS=()
}

alone() {
  collect
  JOBS=1 validate "$@"
}

verdict() {
  collect
  printf '| %-58s | %s | %s\n' check verdict detail
  cat "$ROWS"
  ! grep -q "| FAIL |" "$ROWS"
}
