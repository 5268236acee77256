"""The release's debug split (scripts/split_debug.py, what scripts/package.sh ships) on this
build's installed tree: the shipped binaries lose every .debug_* section (readelf -S) and keep
their build ID; the debug tree holds one .debug file per binary under that build ID, with its
.debug_info; the stripped CLI still runs; gdb finds source lines through the debug tree and none
without it; and `check` fails on a binary that kept its debug information or lost its .debug file.
Environment: CT_BUILD (the build tree), CT_SOURCE (the source tree)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("CT_BUILD", os.path.join(HERE, "../../build"))
SOURCE = os.environ.get("CT_SOURCE", os.path.join(HERE, "../.."))
SPLIT = os.path.join(SOURCE, "scripts", "split_debug.py")
# Every ELF of the release: the CLI, the preload and the fake driver (README, "without a GPU").
SHIPPED = ["bin/cumemtrace", "lib/libcumemtrace.so", "lib/cumemtrace/fake/libcuda.so.1"]


def run(cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def build_id(path):
    m = re.search(r"Build ID:\s*([0-9a-f]+)", run(["readelf", "-n", path]).stdout)
    assert m, f"{path} has no build ID"
    return m.group(1)


def sections(path):
    return re.findall(r"\]\s+(\.\S+)", run(["readelf", "-S", "-W", path]).stdout)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("split")
    tree, debug = tmp / "tree", tmp / "debug"
    run(["cmake", "--install", BUILD, "--prefix", str(tree)])
    before = {f: build_id(os.path.join(tree, f)) for f in SHIPPED}
    for f in SHIPPED:
        assert ".debug_info" in sections(os.path.join(tree, f)), f"{f} built without -g"
    p = run([sys.executable, SPLIT, "split", str(tree), str(debug)])
    return tree, debug, before, p.stdout


def test_shipped_binaries_stripped_and_debug_files_match(split):
    tree, debug, before, out = split
    for f in SHIPPED:
        path = os.path.join(tree, f)
        secs = sections(path)
        assert not [s for s in secs if s.startswith(".debug_")], (f, secs)
        assert ".symtab" in secs and ".gnu_debuglink" in secs, (f, secs)
        bid = build_id(path)
        assert bid == before[f]
        dbg = os.path.join(debug, ".build-id", bid[:2], bid[2:] + ".debug")
        assert build_id(dbg) == bid
        assert ".debug_info" in sections(dbg)
        assert f"{f}: stripped, debug information under build ID {bid}" in out
    found = sorted(os.path.relpath(os.path.join(d, n), debug)
                   for d, _, names in os.walk(debug) for n in names)
    assert len(found) == len(SHIPPED), found
    assert os.path.getsize(os.path.join(tree, "bin/cumemtrace")) < 10 * 1024 * 1024
    assert run([os.path.join(tree, "bin/cumemtrace"), "--version"]).stdout.strip() == "0.1.0"


def test_gdb_finds_lines_through_the_debug_tree(split):
    tree, debug, _, _ = split
    lib = os.path.join(tree, "lib/libcumemtrace.so")
    cmd = ["gdb", "-batch", "-nx", "-ex", "info line cumemtrace_mark", lib]
    without = run(["gdb", "-batch", "-nx", "-iex", "set debug-file-directory /nonexistent",
                   *cmd[3:]]).stdout
    assert "No line number information" in without, without
    with_debug = run(["gdb", "-batch", "-nx", "-iex", f"set debug-file-directory {debug}",
                      *cmd[3:]]).stdout
    assert re.search(r'Line \d+ of ".*\.(h|cpp)"', with_debug), with_debug


def test_check_fails_on_debug_left_in_or_missing(split, tmp_path):
    tree, debug, _, _ = split
    bad = tmp_path / "tree"
    shutil.copytree(tree, bad, symlinks=True)
    shutil.copy(os.path.join(BUILD, "lib", "libcumemtrace.so"), bad / "lib" / "libcumemtrace.so")
    p = run([sys.executable, SPLIT, "check", str(bad), str(debug)], check=False)
    assert p.returncode == 1
    assert re.search(r"lib/libcumemtrace.so: still has .*\.debug_info.*no \.gnu_debuglink",
                     p.stdout), p.stdout
    assert "bin/cumemtrace: stripped" in p.stdout
    empty = tmp_path / "nodebug"
    empty.mkdir()
    p = run([sys.executable, SPLIT, "check", str(tree), str(empty)], check=False)
    assert p.returncode == 1 and p.stdout.count("no .build-id/") == len(SHIPPED), p.stdout
