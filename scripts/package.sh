#!/usr/bin/env bash
# Builds the release artefacts, each of whose ELF files needs at most GLIBC_2.28 and nothing
# beyond glibc, and tests them on Debian bullseye:
#   OUTDIR/cumemtrace-V-linux-x86_64.tar.gz      bin/ lib/ include/ share/ (relocatable)
#   OUTDIR/cumemtrace-V-py3-none-manylinux_2_28_x86_64.whl
#
# Usage: scripts/package.sh OUTDIR
#   CUMEMTRACE_PORTABLE_BUILD  build folder of the portable build (default build-portable)
#   CUMEMTRACE_SKIP_CHROOT=1   skip the bullseye chroot test (it needs root and, once, network)
# Steps: scripts/portable_build.sh; `cmake --install` into a staging prefix; the glibc floor
# checked on every staged ELF (scripts/check_glibc_floor.py, fails above 2.28); tarball; wheel
# (scripts/build_wheel.py); then scripts/bullseye_chroot_test.sh runs the tarball's
# `cumemtrace run` on a Python program allocating through the fake driver inside a debootstrap'd
# bullseye (glibc 2.31, Python 3.9).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: scripts/package.sh OUTDIR}
BUILD=${CUMEMTRACE_PORTABLE_BUILD:-$ROOT/build-portable}
VERSION=$(sed -n 's/^project(cumemtrace VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
NAME=cumemtrace-$VERSION-linux-x86_64

"$ROOT/scripts/portable_build.sh" "$BUILD" cumemtrace cumemtrace_preload fake_cuda fake_nvml

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cmake --install "$BUILD" --prefix "$STAGE/$NAME" >/dev/null
echo "cumemtrace package: glibc floor of the release tree" >&2
python3 "$ROOT/scripts/check_glibc_floor.py" --max 2.28 "$STAGE/$NAME"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
tar -C "$STAGE" --owner=0 --group=0 --numeric-owner -czf "$OUT/$NAME.tar.gz" "$NAME"
echo "$OUT/$NAME.tar.gz"
python3 "$ROOT/scripts/build_wheel.py" --tree "$STAGE/$NAME" --out "$OUT" --version "$VERSION"

if [ "${CUMEMTRACE_SKIP_CHROOT:-0}" != 1 ]; then
  "$ROOT/scripts/bullseye_chroot_test.sh" "$OUT/$NAME.tar.gz" "$BUILD"
fi
