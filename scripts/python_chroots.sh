#!/usr/bin/env bash
# Builds (once) and caches minimal Debian chroots whose python3 is another CPython than the
# host's, for the tests of Python frames on real interpreters (tests/pythons):
#   bullseye: 3.9   trixie: 3.13   sid: 3.14
# Usage: scripts/python_chroots.sh [SUITE...]   (default: bullseye trixie sid)
# A chroot is reused when it is complete and was made by the same debootstrap command (its marker
# holds the command); a build interrupted half-way, or made by another command, is made again. Needs root and debootstrap (installed here from Debian's packages when missing).
# Exit status: 0 built or cached, 3 cannot be built here (not root, mirror unreachable), 1 failed.
# Cache: $CUMEMTRACE_CHROOTS, else ${XDG_CACHE_HOME:-$HOME/.cache}/cumemtrace/chroots.
# Mirror: $CUMEMTRACE_DEBIAN_MIRROR, else http://deb.debian.org/debian.
set -euo pipefail
CACHE=${CUMEMTRACE_CHROOTS:-${XDG_CACHE_HOME:-$HOME/.cache}/cumemtrace/chroots}
MIRROR=${CUMEMTRACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITES=("$@")
((${#SUITES[@]})) || SUITES=(bullseye trixie sid)

if [ "$(id -u)" -ne 0 ]; then
  echo "python_chroots: building chroots needs root" >&2
  exit 3
fi
if ! command -v debootstrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
fi
mkdir -p "$CACHE"
for suite in "${SUITES[@]}"; do
  dir="$CACHE/$suite"
  spec="debootstrap --variant=minbase --include=python3 $suite $MIRROR"
  if [ "$(cat "$dir/.cumemtrace-complete" 2>/dev/null)" = "$spec" ]; then
    echo "python_chroots: $suite: cached in $dir" >&2
    continue
  fi
  rm -rf "$dir.partial" "$dir"
  start=$(date +%s)
  echo "python_chroots: $suite: debootstrap into $dir (once; minutes)" >&2
  if ! debootstrap --variant=minbase --include=python3 "$suite" "$dir.partial" "$MIRROR" \
      >"$CACHE/$suite.log" 2>&1; then
    # Exit 3 where the mirror cannot be reached (no network): the tests then skip, saying so.
    if grep -q "Failed getting release file\|Temporary failure resolving\|Could not resolve" \
        "$CACHE/$suite.log"; then
      echo "python_chroots: $suite: cannot reach $MIRROR (log: $CACHE/$suite.log)" >&2
      exit 3
    fi
    echo "python_chroots: $suite: debootstrap failed; its log: $CACHE/$suite.log" >&2
    tail -5 "$CACHE/$suite.log" >&2
    exit 1
  fi
  # Only python3 is needed: drop the package caches.
  rm -rf "$dir.partial"/var/cache/apt/archives/*.deb "$dir.partial"/var/lib/apt/lists/*
  mv "$dir.partial" "$dir"
  echo "$spec" >"$dir/.cumemtrace-complete"
  echo "python_chroots: $suite: built in $(($(date +%s) - start)) s" >&2
done
