"""`cmake --install`: the installed tree has exactly the release layout, works after being moved
(the CLI finds the preload as ../lib and the preload the collector as ../bin), and a consumer
finds the header through find_package(cumemtrace) and through pkg-config."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("CT_BUILD", os.path.join(HERE, "../../build"))
SOURCE = os.environ.get("CT_SOURCE", os.path.join(HERE, "../.."))
MiB = 1 << 20


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install")
    run(["cmake", "--install", BUILD, "--prefix", str(tmp / "first")])
    shutil.move(str(tmp / "first"), str(tmp / "elsewhere"))
    return tmp / "elsewhere"


def test_layout(moved):
    files = sorted(os.path.relpath(os.path.join(d, f), moved)
                   for d, _, names in os.walk(moved) for f in names)
    assert [f for f in files if not f.startswith("share/doc/")] == [
        "bin/cumemtrace", "include/cumemtrace.h", "lib/cmake/cumemtrace/cumemtraceConfig.cmake",
        "lib/cmake/cumemtrace/cumemtraceConfigVersion.cmake",
        "lib/cumemtrace/fake/libcuda.so.1",
        "lib/cumemtrace/python/cumemtrace_modules.py",
        "lib/cumemtrace/python/cumemtrace_phases.py",
        "lib/cumemtrace/python/cumemtrace_ranks.py",
        "lib/cumemtrace/python/cumemtrace_torch.py",
        "lib/cumemtrace/python/cumemtrace_torch_layouts.py",
        "lib/cumemtrace/python/cumemtrace_workspaces.py",
        "lib/cumemtrace/python/sitecustomize.py",
        "lib/libcumemtrace.so",
        "lib/pkgconfig/cumemtrace.pc", "share/cumemtrace/grafana/cumemtrace.json",
        "share/cumemtrace/schemas/snapshot.schema.json",
        "share/cumemtrace/schemas/summary.schema.json"]
    # What the docs name ships: the dashboard (docs/metrics.md) is the repository's own.
    with open(os.path.join(SOURCE, "share", "grafana", "cumemtrace.json"), "rb") as f:
        assert (moved / "share/cumemtrace/grafana/cumemtrace.json").read_bytes() == f.read()
    assert "share/doc/cumemtrace/README.md" in files
    # Nothing installed refers to where it was installed first.
    for f in files:
        with open(os.path.join(moved, f), "rb") as fh:
            assert b"/first/" not in fh.read(), f


def test_moved_tree_traces(moved, tmp_path):
    # The release's own fake driver (README, "without a GPU"), not the build tree's.
    env = dict(os.environ, LD_LIBRARY_PATH=str(moved / "lib" / "cumemtrace" / "fake"),
               FAKE_CUDA_DEVICES="1")
    env.pop("CUMEMTRACE_PRELOAD", None)
    env.pop("CUMEMTRACE_COLLECTOR", None)
    out = tmp_path / "out"
    run([str(moved / "bin" / "cumemtrace"), "run", "-q", "-o", str(out), "--", sys.executable,
         os.path.join(SOURCE, "tests", "e2e", "py_alloc.py")], env=env)
    # The final snapshot and its summary (verdicts/process_summary.h) beside it.
    assert sorted(p.suffix for p in out.iterdir()) == [".json", ".summary"]
    (snap,) = out.glob("*.json")
    report = run([str(moved / "bin" / "cumemtrace"), "report", str(snap), "--frames", "40"]).stdout
    assert "load_weights" in report
    # The preload loaded from the moved tree found its collector there too (LD_PRELOAD alone).
    env2 = dict(env, LD_PRELOAD=str(moved / "lib" / "libcumemtrace.so"),
                CUMEMTRACE_OUTPUT=str(tmp_path / "out2"))
    run([sys.executable, os.path.join(SOURCE, "tests", "e2e", "py_alloc.py")], env=env2)
    assert sorted(p.suffix for p in (tmp_path / "out2").iterdir()) == [".json", ".summary"]


def test_find_package_and_pkg_config(moved, tmp_path):
    src = tmp_path / "consumer"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(consumer C)\n"
        "find_package(cumemtrace 0.1 REQUIRED)\n"
        "add_executable(consumer main.c)\n"
        "target_link_libraries(consumer PRIVATE cumemtrace::headers)\n"
        "file(WRITE ${CMAKE_BINARY_DIR}/paths.txt "
        "\"${CUMEMTRACE_EXECUTABLE}\\n${CUMEMTRACE_PRELOAD_LIBRARY}\\n\")\n")
    (src / "main.c").write_text(
        '#include <cumemtrace.h>\nint main(void) { cumemtrace_mark("x"); return 0; }\n')
    run(["cmake", "-S", str(src), "-B", str(tmp_path / "b"), f"-DCMAKE_PREFIX_PATH={moved}"])
    run(["cmake", "--build", str(tmp_path / "b")])
    run([str(tmp_path / "b" / "consumer")])
    assert (tmp_path / "b" / "paths.txt").read_text().splitlines() == [
        str(moved / "bin" / "cumemtrace"), str(moved / "lib" / "libcumemtrace.so")]
    env = dict(os.environ, PKG_CONFIG_PATH=str(moved / "lib" / "pkgconfig"))
    cflags = run(["pkg-config", "--cflags", "cumemtrace"], env=env).stdout.split()
    assert len(cflags) == 1 and cflags[0].startswith("-I")
    assert os.path.realpath(cflags[0][2:]) == os.path.realpath(moved / "include")
