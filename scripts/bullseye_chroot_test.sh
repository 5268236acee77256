#!/usr/bin/env bash
# Runs a release tarball on Debian bullseye (glibc 2.31, Python 3.9) in a chroot: the tarball's
# `cumemtrace run` traces tests/e2e/py_alloc.py allocating through the fake CUDA driver, then
# `cumemtrace report` and `cumemtrace check` read the snapshot. Proves that the shipped
# programs start and work on an older system than the one that built them.
#
# Usage: scripts/bullseye_chroot_test.sh TARBALL
#   the tarball's own fake driver (lib/cumemtrace/fake/libcuda.so.1) stands for the GPU.
# Needs root (chroot, mounts in a private mount namespace). The chroot is tests/pythons' bullseye,
# made once by scripts/python_chroots.sh (`debootstrap --variant=minbase --include=python3`) and
# cached there.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARBALL=$(realpath "${1:?usage: scripts/bullseye_chroot_test.sh TARBALL}")
CHROOT=${CUMEMTRACE_CHROOTS:-${XDG_CACHE_HOME:-$HOME/.cache}/cumemtrace/chroots}/bullseye

if [ "$(id -u)" -ne 0 ]; then
  echo "bullseye chroot test: needs root (chroot)" >&2
  exit 2
fi
"$ROOT/scripts/python_chroots.sh" bullseye ||
  { echo "bullseye chroot test: no bullseye chroot (scripts/python_chroots.sh failed)" >&2; exit 1; }

# A fresh work folder inside the chroot for this run.
WORK=$(mktemp -d "$CHROOT/tmp/cumemtrace-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
IN=/tmp/$(basename "$WORK")
tar -C "$WORK" -xzf "$TARBALL"
top=("$WORK"/*)
PREFIX=$IN/$(basename "${top[0]}")
cp "$ROOT/tests/e2e/py_alloc.py" "$WORK/"
PY_LINE=$(grep -n "# PY_ALLOC_LINE" "$ROOT/tests/e2e/py_alloc.py" | cut -d: -f1)

# The system inside: its glibc and Python, for the record.
cat >"$WORK/test.sh" <<INNER
set -eu
# The tarball's own fake driver (README, "without a GPU").
export LD_LIBRARY_PATH=$PREFIX/lib/cumemtrace/fake FAKE_CUDA_DEVICES=1
echo "inside: \$(ldd --version | head -1); \$(python3 --version)"
$PREFIX/bin/cumemtrace --version
$PREFIX/bin/cumemtrace run -o $IN/out -- python3 $IN/py_alloc.py
ls $IN/out
snap=\$(ls $IN/out/*.json | head -1)
$PREFIX/bin/cumemtrace report "\$snap" > $IN/report.txt
# The release's preload reads bullseye's own Python 3.9 frames: the site is the script's line.
grep -q "load_weights (py_alloc.py:$PY_LINE)" $IN/report.txt || { cat $IN/report.txt; echo "report shows no Python frame of the allocating line"; exit 1; }
rc=0; $PREFIX/bin/cumemtrace check "\$snap" --max-leaked-bytes 0 > $IN/check.txt || rc=\$?
cat $IN/check.txt
# py_alloc.py (without arguments) leaves build_model()'s 3 MiB allocated.
[ \$rc -eq 1 ] || { echo "check exit status \$rc, expected 1"; exit 1; }
grep -q "3.00 MiB leaked on device 0 by 1 allocation" $IN/check.txt ||
  { echo "check does not report the 3 MiB leak"; exit 1; }
INNER
unshare -m sh -c "mount -t proc proc '$CHROOT/proc' && mount --rbind /dev '$CHROOT/dev' &&
  mount -t tmpfs tmpfs '$CHROOT/dev/shm' && chroot '$CHROOT' /bin/sh $IN/test.sh"
echo "bullseye chroot test: passed"
