#!/usr/bin/env bash
# Installs what is missing and builds cumemtrace.
# Usage: scripts/setup.sh [demo|tests] [build-dir]   (default: tests build)
#   demo   the build's Debian packages, then only what scripts/demo.sh runs: `cumemtrace`, the
#          preload, the fake CUDA driver and the example program, the collector unity-built
#          (CUMEMTRACE_UNITY: half its compile time; `tests` builds the tree one file at a time)
#   tests  also the test tools (Debian packages), the caches the tests read, every target
#          (what scripts/test.sh runs). The caches, fetched in the background while the build
#          compiles and reused when their content is unchanged: the torch venv
#          (${CUMEMTRACE_TORCH_VENV:-~/.cache/cumemtrace/torch-2.11}, ~3 GB from PyPI), the Debian
#          chroots of tests/pythons and of the release's bullseye test (scripts/python_chroots.sh)
#          and the bullseye sysroot of the portable build (scripts/portable_build.sh --sysroot).
# CUMEMTRACE_WERROR=ON for CI-strict warnings; CUMEMTRACE_BUILD_TYPE=Release|Debug|RelWithDebInfo
# (default RelWithDebInfo). Builds with Ninja, through ccache (CMakeLists.txt says how).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=tests
case "${1:-}" in
  demo | tests) PROFILE=$1; shift ;;
esac
BUILD=${1:-build}

# What compiles cumemtrace, its example and its test programs (tests/CMakeLists.txt needs Catch2
# and a python3 to configure).
BUILD_PACKAGES=(build-essential cmake ninja-build ccache pkg-config libspdlog-dev libfmt-dev
  nlohmann-json3-dev catch2 libcli11-dev libdw-dev libelf-dev zlib1g-dev liblzma-dev libbz2-dev
  libzstd-dev python3)
# What the tests run: pytest and jsonschema, libFuzzer (clang), the browser test, `go tool
# pprof`, Prometheus, gdb, debootstrap for the chroots, the sanitizers' runtimes.
TEST_PACKAGES=(python3-dev python3-jsonschema python3-pytest python3-venv python3-pytest-xdist
  debootstrap clang llvm libclang-rt-14-dev binutils file chromium fonts-dejavu-core gdb golang-go
  prometheus)
packages=("${BUILD_PACKAGES[@]}")
[ "$PROFILE" = tests ] && packages+=("${TEST_PACKAGES[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "cumemtrace setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -f /usr/local/cuda/include/cuda.h ] && ! command -v nvcc >/dev/null; then
  echo "cumemtrace setup: the CUDA toolkit headers (cuda.h) are needed at build time;" \
       "install the CUDA toolkit in /usr/local/cuda" >&2
  exit 1
fi
export PATH="$PATH:/usr/local/cuda/bin"

# The tests' caches, each a job of its own in the background (network, little CPU) while the
# build below compiles; each is reused as it is when its content is what this checkout asks for.
fetches=()
fetch() {  # NAME COMMAND...: runs COMMAND in the background, its output in $BUILD/setup-NAME.log
  local name=$1
  shift
  "$@" >"$BUILD/setup-$name.log" 2>&1 &
  fetches+=("$name:$!")
}
if [ "$PROFILE" = tests ]; then
  mkdir -p "$BUILD"
  # The real PyTorch of tests/torch_phases and tests/real_torch, keyed by what it installs.
  TORCH_VENV=${CUMEMTRACE_TORCH_VENV:-$HOME/.cache/cumemtrace/torch-2.11}
  # The trainers people use come with it (tests/torch_phases builds tiny configs, no downloads).
  TORCH_SPEC="torch==2.11.0 numpy pytest pytorch-lightning==2.6.6 transformers==5.25.0 accelerate==1.16.0"
  torch_venv() {
    if [ "$(cat "$TORCH_VENV/.cumemtrace-spec" 2>/dev/null)" = "$TORCH_SPEC" ] &&
        "$TORCH_VENV/bin/python" -c 'import torch, numpy, pytest, pytorch_lightning, transformers, accelerate' >/dev/null 2>&1; then
      echo "torch venv: $TORCH_VENV has $TORCH_SPEC"
      return 0
    fi
    echo "torch venv: installing $TORCH_SPEC into $TORCH_VENV"
    # A venv with the right torch is topped up (pip installs only what is missing): torch is 3 GB.
    if ! "$TORCH_VENV/bin/python" -c 'import torch; assert torch.__version__.startswith("2.11.0")' >/dev/null 2>&1; then
      rm -rf "$TORCH_VENV"
      python3 -m venv "$TORCH_VENV"
    fi
    # shellcheck disable=SC2086
    "$TORCH_VENV/bin/python" -m pip install -q $TORCH_SPEC
    echo "$TORCH_SPEC" >"$TORCH_VENV/.cumemtrace-spec"
  }
  fetch torch-venv torch_venv
  # Without root the chroots cannot be made; tests/pythons then says so (exit 77, listed).
  if [ "$(id -u)" -eq 0 ]; then
    fetch chroots scripts/python_chroots.sh
    fetch sysroot scripts/portable_build.sh --sysroot
  fi
fi

# A tree an older setup configured for Make is configured afresh for Ninja.
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
fi
unity=OFF
[ "$PROFILE" = demo ] && unity=ON
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${CUMEMTRACE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCUMEMTRACE_WERROR="${CUMEMTRACE_WERROR:-OFF}" -DCUMEMTRACE_UNITY=$unity >/dev/null
if [ "$PROFILE" = demo ]; then
  cmake --build "$BUILD" -j"$(nproc)" --target cumemtrace cumemtrace_preload fake_cuda ct_static_like
else
  cmake --build "$BUILD" -j"$(nproc)"
fi

status=0
for f in "${fetches[@]}"; do
  name=${f%%:*}
  rc=0
  wait "${f#*:}" || rc=$?
  if [ "$name" = chroots ] && [ "$rc" = 3 ]; then
    # The chroots cannot be made here (no network): tests/pythons skips, saying so.
    echo "cumemtrace setup: $(tail -n 1 "$BUILD/setup-$name.log")" >&2
  elif [ "$rc" != 0 ]; then
    echo "cumemtrace setup: $name failed; its log, $BUILD/setup-$name.log, ends:" >&2
    tail -n 5 "$BUILD/setup-$name.log" >&2
    status=1
  fi
done
exit $status
