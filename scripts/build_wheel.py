#!/usr/bin/env python3
"""Writes the cumemtrace wheel (py3-none-manylinux_2_28_x86_64) from an installed tree and the
python/ package, following the wheel format (PEP 427/491) directly: no network, no build
backend.

Usage: scripts/build_wheel.py --tree PREFIX --out OUTDIR [--version V]
PREFIX is a `cmake --install` tree of the portable build (bin/cumemtrace, lib/libcumemtrace.so,
include/, share/); its files go inside the package as cumemtrace/{bin,lib,include,share}/, so
the CLI finds the preload as ../lib exactly as in the tarball. The wheel is independent of the
Python version (the package is pure Python; the native parts are a program and an LD_PRELOAD
library, not extension modules) and of the CUDA version (nothing links libcudart/libcuda).
Prints the wheel's path.
"""
import argparse
import base64
import hashlib
import os
import stat
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-manylinux_2_28_x86_64"
# Reproducible: fixed timestamps (zip cannot store dates before 1980).
DATE = (1980, 1, 1, 0, 0, 0)

METADATA = """Metadata-Version: 2.1
Name: cumemtrace
Version: {version}
Summary: Records every CUDA device-memory allocation and free with native and Python stacks
License: see the project repository
Requires-Python: >=3.8
Classifier: Programming Language :: Python :: 3
Classifier: Operating System :: POSIX :: Linux
Classifier: Framework :: Pytest
Description-Content-Type: text/markdown

{readme}"""

WHEEL = f"""Wheel-Version: 1.0
Generator: cumemtrace scripts/build_wheel.py
Root-Is-Purelib: false
Tag: {TAG}
"""

ENTRY_POINTS = """[console_scripts]
cumemtrace = cumemtrace._cli:main

[pytest11]
cumemtrace = cumemtrace.pytest_plugin
"""


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--version", default="0.1.0")
    args = ap.parse_args()

    files = []  # (name in wheel, path on disk)
    pkg = os.path.join(ROOT, "python", "cumemtrace")
    for n in sorted(os.listdir(pkg)):
        if n.endswith(".py"):
            files.append((f"cumemtrace/{n}", os.path.join(pkg, n)))
    for sub in ("bin", "lib", "include", "share"):
        top = os.path.join(args.tree, sub)
        if sub in ("bin", "lib") and not os.path.isdir(top):
            sys.exit(f"build_wheel: {top} is missing (not an installed tree)")
        for dirpath, dirnames, names in os.walk(top):
            dirnames.sort()
            if os.path.relpath(dirpath, args.tree).startswith(("lib/cmake", "lib/pkgconfig")):
                continue
            for n in sorted(names):
                p = os.path.join(dirpath, n)
                files.append((f"cumemtrace/{os.path.relpath(p, args.tree)}", p))
    for need in ("cumemtrace/bin/cumemtrace", "cumemtrace/lib/libcumemtrace.so"):
        if need not in dict(files):
            sys.exit(f"build_wheel: {need} is missing from {args.tree}")

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    dist = f"cumemtrace-{args.version}.dist-info"
    meta = {
        f"{dist}/METADATA": METADATA.format(version=args.version, readme=readme),
        f"{dist}/WHEEL": WHEEL,
        f"{dist}/entry_points.txt": ENTRY_POINTS,
        f"{dist}/top_level.txt": "cumemtrace\n",
    }
    os.makedirs(args.out, exist_ok=True)
    wheel = os.path.join(args.out, f"cumemtrace-{args.version}-{TAG}.whl")
    record = []
    with zipfile.ZipFile(wheel + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        def add(name, data, mode):
            info = zipfile.ZipInfo(name, DATE)
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record.append(record_line(name, data))

        for name, path in files:
            with open(path, "rb") as f:
                data = f.read()
            executable = os.stat(path).st_mode & stat.S_IXUSR
            add(name, data, 0o755 if executable else 0o644)
        for name, text in meta.items():
            add(name, text.encode(), 0o644)
        record.append(f"{dist}/RECORD,,")
        add_info = zipfile.ZipInfo(f"{dist}/RECORD", DATE)
        add_info.external_attr = (stat.S_IFREG | 0o644) << 16
        add_info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(add_info, "\n".join(record) + "\n")
    os.replace(wheel + ".part", wheel)
    print(wheel)


if __name__ == "__main__":
    main()
