#!/usr/bin/env bash
# Builds cumemtrace so that every ELF needs at most GLIBC_2.28 and nothing beyond glibc
# (manylinux_2_28: RHEL 8, Ubuntu 20.04, Debian 11 and everything newer).
#
# Usage: scripts/portable_build.sh BUILD_DIR [TARGET...]
#        scripts/portable_build.sh --sysroot   (only fetch the sysroot, when it is missing)
#   default targets: cumemtrace cumemtrace_preload fake_cuda fake_nvml (the CLI, the preload, the
#   fake CUDA driver and fake NVML the tests use); name others (ct_lcuda ...) to build test
#   programs for that floor too.
#
# The host's GCC compiles against a sysroot of Debian bullseye packages (glibc 2.31, GCC 10's
# static libstdc++/libgcc, static libdw/libelf/zlib/lzma/bz2/zstd), fetched once with
# `apt-get download PKG/bullseye` through a private sources list and cached under
# ${CUMEMTRACE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/cumemtrace}; the toolchain file is
# cmake/bullseye-sysroot.cmake. Ends by checking the built ELFs with scripts/check_glibc_floor.py.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:?usage: scripts/portable_build.sh BUILD_DIR [TARGET...] | --sysroot}
shift
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(cumemtrace cumemtrace_preload fake_cuda fake_nvml)

CACHE=${CUMEMTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cumemtrace}
# Bump when the package list or the layout changes: a new sysroot is made beside the old one.
SYSROOT_ID=bullseye-2
SYSROOT=$CACHE/sysroot-$SYSROOT_ID
BULLSEYE_PACKAGES=(libc6 libc6-dev linux-libc-dev libcrypt1 libcrypt-dev libgcc-s1 libstdc++6 libgcc-10-dev
  libstdc++-10-dev libdw-dev libelf-dev zlib1g-dev liblzma-dev libbz2-dev libzstd-dev)
# Header-only libraries: the host's own copies (the versions the project is written for).
HOST_HEADER_PACKAGES=(nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev)

make_sysroot() {
  local apt=$CACHE/apt-bullseye tmp
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
  echo "deb http://deb.debian.org/debian bullseye main" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Dir::State::Status=/dev/null
    -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root -qq)
  echo "cumemtrace portable build: fetching the Debian bullseye sysroot into $SYSROOT" >&2
  apt-get "${opts[@]}" update
  rm -f "$apt"/debs/*.deb
  (cd "$apt/debs" && apt-get "${opts[@]}" download "${BULLSEYE_PACKAGES[@]/%//bullseye}")
  tmp=$(mktemp -d "$CACHE/sysroot.XXXXXX")
  for deb in "$apt"/debs/*.deb; do dpkg -x "$deb" "$tmp"; done
  # Absolute symbolic links (libpthread.so -> /lib/...) would reach the host's libraries: make
  # them relative to the sysroot.
  local link target
  while IFS= read -r link; do
    target=$(readlink "$link")
    case "$target" in /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$tmp$target")" "$link" ;; esac
  done < <(find "$tmp" -type l)
  # The dynamic loader's path that the linker scripts name (libc6's maintainer scripts make it).
  mkdir -p "$tmp/lib64"
  ln -sf ../lib/x86_64-linux-gnu/ld-2.31.so "$tmp/lib64/ld-linux-x86-64.so.2"
  local p f
  for p in "${HOST_HEADER_PACKAGES[@]}"; do
    dpkg-query -W "$p" >/dev/null 2>&1 || { echo "cumemtrace portable build: $p is not installed (scripts/setup.sh)" >&2; exit 1; }
    dpkg -L "$p" | while read -r f; do
      [ -f "$f" ] || continue
      case "$f" in
        /usr/include/* | /usr/share/cmake/* | /usr/lib/cmake/* | /usr/lib/x86_64-linux-gnu/cmake/*)
          mkdir -p "$tmp$(dirname "$f")" && cp -a "$f" "$tmp$f" ;;
      esac
    done
  done
  rm -rf "$SYSROOT" && mv "$tmp" "$SYSROOT"
}

mkdir -p "$CACHE"
[ -f "$SYSROOT/usr/lib/gcc/x86_64-linux-gnu/10/libstdc++.a" ] || make_sysroot
[ "$BUILD" = --sysroot ] && exit 0

export PATH="$PATH:/usr/local/cuda/bin"
# The toolchain's flags name the sysroot and are cached at the first configure: a build folder
# made for another sysroot starts its configuration afresh.
# So does one an older script configured for Make.
if [ -f "$BUILD/CMakeCache.txt" ] && { ! grep -qF -- "-isystem $SYSROOT/usr/include/c++/10 " "$BUILD/CMakeCache.txt" ||
    ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; }; then
  rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
fi
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/bullseye-sysroot.cmake" \
  -DCUMEMTRACE_SYSROOT="$SYSROOT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUMEMTRACE_BUILD_BENCH=OFF \
  -DCUMEMTRACE_WERROR="${CUMEMTRACE_WERROR:-OFF}" >/dev/null
cmake --build "$BUILD" -j"${CUMEMTRACE_JOBS:-$(nproc)}" --target "${TARGETS[@]}"

# What ships (the CLI, the preload) needs glibc <= 2.28 and nothing else; test programs and the
# fake driver may also use bullseye's libstdc++/libgcc_s (every Debian/Ubuntu has them) and the
# fake libraries they are linked with.
shipped=()
for f in "$BUILD/bin/cumemtrace" "$BUILD/lib/libcumemtrace.so"; do [ -f "$f" ] && shipped+=("$f"); done
mapfile -t others < <(find "$BUILD/bin" "$BUILD/lib" "$BUILD/fake" "$BUILD/fake_nvml" -maxdepth 1 \
  -type f ! -name cumemtrace ! -name libcumemtrace.so 2>/dev/null)
((${#shipped[@]} == 0)) || python3 "$ROOT/scripts/check_glibc_floor.py" --max 2.28 "${shipped[@]}"
((${#others[@]} == 0)) ||
  python3 "$ROOT/scripts/check_glibc_floor.py" --max 2.28 --allow-gcc-runtime \
    --allow-lib libcuda.so.1 --allow-lib libct_fakecudart.so "${others[@]}"
