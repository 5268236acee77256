# Toolchain for the portable build (scripts/portable_build.sh): the host's GCC compiles against
# a Debian bullseye sysroot (glibc 2.31 headers and libraries, bullseye's static libdw/libelf and
# their compression libraries), so that every shipped ELF needs at most GLIBC_2.28:
#  - libstdc++ and libgcc come from bullseye's GCC 10 (libstdc++-10-dev, libgcc-10-dev) and are
#    linked statically: the host's GCC 12 copies were built against glibc 2.36 and call
#    arc4random (2.36), _dl_find_object (2.35) and __libc_single_threaded (2.32);
#  - cmake/libstdcxx10_compat.h supplies the C++20 pieces GCC 10's library lacks;
#  - glibc 2.31's default symbol versions of what the project calls are all at most 2.28
#    (measured: the CLI and the preload need GLIBC_2.17), so no symbol needs pinning with .symver;
#    scripts/check_glibc_floor.py fails the build the day one does.
# Header-only third-party libraries (nlohmann-json, CLI11, fmt, spdlog) are the host's copies,
# placed into the sysroot by the script; the CUDA headers stay in /usr/local/cuda.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
if(NOT CUMEMTRACE_SYSROOT)
  set(CUMEMTRACE_SYSROOT "$ENV{CUMEMTRACE_SYSROOT}")
endif()
if(NOT IS_DIRECTORY "${CUMEMTRACE_SYSROOT}/usr/include")
  message(FATAL_ERROR "CUMEMTRACE_SYSROOT (${CUMEMTRACE_SYSROOT}) is not a sysroot: use scripts/portable_build.sh")
endif()
# Try-compile projects see the same settings.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CUMEMTRACE_SYSROOT)

set(CMAKE_SYSROOT "${CUMEMTRACE_SYSROOT}")
set(CMAKE_C_COMPILER gcc)
set(CMAKE_CXX_COMPILER g++)

set(_gcc10 "${CUMEMTRACE_SYSROOT}/usr/lib/gcc/x86_64-linux-gnu/10")
# GCC 10's C++ library headers, in place of the host compiler's own (which match its libstdc++).
set(_cxx_inc "-nostdinc++ -isystem ${CUMEMTRACE_SYSROOT}/usr/include/c++/10 -isystem ${CUMEMTRACE_SYSROOT}/usr/include/x86_64-linux-gnu/c++/10 -isystem ${CUMEMTRACE_SYSROOT}/usr/include/c++/10/backward")
set(CMAKE_CXX_FLAGS_INIT
  "${_cxx_inc} -include ${CMAKE_CURRENT_LIST_DIR}/libstdcxx10_compat.h")
# Debian's GCC is not configured with a sysroot, so --sysroot does not move its own multiarch
# library folders (../../../x86_64-linux-gnu relative to the compiler): glibc's libraries and
# start files are named explicitly, before the host's. The sysroot's GCC 10 runtime
# (libstdc++.a, libgcc.a, libgcc_eh.a, crtbegin) likewise comes before the host's.
set(_multi "${CUMEMTRACE_SYSROOT}/usr/lib/x86_64-linux-gnu")
set(_ld "-B${_multi} -L${_multi} -L${CUMEMTRACE_SYSROOT}/lib/x86_64-linux-gnu -L${_gcc10} -B${_gcc10}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_ld}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_ld}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_ld}")

# Libraries from the sysroot first; packages (CMake configs of the header-only libraries, the
# CUDA toolkit) also from the host.
set(CMAKE_FIND_ROOT_PATH "${CUMEMTRACE_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
