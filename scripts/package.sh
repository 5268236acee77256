#!/usr/bin/env bash
# Builds the release artefacts, each of whose ELF files needs at most GLIBC_2.28 and nothing
# beyond glibc, and tests them on Debian bullseye:
#   OUTDIR/cumemtrace-V-linux-x86_64.tar.gz        bin/ lib/ include/ share/ (relocatable)
#   OUTDIR/cumemtrace-V-py3-none-manylinux_2_28_x86_64.whl   (at most 10 MiB, else it fails)
#   OUTDIR/cumemtrace-V-linux-x86_64-debug.tar.gz  the shipped binaries' debug information,
#                                                  .build-id/XX/REST.debug (gdb's layout)
#
# Usage: scripts/package.sh OUTDIR
#   CUMEMTRACE_PORTABLE_BUILD  build folder of the portable build (default build-portable)
#   CUMEMTRACE_SKIP_CHROOT=1   skip the bullseye chroot test (it needs root and, once, network)
# The artefacts are cached by a hash of every input they are made of (the sources, the build and
# packaging scripts, the docs they ship, the compiler, the header packages, the sysroot's ID):
# under ${CUMEMTRACE_CACHE:-~/.cache/cumemtrace}/package/HASH. When the hash is cached, the
# build is skipped and the cached artefacts are checked again as if just made (the glibc floor,
# the split debug information, the wheel's size, the bullseye chroot test). The newest 3 are kept.
# Steps: scripts/portable_build.sh; `cmake --install` into a staging prefix; the glibc floor
# checked on every staged ELF (scripts/check_glibc_floor.py, fails above 2.28); the debug
# information split off into its own tree by build ID and checked (scripts/split_debug.py: the
# shipped files are stripped with --strip-debug, symbol table and build ID kept); tarballs; wheel
# (scripts/build_wheel.py); then scripts/bullseye_chroot_test.sh runs the tarball's
# `cumemtrace run` on a Python program allocating through the fake driver inside a debootstrap'd
# bullseye (glibc 2.31, Python 3.9).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: scripts/package.sh OUTDIR}
BUILD=${CUMEMTRACE_PORTABLE_BUILD:-$ROOT/build-portable}
VERSION=$(sed -n 's/^project(cumemtrace VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
NAME=cumemtrace-$VERSION-linux-x86_64

CACHE=${CUMEMTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cumemtrace}
SYSROOT_ID=$(sed -n 's/^SYSROOT_ID=//p' "$ROOT/scripts/portable_build.sh")
inputs_hash() {
  (
    cd "$ROOT"
    find CMakeLists.txt cmake collector preload include python share schemas docs README.md \
      tests/fake_driver scripts/package.sh scripts/portable_build.sh scripts/build_wheel.py \
      scripts/split_debug.py scripts/check_glibc_floor.py -type f \
      ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum
    g++ --version | head -n 1
    cmake --version | head -n 1
    dpkg-query -W nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
    echo "$SYSROOT_ID"
  ) | sha256sum | cut -c1-16
}
HASH=$(inputs_hash)
CACHED=$CACHE/package/$HASH

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WHEEL=$OUT/cumemtrace-$VERSION-py3-none-manylinux_2_28_x86_64.whl
# The release tree in $STAGE: unpacked from the cached artefacts, or built and installed.
if [ -f "$CACHED/complete" ]; then
  echo "cumemtrace package: inputs $HASH unchanged: the artefacts built from them, checked again" >&2
  cp "$CACHED/$NAME.tar.gz" "$CACHED/$NAME-debug.tar.gz" "$CACHED/$(basename "$WHEEL")" "$OUT/"
  tar -C "$STAGE" -xzf "$OUT/$NAME.tar.gz"
  tar -C "$STAGE" -xzf "$OUT/$NAME-debug.tar.gz"
else
  echo "cumemtrace package: building from inputs $HASH" >&2
  "$ROOT/scripts/portable_build.sh" "$BUILD" cumemtrace cumemtrace_preload fake_cuda fake_nvml
  cmake --install "$BUILD" --prefix "$STAGE/$NAME" >/dev/null
fi
echo "cumemtrace package: glibc floor of the release tree" >&2
python3 "$ROOT/scripts/check_glibc_floor.py" --max 2.28 "$STAGE/$NAME"
echo "cumemtrace package: debug information split off by build ID" >&2
if [ -f "$CACHED/complete" ]; then
  python3 "$ROOT/scripts/split_debug.py" check "$STAGE/$NAME" "$STAGE/$NAME-debug" >&2
else
  python3 "$ROOT/scripts/split_debug.py" split "$STAGE/$NAME" "$STAGE/$NAME-debug" >&2
  tar -C "$STAGE" --owner=0 --group=0 --numeric-owner -czf "$OUT/$NAME.tar.gz" "$NAME"
  tar -C "$STAGE" --owner=0 --group=0 --numeric-owner -czf "$OUT/$NAME-debug.tar.gz" "$NAME-debug"
  built=$(python3 "$ROOT/scripts/build_wheel.py" --tree "$STAGE/$NAME" --out "$OUT" --version "$VERSION")
  [ "$built" = "$WHEEL" ] || { echo "cumemtrace package: the wheel is $built, not $WHEEL" >&2; exit 1; }
fi
printf '%s\n' "$OUT/$NAME.tar.gz" "$OUT/$NAME-debug.tar.gz" "$WHEEL"
WHEEL_MAX=$((10 * 1024 * 1024))
for f in "$OUT/$NAME.tar.gz" "$WHEEL" "$OUT/$NAME-debug.tar.gz"; do
  echo "cumemtrace package: $(basename "$f") $(stat -c %s "$f") bytes" >&2
done
if (($(stat -c %s "$WHEEL") > WHEEL_MAX)); then
  echo "cumemtrace package: the wheel is over $WHEEL_MAX bytes (debug information left in?)" >&2
  exit 1
fi

# What the docs name ships in both: the Grafana dashboard (docs/metrics.md) and the fake driver
# that lets `run` be tried without a GPU (README).
for f in share/cumemtrace/grafana/cumemtrace.json lib/cumemtrace/fake/libcuda.so.1; do
  tar -tzf "$OUT/$NAME.tar.gz" "$NAME/$f" >/dev/null 2>&1 ||
    { echo "cumemtrace package: $f is not in the tarball" >&2; exit 1; }
  python3 -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' \
    "$WHEEL" "cumemtrace/$f" || { echo "cumemtrace package: $f is not in the wheel" >&2; exit 1; }
done

if [ "${CUMEMTRACE_SKIP_CHROOT:-0}" != 1 ]; then
  "$ROOT/scripts/bullseye_chroot_test.sh" "$OUT/$NAME.tar.gz"
fi

# Checked whole: cache the artefacts under their inputs' hash (newest 3 kept).
if [ ! -f "$CACHED/complete" ]; then
  rm -rf "$CACHED.tmp"
  mkdir -p "$CACHED.tmp"
  cp "$OUT/$NAME.tar.gz" "$OUT/$NAME-debug.tar.gz" "$WHEEL" "$CACHED.tmp/"
  touch "$CACHED.tmp/complete"
  rm -rf "$CACHED" && mv "$CACHED.tmp" "$CACHED"
  ls -1dt "$CACHE"/package/*/ | tail -n +4 | xargs -r rm -rf
fi
