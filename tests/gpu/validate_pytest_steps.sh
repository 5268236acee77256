#!/usr/bin/env bash
# Real-GPU validation of the pytest plugin's growth-per-step limit (tests/gpu/pytest_steps_torch.py):
# the leaking test fails naming its line, the steady one passes.
# Usage: tests/gpu/validate_pytest_steps.sh PREFIX OUT   (PREFIX has bin/cumemtrace and lib/)
set -u
P=$(cd "$1" && pwd)
OUT=$2
rm -rf "$OUT"; mkdir -p "$OUT/pkg"
cp -r python/cumemtrace "$OUT/pkg/cumemtrace"
ln -s "$P/bin" "$OUT/pkg/cumemtrace/bin"; ln -s "$P/lib" "$OUT/pkg/cumemtrace/lib"
PYTHONPATH=$OUT/pkg python3 -m pytest -p cumemtrace.pytest_plugin --cumemtrace \
  --cumemtrace-output "$OUT/snaps" -p no:cacheprovider -q tests/gpu/pytest_steps_torch.py \
  --junitxml "$OUT/junit.xml" > "$OUT/pytest.txt" 2>&1
rc=$?
fail=0
row() { printf '| %-62s | %s | %s\n' "$1" "$2" "$3"; [ "$2" = FAIL ] && fail=1; return 0; }
grep -q "FAILED tests/gpu/pytest_steps_torch.py::test_leaks_per_step" "$OUT/pytest.txt" && \
  grep -q "1 failed, 1 passed" "$OUT/pytest.txt" \
  && row "pytest: the 16 MiB/step leak fails limit_gpu_growth_per_step" PASS "exit $rc" \
  || row "pytest: the 16 MiB/step leak fails limit_gpu_growth_per_step" FAIL "exit $rc"
grep -q "pytest_steps_torch.py:20" "$OUT/pytest.txt" \
  && row "pytest: the failure names the leaking line (pytest_steps_torch.py:20)" PASS "" \
  || row "pytest: the failure names the leaking line (pytest_steps_torch.py:20)" FAIL ""
grep -qE "grows 16\.0 MiB a step at train" "$OUT/pytest.txt" \
  && row "pytest: growth reported as 16 MiB a step" PASS "" \
  || row "pytest: growth reported as 16 MiB a step" FAIL ""
echo "--- pytest output"; tail -n 40 "$OUT/pytest.txt"
exit $fail
