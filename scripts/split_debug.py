#!/usr/bin/env python3
"""Moves the debug information of a release tree's ELF files into a separate tree, and checks it.

Usage: scripts/split_debug.py split TREE DEBUG_DIR
       scripts/split_debug.py check TREE DEBUG_DIR
split: for every ELF file under TREE (bin/cumemtrace, lib/libcumemtrace.so), `objcopy
  --only-keep-debug` writes its DWARF to DEBUG_DIR/.build-id/XX/REST.debug (named by its GNU
  build ID, where gdb, eu-unstrip and debuginfod look: `gdb -iex 'set debug-file-directory
  DEBUG_DIR'`), then `strip --strip-debug` removes it from the file (the symbol table and the
  build ID stay, so backtraces keep their names and the ID finds the debug file) and `objcopy
  --add-gnu-debuglink` records the debug file's name and CRC in it. A file without a build ID
  is refused: nothing could find its debug information again.
check: every ELF under TREE has no .debug_* section, has a build ID and a .gnu_debuglink, and
  DEBUG_DIR holds its .debug file, with the same build ID and a .debug_info section.
Prints one line per file; exit 1 on a failure, 2 on bad input.
"""
import os
import re
import subprocess
import sys

from check_glibc_floor import is_elf  # the one test of "an ELF file" among the scripts


def elf_files(tree):
    out = []
    for dirpath, _, names in os.walk(tree):
        for n in sorted(names):
            p = os.path.join(dirpath, n)
            if os.path.isfile(p) and not os.path.islink(p) and is_elf(p):
                out.append(p)
    return sorted(out)


def tool(*args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def build_id(path):
    m = re.search(r"Build ID:\s*([0-9a-f]+)", tool("readelf", "-n", path))
    return m.group(1) if m else None


def sections(path):
    return re.findall(r"\]\s+(\.\S+)", tool("readelf", "-S", "-W", path))


def debug_path(debug_dir, bid):
    return os.path.join(debug_dir, ".build-id", bid[:2], bid[2:] + ".debug")


def split(tree, debug_dir):
    for f in elf_files(tree):
        bid = build_id(f)
        if not bid:
            raise RuntimeError(f"{f} has no GNU build ID (link with --build-id)")
        dbg = debug_path(debug_dir, bid)
        os.makedirs(os.path.dirname(dbg), exist_ok=True)
        tool("objcopy", "--only-keep-debug", f, dbg)
        os.chmod(dbg, 0o644)
        tool("strip", "--strip-debug", f)
        tool("objcopy", f"--add-gnu-debuglink={dbg}", f)
        print(f"split_debug: {os.path.relpath(f, tree)} {os.path.getsize(f)} bytes, debug "
              f"{os.path.relpath(dbg, debug_dir)} {os.path.getsize(dbg)} bytes")


def check(tree, debug_dir):
    failures = 0
    files = elf_files(tree)
    if not files:
        print(f"split_debug: no ELF file under {tree}", file=sys.stderr)
        return 1
    for f in files:
        problems = []
        secs = sections(f)
        left = [s for s in secs if s.startswith(".debug_")]
        if left:
            problems.append("still has " + " ".join(left))
        if ".gnu_debuglink" not in secs:
            problems.append("no .gnu_debuglink")
        bid = build_id(f)
        if not bid:
            problems.append("no build ID")
        else:
            dbg = debug_path(debug_dir, bid)
            if not os.path.isfile(dbg):
                problems.append(f"no {os.path.relpath(dbg, debug_dir)} in {debug_dir}")
            else:
                if build_id(dbg) != bid:
                    problems.append(f"{dbg} has build ID {build_id(dbg)}")
                if ".debug_info" not in sections(dbg):
                    problems.append(f"{dbg} has no .debug_info")
        rel = os.path.relpath(f, tree)
        if problems:
            failures += 1
            print(f"split_debug: {rel}: " + "; ".join(problems))
        else:
            print(f"split_debug: {rel}: stripped, debug information under build ID {bid}")
    return 1 if failures else 0


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("split", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, tree, debug_dir = sys.argv[1:]
    if not os.path.isdir(tree):
        print(f"split_debug: {tree} is not a directory", file=sys.stderr)
        return 2
    try:
        if cmd == "split":
            split(tree, debug_dir)
            return check(tree, debug_dir)
        return check(tree, debug_dir)
    except RuntimeError as e:
        print(f"split_debug: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
