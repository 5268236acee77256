#!/usr/bin/env bash
# Builds cumemtrace with warnings as errors and runs every test (unit, end-to-end on the fake
# driver, schema validation), then the sanitizer stage (scripts/sanitize.sh: ASan+UBSan over the
# collector and the whole suite, TSan over the ring and recorder; CUMEMTRACE_SANITIZERS=0 skips
# it for a quick local run). Tests labelled `gpu` run only where an NVIDIA GPU is present.
# CUMEMTRACE_BUILD_TYPE=Release or Debug builds that type instead of CI's RelWithDebInfo, in its
# own tree (build-release/, build-debug/). The tests CTest reported as Skipped (a prerequisite
# missing on this machine) are listed at the end: on the CI machine that list is empty.
# Each stage's wall time is printed as it ends ("test.sh: STAGE took N s"; docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
TYPE=${CUMEMTRACE_BUILD_TYPE:-RelWithDebInfo}
case $TYPE in
  RelWithDebInfo) BUILD=build ;;
  Release) BUILD=build-release ;;
  Debug) BUILD=build-debug ;;
  *) echo "test.sh: CUMEMTRACE_BUILD_TYPE must be RelWithDebInfo, Release or Debug, not $TYPE" >&2
     exit 2 ;;
esac
stage_start=$SECONDS
took() { echo "test.sh: $1 took $((SECONDS - stage_start)) s"; stage_start=$SECONDS; }
CUMEMTRACE_WERROR=ON CUMEMTRACE_BUILD_TYPE=$TYPE scripts/setup.sh tests "$BUILD"
took "set-up and build"
labels=(-LE gpu)
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then labels=(); fi
rc=0
(cd "$BUILD" && ctest --output-on-failure -j2 "${labels[@]}") | tee "$BUILD/ctest.log" || rc=$?
took "CTest"
# CTest prints "N - NAME (Skipped)" lines for tests that exited with their SKIP_RETURN_CODE.
skipped=$(grep -E '^[[:space:]]*[0-9]+ - .* \(Skipped\)' "$BUILD/ctest.log" | sed -E 's/^[[:space:]]*[0-9]+ - //' || true)
if [ -n "$skipped" ]; then
  echo "Skipped tests (their output says why; each is a check that did not run here):"
  echo "$skipped" | sed 's/^/  /'
else
  echo "Skipped tests: none"
fi
[ "$rc" = 0 ] || exit "$rc"
if [ "${CUMEMTRACE_SANITIZERS:-1}" != 0 ]; then
  scripts/sanitize.sh --plain "$BUILD"
  took "sanitizer stage"
fi
