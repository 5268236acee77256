#!/usr/bin/env python3
"""Checks that ELF files need nothing beyond glibc, and at most a given glibc version.

Usage: scripts/check_glibc_floor.py [--max 2.28] [--allow-gcc-runtime] FILE_OR_DIR...
Directories are searched for ELF files. For each ELF, `objdump -T` lists the symbol versions it
needs and `objdump -p` the libraries: any GLIBC_x.y above the maximum, any other versioned
dependency (GLIBCXX_, CXXABI_, GCC_: libstdc++ and libgcc must be linked statically) or a
needed library outside glibc fails the check. --allow-gcc-runtime accepts libstdc++.so.6 and
libgcc_s.so.1 and --allow-lib NAME another library (for test programs, never for what ships). Prints one line per file; exit 1 on a
failure, 2 on bad input.
"""
import argparse
import os
import re
import subprocess
import sys

GLIBC_LIBS = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6",
              "ld-linux-x86-64.so.2"}
VERSION = re.compile(r"\b(GLIBC|GLIBCXX|CXXABI|GCC|GLIBC_PRIVATE)_([0-9.]+|PRIVATE)\b")


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def version_tuple(text):
    return tuple(int(p) for p in text.split("."))


GCC_RUNTIME_LIBS = {"libstdc++.so.6", "libgcc_s.so.1"}


def check(path, maximum, allow_gcc_runtime=False, allowed_libs=()):
    problems = []
    dyn = subprocess.run(["objdump", "-T", path], capture_output=True, text=True)
    if dyn.returncode != 0:
        return [f"objdump -T failed: {dyn.stderr.strip()}"], None
    highest = None
    for line in dyn.stdout.splitlines():
        # Only what the file needs: undefined symbols (*UND*); its own definitions carry its
        # own version nodes (the preload's CUMEMTRACE_*, the fake driver's).
        if "*UND*" not in line:
            continue
        for family, ver in VERSION.findall(line):
            if family == "GLIBC" and ver != "PRIVATE":
                if highest is None or version_tuple(ver) > version_tuple(highest):
                    highest = ver
                if version_tuple(ver) > version_tuple(maximum):
                    problems.append(f"{line.split()[-1]} needs GLIBC_{ver}")
            elif not allow_gcc_runtime or family == "GLIBC_PRIVATE":
                problems.append(f"{line.split()[-1]} needs {family}_{ver}")
    heads = subprocess.run(["objdump", "-p", path], capture_output=True, text=True).stdout
    for lib in re.findall(r"NEEDED\s+(\S+)", heads):
        if lib in allowed_libs or (allow_gcc_runtime and lib in GCC_RUNTIME_LIBS):
            continue
        if lib not in GLIBC_LIBS:
            problems.append(f"needs library {lib}")
    return problems, highest


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", default="2.28", help="highest GLIBC version allowed (2.28)")
    ap.add_argument("--allow-gcc-runtime", action="store_true",
                    help="accept libstdc++.so.6 and libgcc_s.so.1 (test programs only)")
    ap.add_argument("--allow-lib", action="append", default=[], metavar="NAME",
                    help="accept this needed library too (test programs only)")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    files = []
    for p in args.paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in sorted(names)
                          if not os.path.islink(os.path.join(root, n))]
        elif os.path.isfile(p):
            files.append(p)
        else:
            print(f"check_glibc_floor: no such file: {p}", file=sys.stderr)
            return 2
    elves = [f for f in files if is_elf(f)]
    if not elves:
        print("check_glibc_floor: no ELF files found", file=sys.stderr)
        return 2
    failed = 0
    for f in elves:
        problems, highest = check(f, args.max, args.allow_gcc_runtime, args.allow_lib)
        status = "FAIL" if problems else "ok"
        print(f"{status} {f}: needs GLIBC_{highest or 'none'}")
        for p in sorted(set(problems)):
            print(f"    {p}")
        failed += bool(problems)
    print(f"check_glibc_floor: {len(elves)} ELF files, {failed} above GLIBC_{args.max} or "
          f"beyond glibc")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
