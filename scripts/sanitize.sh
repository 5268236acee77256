#!/usr/bin/env bash
# The sanitizer stage (docs/testing.md). `address`: ASan+UBSan (LeakSanitizer on) over the
# collector, the offline commands and every test binary, then the whole CTest suite, so the
# end-to-end tests drive the sanitized collector with real programs under the real, unsanitized
# preload. `thread`: TSan over the ring (producers against the collector's reader) and the
# recorder (threads recording through a live session with stack capture and the module map).
# The preload library, the fake driver and the traced test programs are never sanitized.
# Every sanitized process writes its findings to a log file (the e2e tests swallow collectors'
# stderr); any log, or any failed test, fails the stage.
# Each tree compiles only what it sanitizes, as unity builds (CUMEMTRACE_UNITY): the unsanitized
# targets the suite runs (the preload, the fake driver and PyTorch, the test programs) are copied
# from the plain tree (cmake/unsanitized.cmake), which must be built first.
# Usage: scripts/sanitize.sh [--plain BUILD] [address] [thread]   (both by default; BUILD: build)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
PLAIN=build
if [ "${1:-}" = --plain ]; then
  PLAIN=${2:?usage: scripts/sanitize.sh [--plain BUILD] [address] [thread]}
  shift 2
fi
PLAIN=$(realpath "$PLAIN")
kinds=("$@")
((${#kinds[@]})) || kinds=(address thread)

status=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    address) dir=build-asan ;;
    thread) dir=build-tsan ;;
    *) echo "sanitize.sh: unknown sanitizer '$kind' (address or thread)" >&2; exit 2 ;;
  esac
  logs="$PWD/$dir/sanitizer-logs"
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DCUMEMTRACE_SANITIZE="$kind" -DCUMEMTRACE_WERROR=ON -DCUMEMTRACE_BUILD_BENCH=OFF \
    -DCUMEMTRACE_UNITY=ON -DCUMEMTRACE_UNSANITIZED_FROM="$PLAIN" >/dev/null
  rm -rf "$logs"
  mkdir -p "$logs"
  start=$SECONDS
  if [ "$kind" = address ]; then
    cmake --build "$dir" -j"$(nproc)"
    # verify_asan_link_order=0: tests that LD_PRELOAD our (unsanitized) library into a process
    # also start the sanitized `cumemtrace` under that variable.
    export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:verify_asan_link_order=0:strict_string_checks=1:detect_stack_use_after_return=1"
    export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
    # The browser test only renders a page the plain build already checks.
    (cd "$dir" && ctest --output-on-failure -j"$(nproc)" -LE gpu -E '^viz_browser$') || status=1
    unset ASAN_OPTIONS UBSAN_OPTIONS
  else
    cmake --build "$dir" -j"$(nproc)" --target preload_tests recorder_tests live_tests
    export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=1:second_deadlock_stack=1"
    for t in preload_tests recorder_tests live_tests; do
      "$dir/bin/$t" || status=1
    done
    unset TSAN_OPTIONS
  fi
  if compgen -G "$logs/*" >/dev/null; then
    echo "sanitize.sh: $kind sanitizer findings:" >&2
    for f in "$logs"/*; do
      echo "--- $f" >&2
      head -n 60 "$f" >&2
    done
    status=1
  fi
  echo "sanitize.sh: $kind stage done in $((SECONDS - start)) s (status so far $status)"
done
exit $status
