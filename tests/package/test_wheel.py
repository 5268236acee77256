"""The pip wheel end to end, on the fake CUDA driver (no GPU): built from this build's installed
tree by scripts/build_wheel.py, installed with `pip install --no-index` into a fresh venv (with
the system's site-packages, for Debian's pytest and pytest-xdist), then:
  - the `cumemtrace` console script and `python -m cumemtrace` are the real CLI;
  - the Python API records a mark, a range and a snapshot when traced, and does nothing when not;
  - Snapshot.report() gives what the program did: one 4 MiB allocation at its line, live at the
    snapshot, made and kept inside the range;
  - `pytest --cumemtrace` (re-executing itself under `cumemtrace run`) fails exactly the test
    that leaks and the test over its peak, naming their allocation sites, alone and with
    `-n 2` (pytest-xdist workers).
Environment: CT_BUILD (the build tree), CT_SOURCE (the source tree)."""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("CT_BUILD", os.path.join(HERE, "../../build"))
SOURCE = os.environ.get("CT_SOURCE", os.path.join(HERE, "../.."))
MiB = 1 << 20


def run(cmd, env=None, cwd=None, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def line_of(path, marker):
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i
    raise AssertionError(f"{marker} not in {path}")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "tree"
    run(["cmake", "--install", BUILD, "--prefix", str(tree)])
    out = run([sys.executable, os.path.join(SOURCE, "scripts", "build_wheel.py"),
               "--tree", str(tree), "--out", str(tmp / "dist")]).stdout.strip()
    assert os.path.basename(out) == "cumemtrace-0.1.0-py3-none-manylinux_2_28_x86_64.whl"
    env_dir = tmp / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)])
    run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", out])
    return env_dir


def env_with_fake(**extra):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(BUILD, "fake")
    env["FAKE_CUDA_DEVICES"] = "1"
    for k in ("LD_PRELOAD", "CUMEMTRACE_OUTPUT", "PYTEST_ADDOPTS", "PYTEST_XDIST_AUTO_NUM_WORKERS"):
        env.pop(k, None)
    env.update(extra)
    return env


def test_console_script_and_module_are_the_cli(venv):
    version = run([os.path.join(BUILD, "bin", "cumemtrace"), "--version"]).stdout
    assert run([str(venv / "bin" / "cumemtrace"), "--version"]).stdout == version
    assert run([str(venv / "bin" / "python"), "-m", "cumemtrace", "--version"]).stdout == version
    bad = run([str(venv / "bin" / "cumemtrace"), "no-such-command"], check=False)
    assert bad.returncode != 0


def test_api_untraced_does_nothing(venv, tmp_path):
    p = run([str(venv / "bin" / "python"), os.path.join(HERE, "api_program.py")],
            env=env_with_fake(), cwd=tmp_path)
    assert json.loads(p.stdout) == {"traced": False, "snapshot": None}
    assert os.listdir(tmp_path) == []


def test_api_traced_marks_ranges_snapshot_and_report(venv, tmp_path):
    out = tmp_path / "out"
    p = run([str(venv / "bin" / "cumemtrace"), "run", "-q", "-o", str(out), "--",
             str(venv / "bin" / "python"), os.path.join(HERE, "api_program.py")],
            env=env_with_fake())
    got = json.loads(p.stdout)
    assert got["traced"] is True
    assert re.fullmatch(r".*/python[0-9.]*\.\d+\.api_test\.json", got["snapshot"]), got
    code = (f"import cumemtrace, json; s = cumemtrace.load({got['snapshot']!r}); "
            "print(json.dumps([s.data['external_annotations'], s.report(), "
            "s.report('--range', 'phase')]))")
    annotations, report, ranged = json.loads(run([str(venv / "bin" / "python"), "-c", code]).stdout)
    assert [(a["stage"], a["name"]) for a in annotations] == [
        ("MARK", "before"), ("START", "phase"), ("END", "phase")]
    # What api_program.py did: one 4 MiB allocation at its ALLOC_LINE, live at the snapshot.
    site = f"<module> (api_program.py:{line_of(os.path.join(HERE, 'api_program.py'), 'ALLOC_LINE')})"
    (d,) = report["devices"]
    assert (d["device"], d["allocations"], d["frees"], d["peak_bytes"], d["end_bytes"]) == (
        0, 1, 0, 4 * MiB, 4 * MiB), d
    assert [(g["site"], g["bytes"], g["count"]) for g in d["live_at_exit"]] == [(site, 4 * MiB, 1)]
    # Inside the range: from nothing to the 4 MiB it made and kept.
    r = ranged["devices"][0]["range"]
    assert (r["name"], r["start_bytes"], r["peak_bytes"], r["leaked_bytes"], r["leaked_count"]) == (
        "phase", 0, 4 * MiB, 4 * MiB, 1), r
    assert r["leaked"][0]["site"] == site


@pytest.mark.parametrize("workers", [None, 2], ids=["serial", "xdist"])
def test_pytest_plugin_fails_the_leak_and_the_peak(venv, tmp_path, workers):
    cases = os.path.join(HERE, "cases_gpu_limits.py")
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-q",
           "--cumemtrace", "--cumemtrace-output", str(tmp_path / "snaps"), cases]
    if workers:
        cmd += ["-n", str(workers)]
    p = run(cmd, env=env_with_fake(), cwd=tmp_path, check=False)
    text = p.stdout + p.stderr
    assert p.returncode == 1, text
    assert re.search(r"\b2 failed, 2 passed\b", text), text
    failed = sorted(re.findall(r"^FAILED \S+::(\w+)", text, re.M))
    assert failed == ["test_leaks", "test_over_peak"], text
    # The sites: the Python lines that allocated, from the engine's stacks.
    # (a site line shows the file's base name, a stack line its whole path)
    leak_site = rf"allocate_leaked \((\S*/)?cases_gpu_limits\.py:{line_of(cases, 'LEAK_LINE')}\)"
    block_site = rf"allocate_block \((\S*/)?cases_gpu_limits\.py:{line_of(cases, 'BLOCK_LINE')}\)"
    assert re.search(leak_site, text), text
    assert re.search(block_site, text), text
    assert "2.00 MiB leaked" in text, text
    # The summary of the biggest tests: test_over_peak first, with its own 6 MiB (never test_leaks'
    # 2 MiB, live before it when that ran earlier in the same process).
    assert re.search(r"tests with the highest GPU peak\s*=+\n\s*6\.00 MiB\s+\S+::test_over_peak",
                     text), text
    assert "(no stack recorded)" not in text, text
